"""The Slurm Wrapper Suite: swrun, swbatch and swqueue.

Users name a virtual partition (gpux1..gpuxN: N GPUs; cpun1..cpunN: N whole nodes); the
suite computes the full Slurm request from the virtual-partition table that hal-provision
renders from the cluster model, so it can never disagree with slurm.conf.

This package uses only the standard library (Rich is optional for swqueue), so a login
node can run it with the system python3.
"""
