#!/usr/bin/env python3
"""srun for one machine without Slurm, for bench/resnet50_gpu.sh and bench/resnet50_cpu.sh.

Starts --ntasks copies of the command on this host, each with the variables slurmstepd sets
for a task of a one-node step (SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_*), and,
in a job with GPUs (SLURM_GPUS_ON_NODE above 0), CUDA_VISIBLE_DEVICES set to the step's GPUs
(0..ntasks-1) unless it is set already; a job without GPUs gets none, as under Slurm. Returns
the highest exit status. The recipe reads these through slurmenv.py exactly as under Slurm;
nothing else of srun is emulated (one node only: --nodes must be 1). --cpu-bind=sockets binds
task i to the CPUs of its share of this process's CPUs (i-th of --ntasks equal slices), which
is the socket on a machine described as ntasks sockets (bench/cpu_job_script.py --sockets).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="srun (bench)")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--ntasks", type=int, default=1)
    parser.add_argument("--ntasks-per-node", type=int, default=None)
    parser.add_argument("--cpus-per-task", type=int, default=1)
    parser.add_argument("--kill-on-bad-exit", default=None)
    parser.add_argument("--export", default="ALL")
    parser.add_argument("--cpu-bind", default=None)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.nodes != 1:
        parser.error(f"--nodes={args.nodes}: this stand-in runs one-node steps only")
    if args.ntasks_per_node not in (None, args.ntasks):
        parser.error("--ntasks-per-node must equal --ntasks on one node")
    host = socket.gethostname().split(".")[0]
    base = dict(os.environ)
    base.update(
        {
            "SLURM_STEP_NUM_TASKS": str(args.ntasks),
            "SLURM_NTASKS": str(args.ntasks),
            "SLURM_STEP_NUM_NODES": "1",
            "SLURM_STEP_TASKS_PER_NODE": str(args.ntasks),
            "SLURM_STEP_NODELIST": host,
            "SLURM_NODEID": "0",
            "SLURM_CPUS_PER_TASK": str(args.cpus_per_task),
        }
    )
    if base.get("SLURM_GPUS_ON_NODE", "0") not in ("", "0"):
        base.setdefault("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(args.ntasks)))
    cpus = sorted(os.sched_getaffinity(0))
    share = len(cpus) // args.ntasks
    procs = []
    for rank in range(args.ntasks):
        env = dict(base, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank))
        bind = None
        if args.cpu_bind == "sockets" and share:
            mask = set(cpus[rank * share : (rank + 1) * share])
            bind = lambda mask=mask: os.sched_setaffinity(0, mask)  # noqa: E731
        procs.append(subprocess.Popen(args.command, env=env, preexec_fn=bind))
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
