#!/usr/bin/python3
"""hal-mps: CUDA MPS for Slurm jobs holding mps GRES (gpu_sharing.mps_per_gpu).

Slurm does not start MPS; this program is slurm.conf's Prolog, Epilog and TaskProlog on every
node (one slurm.conf for all of them), and tells which by SLURM_SCRIPT_CONTEXT:

- prolog_slurmd (root): a job with mps has CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and, in
  CUDA_VISIBLE_DEVICES, the GPU its mps come from. The job is recorded under the GPU's state
  directory, and the first such job starts that GPU's MPS control daemon
  (`nvidia-cuda-mps-control -d`, seeing only that GPU, its pipes under /run, not /tmp: jobs
  may have a private /tmp).
- prolog_task (the user): prints `export CUDA_MPS_PIPE_DIRECTORY=...` for the job's GPU, so
  its CUDA programs find the daemon; Slurm applies such lines to the task.
- epilog_slurmd (root): the job's record goes; after the GPU's last job the daemon is told to
  quit.

A job without mps (no percentage, or no record) is left alone: the program then does nothing
and exits 0, so nodes without MPS GPUs run it too. A daemon that does not start or quit makes it
exit non-zero, and slurmd drains the node. State lives in /run, which a reboot empties along
with the daemons. Standard library only: it runs on bare compute nodes.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

STATE_DIR = Path("/run/hal-mps")
CONTROL = "nvidia-cuda-mps-control"
# slurmd runs Prolog and Epilog without PATH.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class GpuState:
    """One GPU's MPS: the daemon's pipe and log directories and the jobs using it."""

    def __init__(self, root: Path, gpu: str):
        self.dir = root / f"gpu{gpu}"
        self.gpu = gpu
        self.pipe = self.dir / "pipe"
        self.log = self.dir / "log"
        self.jobs = self.dir / "jobs"

    def daemon_env(self, env: dict[str, str]) -> dict[str, str]:
        out = {k: v for k, v in env.items() if not k.startswith(("CUDA_", "SLURM_"))}
        out.update(
            PATH=env.get("PATH") or DEFAULT_PATH,
            CUDA_VISIBLE_DEVICES=self.gpu,
            CUDA_MPS_PIPE_DIRECTORY=str(self.pipe),
            CUDA_MPS_LOG_DIRECTORY=str(self.log),
        )
        return out

    def locked(self):
        """An exclusive lock on the GPU's state: jobs start and end on a node at the same time."""
        self.dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.dir / "lock", "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        return handle


def _job_id(env: dict[str, str]) -> str | None:
    return env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")


def _control(env: dict[str, str], state: GpuState, args: list[str], stdin: str | None = None) -> int:
    daemon_env = state.daemon_env(env)
    program = shutil.which(CONTROL, path=daemon_env["PATH"])
    if program is None:
        print(f"hal-mps: {CONTROL} is not on {daemon_env['PATH']}", file=sys.stderr)
        return 1
    done = subprocess.run([program, *args], env=daemon_env, input=stdin, text=True, capture_output=True)
    if done.returncode != 0:
        print(
            f"hal-mps: {CONTROL} {' '.join(args)} (GPU {state.gpu}) exited {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()}",
            file=sys.stderr,
        )
    return done.returncode


def prolog(env: dict[str, str], root: Path) -> int:
    gpus = [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    job = _job_id(env)
    if not env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") or not gpus or job is None:
        return 0
    rc = 0
    for gpu in gpus:
        state = GpuState(root, gpu)
        with state.locked():
            for directory in (state.pipe, state.log, state.jobs):
                directory.mkdir(mode=0o755, exist_ok=True)
            first = not any(state.jobs.iterdir())
            (state.jobs / job).write_text(env.get("SLURM_JOB_UID", "") + "\n")
            if first:
                rc = _control(env, state, ["-d"]) or rc
    return rc


def _states_of(job: str, root: Path) -> list[GpuState]:
    if not root.is_dir():
        return []
    gpus = [d.name.removeprefix("gpu") for d in root.iterdir() if (d / "jobs" / job).exists()]
    return [GpuState(root, gpu) for gpu in sorted(gpus, key=lambda g: (len(g), g))]


def epilog(env: dict[str, str], root: Path) -> int:
    job = _job_id(env)
    if job is None:
        return 0
    rc = 0
    for state in _states_of(job, root):
        with state.locked():
            (state.jobs / job).unlink(missing_ok=True)
            if not any(state.jobs.iterdir()):
                rc = _control(env, state, [], stdin="quit\n") or rc
    return rc


def task_prolog(env: dict[str, str], root: Path) -> int:
    """The job's tasks reach the daemon of its (first) mps GPU: Slurm gives a job's mps from one
    GPU of each node unless gres.conf says all_sharing, which hal-provision does not write."""
    job = _job_id(env)
    states = _states_of(job, root) if job is not None else []
    if states:
        print(f"export CUDA_MPS_PIPE_DIRECTORY={states[0].pipe}")
        print(f"export CUDA_MPS_LOG_DIRECTORY={states[0].log}")
    return 0


CONTEXTS = {"prolog_slurmd": prolog, "epilog_slurmd": epilog, "prolog_task": task_prolog}


def main(env: dict[str, str] | None = None, root: Path | None = None) -> int:
    env = dict(os.environ if env is None else env)
    root = STATE_DIR if root is None else root
    action = CONTEXTS.get(env.get("SLURM_SCRIPT_CONTEXT", ""))
    # Run in another place (an srun prolog, by hand), it has nothing to do.
    return action(env, root) if action else 0


if __name__ == "__main__":
    sys.exit(main())
