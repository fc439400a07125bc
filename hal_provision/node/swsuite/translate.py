"""Turn a virtual-partition request into Slurm arguments.

The rule (also in `swrun --help` and the README):

* gpuxN, N GPUs. A job takes whole GPUs with their share of the node: each GPU brings
  CPUS_PER_GPU hardware threads (-c; default and maximum: the node's threads divided by its
  GPUs, 40 on an AC922). GPUs fill socket 0 first, so --sockets-per-node is the number of
  sockets those GPUs hang off and --cores-per-socket the cores each socket gives.
  N up to one node's GPUs: one node. N beyond that: whole nodes, N must be a multiple of the
  GPUs per node, every node with all its GPUs.
* cpunN, N whole nodes, all hardware threads, no GPU.
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


def parse_time(text: str) -> int:
    """Minutes from the accepted time forms; SwError names them when the text is none."""
    t = text.strip()
    try:
        if re.fullmatch(r"\d+(\.\d+)?", t):
            minutes = math.ceil(float(t) * 60)
        elif m := re.fullmatch(r"(\d+)-(\d{1,2}):(\d{2}):(\d{2})", t):
            d, h, mi, s = map(int, m.groups())
            _check_clock(mi, s)
            minutes = d * 1440 + h * 60 + mi + math.ceil(s / 60)
        elif m := re.fullmatch(r"(\d+):(\d{2}):(\d{2})", t):
            h, mi, s = map(int, m.groups())
            _check_clock(mi, s)
            minutes = h * 60 + mi + math.ceil(s / 60)
        elif m := re.fullmatch(r"(\d+):(\d{2})", t):
            h, mi = map(int, m.groups())
            _check_clock(mi, 0)
            minutes = h * 60 + mi
        else:
            raise ValueError
    except ValueError:
        raise SwError(f"cannot read the time {text!r}: use {TIME_FORMS}") from None
    if minutes <= 0:
        raise SwError(f"the time {text!r} is zero: use {TIME_FORMS}")
    return minutes


def _check_clock(minutes: int, seconds: int) -> None:
    if minutes > 59 or seconds > 59:
        raise ValueError


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
            f"unknown virtual partition {req.virtual_partition!r}; valid: {', '.join(sorted_names(vps))}"
        )
    node = vp["node"]
    threads = node["threads_per_core"]
    node_threads = node["sockets"] * node["cores_per_socket"] * threads
    if vp["kind"] == "gpu":
        opts = _gpu_job(req, vp, node, threads, node_threads)
    else:
        if req.cpus_per_gpu is not None:
            raise SwError(f"{req.virtual_partition} has no GPUs: -c/--cpus-per-gpu applies to gpux partitions")
        if vp["nodes"] > node["count"]:
            raise SwError(f"{req.virtual_partition} needs {vp['nodes']} nodes; partition {vp['partition']} has {node['count']}")
        opts = {
            "nodes": vp["nodes"],
            "ntasks-per-node": node_threads,
            "sockets-per-node": node["sockets"],
            "cores-per-socket": node["cores_per_socket"],
        }
    tasks = opts["ntasks-per-node"]
    if tasks * vp["mem_per_cpu_mib"] > node["real_memory_mib"]:
        raise SwError(
            f"{tasks} CPUs x {vp['mem_per_cpu_mib']} MiB exceed a node's {node['real_memory_mib']} MiB"
        )
    minutes = parse_time(req.time) if req.time is not None else vp["default_time_hours"] * 60
    if minutes > vp["max_time_hours"] * 60:
        raise SwError(
            f"{req.virtual_partition} allows at most {vp['max_time_hours']} hours; asked {slurm_time(minutes)}"
        )
    args = [
        f"--partition={vp['partition']}",
        f"--time={slurm_time(minutes)}",
        f"--nodes={opts['nodes']}",
        # --ntasks too: without it srun derives the task count from sockets x cores x threads
        # (40 tasks of 40 CPUs for gpux1) and refuses: "Requested node configuration is not
        # available" (seen with Slurm 22.05 on the sandbox; sbatch does not do this).
        *([f"--ntasks-per-node=1", f"--ntasks={opts['nodes']}", f"--cpus-per-task={tasks}"]
          if one_task_per_node else [f"--ntasks-per-node={tasks}"]),
        f"--sockets-per-node={opts['sockets-per-node']}",
        f"--cores-per-socket={opts['cores-per-socket']}",
        f"--threads-per-core={threads}",
        f"--mem-per-cpu={vp['mem_per_cpu_mib']}",
    ]
    if "gres" in opts:
        args.append(f"--gres={opts['gres']}")
    return args + list(req.slurm_args)


def _gpu_job(req: Request, vp: dict, node: dict, threads: int, node_threads: int) -> dict:
    per_node = len(node["gpu_sockets"])
    if per_node == 0:
        raise SwError(f"partition {vp['partition']} has no GPUs")
    share = node_threads // per_node
    cpg = share if req.cpus_per_gpu is None else req.cpus_per_gpu
    if not 1 <= cpg <= share:
        raise SwError(f"-c/--cpus-per-gpu must be 1..{share} (hardware threads per GPU on this node); got {cpg}")
    if cpg % threads:
        raise SwError(f"-c/--cpus-per-gpu must be a multiple of {threads} (whole cores, SMT{threads}); got {cpg}")
    gpus = vp["gpus"]
    if gpus <= per_node:
        nodes, on_node = 1, gpus
    else:
        if gpus % per_node:
            raise SwError(f"{req.virtual_partition}: {gpus} GPUs span nodes only as whole nodes of {per_node} GPUs")
        nodes, on_node = gpus // per_node, per_node
    if nodes > node["count"]:
        raise SwError(f"{req.virtual_partition} needs {nodes} nodes; partition {vp['partition']} has {node['count']}")
    sockets = len(set(sorted(node["gpu_sockets"])[:on_node]))
    tasks = on_node * cpg
    return {
        "nodes": nodes,
        "ntasks-per-node": tasks,
        "sockets-per-node": sockets,
        "cores-per-socket": math.ceil(tasks / threads / sockets),
        "gres": f"gpu:{node['gpu_type']}:{on_node}",
    }


def sorted_names(vps: dict) -> list[str]:
    def key(name: str):
        m = re.fullmatch(r"([a-z]+)(\d+)", name)
        return (m.group(1), int(m.group(2))) if m else (name, 0)

    return sorted(vps, key=key)
