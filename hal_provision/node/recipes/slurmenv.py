"""One srun task's distributed settings, derived from Slurm's environment.

The recipe's job script starts one srun task per GPU on every node of the job. Each task
reads who it is from the variables slurmstepd sets for it, and this module is the one place
that reading happens: train_resnet50.py hands `Rendezvous.torch_env()` to PyTorch's env://
initialisation and wiring_probe.py checks exactly the same values, so a probe that passes
proves the settings the recipe will use.

    rank              SLURM_PROCID
    world_size        SLURM_STEP_NUM_TASKS, else SLURM_NTASKS
    local_rank        SLURM_LOCALID
    node_rank         SLURM_NODEID
    nnodes            SLURM_STEP_NUM_NODES, else SLURM_NNODES, else SLURM_JOB_NUM_NODES
    local_world_size  this node's entry (index SLURM_NODEID) of SLURM_STEP_TASKS_PER_NODE,
                      else SLURM_TASKS_PER_NODE, in Slurm's compressed form "4(x2)", "4,2(x3)"
    master_addr       MASTER_ADDR, else the first host of SLURM_STEP_NODELIST, else of
                      SLURM_JOB_NODELIST (node 0 of the step: Slurm lists nodes in index order)
    master_port       HAL_RECIPE_PORT, else MASTER_PORT, else 20000 + SLURM_JOB_ID % 20000
    visible_devices   CUDA_VISIBLE_DEVICES (Slurm sets it to the step's GPUs on the node);
                      in a CPU step (gpus=False) whatever is set, often nothing
    device            local_rank: the CUDA index of this rank's GPU among the visible ones
                      (unused in a CPU step)
    gpu_ids           SLURM_STEP_GPUS, else SLURM_JOB_GPUS: node-global GPU numbers, which on
                      HAL are the /dev/nvidiaN minor numbers (gres.conf lists File=/dev/nvidia0
                      first); may be empty

The step variables come first because a step may use fewer nodes or tasks than its job.

The default port depends on the job so that two jobs whose first node is the same (GPU jobs
share nodes) do not both try to listen on it; it only repeats for job IDs 20,000 apart.
Ports 32768 and up overlap Linux's ephemeral range, so a busy node can rarely have the port
taken by an outgoing connection; set HAL_RECIPE_PORT then, and also when one job runs two
steps at the same time (both would pick the job's port). HAL_RECIPE_PORT wins over
MASTER_PORT because a generic MASTER_PORT exported from a login shell (srun --export=ALL) is
more likely stale than a variable named for this recipe.

Standard library only.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from typing import Mapping

PORT_BASE = 20000
PORT_SPAN = 20000
PORT_VAR = "HAL_RECIPE_PORT"
# "cpu" in a job without GPUs: the job script's CPU branch sets it, and the recipe and the
# probe then expect no GPU (from_slurm(gpus=False)).
DEVICE_VAR = "HAL_RECIPE_DEVICE"


class SlurmEnvError(ValueError):
    """A Slurm variable is missing, malformed or contradicts another; the message names it."""


@dataclass(frozen=True)
class Rendezvous:
    """Where this task meets the others, who it is among them, and which GPU it uses."""

    master_addr: str
    master_port: int
    world_size: int
    rank: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    hostname: str
    visible_devices: list[str]
    device: int
    gpu_ids: list[str]

    def torch_env(self) -> dict[str, str]:
        """The variables torch.distributed's env:// initialisation (and torchrun's contract) reads."""
        return {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "WORLD_SIZE": str(self.world_size),
            "RANK": str(self.rank),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "NODE_RANK": str(self.node_rank),
        }


def from_slurm(environ: Mapping[str, str], hostname: str | None = None, gpus: bool = True) -> Rendezvous:
    """The Rendezvous of the srun task whose environment is `environ`.

    `hostname` defaults to socket.gethostname(). SlurmEnvError, naming the variable, when one
    is missing or malformed or the variables disagree with each other. gpus=False: a step on
    CPUs (a cpunN job), where no GPU need be visible to the tasks.
    """
    rank = _int(environ, "SLURM_PROCID")
    world_size = _int(environ, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", minimum=1)
    local_rank = _int(environ, "SLURM_LOCALID")
    node_rank = _int(environ, "SLURM_NODEID")
    nnodes = _int(environ, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", minimum=1)
    per_node_var, per_node_text = _required(environ, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    per_node = tasks_per_node(per_node_text, per_node_var)

    if rank >= world_size:
        raise SlurmEnvError(f"SLURM_PROCID={rank} is not below the step's {world_size} tasks")
    if node_rank >= nnodes:
        raise SlurmEnvError(f"SLURM_NODEID={node_rank} is not below the step's {nnodes} nodes")
    if len(per_node) != nnodes or sum(per_node) != world_size:
        raise SlurmEnvError(f"{per_node_var}={per_node_text!r} does not describe {world_size} tasks on {nnodes} nodes")
    local_world_size = per_node[node_rank]
    if local_rank >= local_world_size:
        raise SlurmEnvError(
            f"SLURM_LOCALID={local_rank} is not below this node's {local_world_size} tasks "
            f"({per_node_var}={per_node_text!r})"
        )

    visible = visible_devices(environ) if gpus or "CUDA_VISIBLE_DEVICES" in environ else []
    if gpus and len(visible) < local_world_size:
        raise SlurmEnvError(
            f"CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES', '')!r} shows {len(visible)} GPU(s) to "
            f"{local_world_size} tasks on this node: start one task per GPU, every task seeing all the "
            "node's GPUs (no --gpus-per-task or --gpu-bind)"
        )
    _gpu_var, gpu_text = _optional(environ, "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")

    return Rendezvous(
        master_addr=environ.get("MASTER_ADDR")
        or first_host(_required(environ, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST")[1]),
        master_port=master_port(environ),
        world_size=world_size,
        rank=rank,
        local_rank=local_rank,
        local_world_size=local_world_size,
        node_rank=node_rank,
        nnodes=nnodes,
        hostname=hostname or socket.gethostname(),
        visible_devices=visible,
        device=local_rank,
        gpu_ids=_split(gpu_text),
    )


def master_port(environ: Mapping[str, str]) -> int:
    """HAL_RECIPE_PORT, else MASTER_PORT, else the job's default port (default_port)."""
    for name in (PORT_VAR, "MASTER_PORT"):
        if environ.get(name):
            return _int(environ, name, minimum=1, maximum=65535)
    try:
        return default_port(_int(environ, "SLURM_JOB_ID"))
    except SlurmEnvError as exc:
        raise SlurmEnvError(f"{exc}; or set {PORT_VAR}") from None


