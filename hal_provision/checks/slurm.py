"""Checks: slurm."""
