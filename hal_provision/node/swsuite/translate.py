"""Turn a virtual-partition request into Slurm arguments.

The rule (also in `swrun --help` and docs/users-guide.md):

* gpuxN, N GPUs. A job takes whole GPUs with their share of the node: each GPU brings
  CPUS_PER_GPU hardware threads (-c; default and maximum: the node's threads divided by its
  GPUs, 40 on an AC922). GPUs fill socket 0 first, so --sockets-per-node is the number of
  sockets those GPUs hang off and --cores-per-socket the cores each socket gives.
  N up to one node's GPUs: one node. N beyond that: whole nodes, N must be a multiple of the
  GPUs per node, every node with all its GPUs.
* cpunN, N whole nodes, all hardware threads, no GPU.
* a shard partition (kind shard), N shards of a GPU on one node (--gres=shard:N), shared with
  other jobs: the hardware threads of N shards' part of one GPU's share, at least one core.
* Every job: --ntasks-per-node = its hardware threads per node (for a command given to
  swrun: one task per node, --ntasks = the nodes, --cpus-per-task = those threads, so it runs
  once per node), --threads-per-core = the node's SMT, --mem-per-cpu from the table, --time
  from -t (hours or a Slurm time), at most the virtual partition's limit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field


class SwError(Exception):
    """A request the suite cannot turn into a valid Slurm job; the message says why."""


TIME_FORMS = "HOURS (e.g. 24 or 1.5), H:MM, H:MM:SS or D-HH:MM:SS"

# Slurm keeps a time limit as 32-bit minutes, the top values meaning "no value" and
# "infinite": a longer -t is refused here rather than overflowing on the way there.
SLURM_MAX_MINUTES = 2**32 - 3


def shown(text: str, limit: int = 40) -> str:
    """TEXT's repr for a message, cut to LIMIT characters: a user's argument may be long."""
    r = repr(text)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def parse_time(text: str) -> int:
    """Minutes from the accepted time forms (ASCII digits); SwError naming -t/--time and the
    forms when the text is none of them, zero, or longer than Slurm can take."""
    t = text.strip()
    longer = SwError(f"-t/--time: the time {shown(text)} is longer than Slurm can take")
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", t):
        hours = float(t)  # inf from about 310 digits on, which math.ceil cannot take
        if hours * 60 > SLURM_MAX_MINUTES:
            raise longer
        minutes = math.ceil(hours * 60)
    else:
        m = (
            re.fullmatch(r"([0-9]+)-([0-9]{1,2}):([0-9]{2}):([0-9]{2})", t)
            or re.fullmatch(r"()([0-9]+):([0-9]{2}):([0-9]{2})", t)
            or re.fullmatch(r"()([0-9]+):([0-9]{2})()", t)
        )
        if not m or int(m.group(3)) > 59 or int(m.group(4) or 0) > 59:
            raise SwError(f"-t/--time: cannot read the time {shown(text)}: use {TIME_FORMS}")
        try:
            d, h, mi, s = (int(g or 0) for g in m.groups())
        except ValueError:  # more digits than Python turns into a number
            raise longer from None
        minutes = d * 1440 + h * 60 + mi + math.ceil(s / 60)
    if minutes <= 0:
        raise SwError(f"-t/--time: the time {shown(text)} is zero: use {TIME_FORMS}")
    if minutes > SLURM_MAX_MINUTES:
        raise longer
    return minutes


def slurm_time(minutes: int) -> str:
    """HH:MM:SS with as many hours as needed (Slurm accepts 48:00:00)."""
    h, m = divmod(minutes, 60)
    return f"{h:02d}:{m:02d}:00"


@dataclass
class Request:
    virtual_partition: str | None
    cpus_per_gpu: int | None = None
    time: str | None = None
    slurm_args: list[str] = field(default_factory=list)  # passed through, after ours


@dataclass(frozen=True)
class JobShape:
    """What one job of a virtual partition takes: its nodes, and on each of them."""

    nodes: int
    tasks_per_node: int  # hardware threads (CPUs) on each node
    sockets_per_node: int
    cores_per_socket: int
    gpus_per_node: int  # 0 for cpu and shard kinds
    shards_per_node: int = 0  # shard kinds: --gres=shard:N


def job_shape(name: str, vp: dict, node: dict, cpus_per_gpu: int | None = None) -> JobShape:
    """The shape of a job of virtual partition `name` (the rule above): `vp` its table entry
    (kind, gpus, nodes, partition), `node` the node build it is shaped for (the table's
    "node"). SwError when no job can have it: no GPUs, -c out of range, GPUs that span
    nodes other than as whole nodes. Whether the partition has that many nodes and the
    memory is resolve's to say.

    The one resolver: swrun/swbatch, the checks of swsuite.virtual_partitions and the
    portal's ask it (through Cluster.job_shape on the controller), so they agree.
    """
    threads = node["threads_per_core"]
    node_threads = node["sockets"] * node["cores_per_socket"] * threads
    if vp["kind"] == "shard":
        return _shard_shape(name, vp, node, cpus_per_gpu, node_threads)
    if vp["kind"] != "gpu":
        if cpus_per_gpu is not None:
            raise SwError(f"{name} has no GPUs: -c/--cpus-per-gpu applies to gpux partitions")
        return JobShape(vp["nodes"], node_threads, node["sockets"], node["cores_per_socket"], 0)
    per_node = len(node["gpu_sockets"])
    if per_node == 0:
        raise SwError(f"partition {vp['partition']} has no GPUs")
    share = node_threads // per_node
    cpg = share if cpus_per_gpu is None else cpus_per_gpu
    if not 1 <= cpg <= share:
        raise SwError(f"-c/--cpus-per-gpu must be 1..{share} (hardware threads per GPU on this node); got {cpg}")
    if cpg % threads:
        raise SwError(f"-c/--cpus-per-gpu must be a multiple of {threads} (whole cores, SMT{threads}); got {cpg}")
    gpus = vp["gpus"]
    if gpus <= per_node:
        nodes, on_node = 1, gpus
    else:
        if gpus % per_node:
            raise SwError(f"{name}: {gpus} GPUs span nodes only as whole nodes of {per_node} GPUs")
        nodes, on_node = gpus // per_node, per_node
    sockets = len(set(sorted(node["gpu_sockets"])[:on_node]))
    tasks = on_node * cpg
    return JobShape(nodes, tasks, sockets, math.ceil(tasks / threads / sockets), on_node)


def _shard_shape(name: str, vp: dict, node: dict, cpus_per_gpu: int | None, node_threads: int) -> JobShape:
    """A shard partition: N shards of the node's GPUs on one node, with their share of one GPU's
    hardware threads (at least one core), on one socket."""
    if cpus_per_gpu is not None:
        raise SwError(f"{name} shares a GPU: -c/--cpus-per-gpu applies to gpux partitions")
    per_gpu, per_node = node.get("shards_per_gpu"), len(node["gpu_sockets"])
    if not per_gpu or not per_node:
        raise SwError(f"partition {vp['partition']} offers no GPU shards")
    if vp["shards"] > per_gpu * per_node:
        raise SwError(f"{name}: {vp['shards']} shards, more than a node's {per_gpu * per_node}")
    threads = node["threads_per_core"]
    cpus = max(threads, node_threads // per_node * vp["shards"] // per_gpu // threads * threads)
    return JobShape(1, cpus, 1, math.ceil(cpus / threads), 0, vp["shards"])


def resolve(table: dict, req: Request, one_task_per_node: bool = False) -> list[str]:
    """Slurm options (without the command) for a request; SwError when it cannot be met.

    one_task_per_node: the same CPUs as one task per node (--ntasks-per-node=1
    --cpus-per-task=N), so that a command given to swrun runs once per node, not once per
    hardware thread.
    """
    vps = table.get("virtual_partitions", {})
    vp = vps.get(req.virtual_partition)
    if vp is None:
        raise SwError(
            f"unknown virtual partition {shown(req.virtual_partition)}; valid: {', '.join(sorted_names(vps))}"
        )
    node = vp["node"]
    shape = job_shape(req.virtual_partition, vp, node, req.cpus_per_gpu)
    if shape.nodes > node["count"]:
        raise SwError(
            f"{req.virtual_partition} needs {shape.nodes} nodes; partition {vp['partition']} has {node['count']}"
        )
    tasks = shape.tasks_per_node
    if tasks * vp["mem_per_cpu_mib"] > node["real_memory_mib"]:
        raise SwError(f"{tasks} CPUs x {vp['mem_per_cpu_mib']} MiB exceed a node's {node['real_memory_mib']} MiB")
    minutes = parse_time(req.time) if req.time is not None else vp["default_time_hours"] * 60
    if minutes > vp["max_time_hours"] * 60:
        raise SwError(
            f"{req.virtual_partition} allows at most {vp['max_time_hours']} hours; asked {slurm_time(minutes)}"
        )
    args = [
        f"--partition={vp['partition']}",
        f"--time={slurm_time(minutes)}",
        f"--nodes={shape.nodes}",
        # --ntasks too: without it srun derives the task count from sockets x cores x threads
        # (40 tasks of 40 CPUs for gpux1) and refuses: "Requested node configuration is not
        # available" (seen with Slurm 22.05 on the sandbox; sbatch does not do this).
        *(
            ["--ntasks-per-node=1", f"--ntasks={shape.nodes}", f"--cpus-per-task={tasks}"]
            if one_task_per_node
            else [f"--ntasks-per-node={tasks}"]
        ),
        f"--sockets-per-node={shape.sockets_per_node}",
        f"--cores-per-socket={shape.cores_per_socket}",
        f"--threads-per-core={node['threads_per_core']}",
        f"--mem-per-cpu={vp['mem_per_cpu_mib']}",
    ]
    if shape.gpus_per_node:
        args.append(f"--gres=gpu:{node['gpu_type']}:{shape.gpus_per_node}")
    if shape.shards_per_node:
        args.append(f"--gres=shard:{shape.shards_per_node}")
    return args + list(req.slurm_args)


def sorted_names(vps: dict) -> list[str]:
    def key(name: str):
        m = re.fullmatch(r"([a-z]+)(\d+)", name)
        return (m.group(1), int(m.group(2))) if m else (name, 0)

    return sorted(vps, key=key)