def default_port(job_id: int) -> int:
    """20000..39999, different for jobs whose IDs are less than 20,000 apart."""
    return PORT_BASE + job_id % PORT_SPAN


def visible_devices(environ: Mapping[str, str]) -> list[str]:
    """CUDA_VISIBLE_DEVICES as a list; empty for Slurm's "NoDevFiles" (a step without GPUs)."""
    if "CUDA_VISIBLE_DEVICES" not in environ:
        raise SlurmEnvError("CUDA_VISIBLE_DEVICES is not set: the step has no GPUs (submit with swbatch -p gpuxN)")
    text = environ["CUDA_VISIBLE_DEVICES"]
    return [] if text.strip() == "NoDevFiles" else _split(text)


_TASKS_ITEM = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def tasks_per_node(text: str, variable: str = "SLURM_TASKS_PER_NODE") -> list[int]:
    """Slurm's compressed tasks-per-node list, expanded: "4,2(x3)" -> [4, 2, 2, 2]."""
    counts: list[int] = []
    for item in text.split(","):
        m = _TASKS_ITEM.match(item.strip())
        if not m or int(m.group(2) or 1) < 1:
            raise SlurmEnvError(f"{variable}={text!r} is not Slurm's tasks-per-node form (like '4(x2)' or '4,2(x3)')")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


_HOST_CHARS = re.compile(r"^[A-Za-z0-9._\-\[\],]+$")
_INDEX = re.compile(r"^(\d+)(?:-\d+)?$")


def first_host(hostlist: str) -> str:
    """The first host of a Slurm hostlist expression, zero padding kept:
    "hal01" -> hal01, "hal[01-02]" -> hal01, "hal[01,03-04],login" -> hal01,
    "gpu-[1-4]a" -> gpu-1a, "rack[1-2]-n[07-08]" -> rack1-n07."""
    text = hostlist.strip()
    if not text or not _HOST_CHARS.match(text):
        raise SlurmEnvError(f"not a Slurm hostlist: {hostlist!r}")
    depth = 0
    end = len(text)
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            end = min(end, i)
        if depth not in (0, 1):
            raise SlurmEnvError(f"unbalanced brackets in the hostlist {hostlist!r}")
    if depth:
        raise SlurmEnvError(f"unbalanced brackets in the hostlist {hostlist!r}")
    host = re.sub(r"\[([^\[\]]*)\]", lambda m: _first_index(m.group(1), hostlist), text[:end])
    if not host:
        raise SlurmEnvError(f"the hostlist {hostlist!r} starts with an empty name")
    return host


def _first_index(ranges: str, hostlist: str) -> str:
    m = _INDEX.match(ranges.split(",", 1)[0])
    if not m:
        raise SlurmEnvError(f"not a Slurm hostlist range [{ranges}] in {hostlist!r}")
    return m.group(1)


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _optional(environ: Mapping[str, str], *names: str) -> tuple[str, str]:
    """(name, value) of the first of `names` that is set and not empty; (names[0], "") if none."""
    for name in names:
        if environ.get(name, "").strip():
            return name, environ[name].strip()
    return names[0], ""


def _required(environ: Mapping[str, str], *names: str) -> tuple[str, str]:
    name, value = _optional(environ, *names)
    if not value:
        also = f" (nor {', '.join(names[1:])})" if len(names) > 1 else ""
        raise SlurmEnvError(f"{names[0]} is not set{also}: not inside an srun step?")
    return name, value


def _int(environ: Mapping[str, str], *names: str, minimum: int = 0, maximum: int | None = None) -> int:
    name, text = _required(environ, *names)
    try:
        value = int(text)
    except ValueError:
        raise SlurmEnvError(f"{name}={text!r} is not a whole number") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"{minimum}..{maximum}" if maximum is not None else f"at least {minimum}"
        raise SlurmEnvError(f"{name}={value} is out of range ({bound})")
    return value
