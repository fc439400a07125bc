"""A discovered profile against the one the model assigns to a host: located findings.

Levels: error for what changes what Slurm and the renderers are told (GPU count, model,
memory, sockets, device files, NVLink; CPU architecture and counts; memory outside the
tolerance; InfiniBand adapters, ports and rates); warning for free text that only describes
(the vendor model, cpu_model, an adapter's model) and for InfiniBand ports without link;
info for what could not be compared because discovery did not find it. `gpus.type` and
`features` are names the admin chooses and are not compared.

Texts match when the words of one (lower-cased, vendor words such as 'NVIDIA', 'IBM',
'Mellanox', '(R)' left out) are all among the words of the other: 'IBM POWER9' matches lscpu's
'POWER9, altivec supported', 'NVIDIA Tesla V100-SXM2-16GB' matches 'Tesla V100-SXM2-16GB'.
"""

from __future__ import annotations

import re

from ..findings import Finding, error, info, warning
from ..loader import Locator
from ..model import Cluster, HardwareProfile, NodeGroup
from .memory import MEMORY_TOLERANCE
from .profile import Discovery

CHECK = "discover"
_NOISE = {"r", "tm", "ibm", "nvidia", "mellanox", "cpu", "processor", "corporation", "inc"}


class UnknownHost(ValueError):
    """The host is in no node group of the model."""


def group_of(cluster: Cluster, host: str) -> NodeGroup:
    """The node group holding `host` (or its short name, for a fully qualified one)."""
    for candidate in dict.fromkeys([host, host.split(".")[0]]):
        group = cluster.group_of(candidate)
        if group is not None:
            return group
    groups = ", ".join(f"{g.name} ({g.hosts})" for g in cluster.nodes)
    raise UnknownHost(f"host '{host}' is in no node group of cluster '{cluster.cluster.name}': {groups}")


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower())) - _NOISE


def same_text(model: str, found: str) -> bool:
    a, b = _words(model), _words(found)
    return a <= b or b <= a


def compare(found: Discovery, cluster: Cluster, host: str, locator: Locator | None = None) -> list[Finding]:
    """Every difference between `found` and the profile of `host`'s node group, located in the
    file when a locator is given. Raises UnknownHost for a host the model does not have; a host
    whose group names no hardware profile (a login or management node may leave it out) has
    nothing to differ from: no findings."""
    name = group_of(cluster, host).hardware
    if name is None:
        return []
    base = ("hardware", name)
    findings = _compare(found, cluster.hardware[name], base)
    return [locator.locate(f) for f in findings] if locator else findings


def _compare(found: Discovery, want: HardwareProfile, base: tuple) -> list[Finding]:
    out: list[Finding] = []
    out += _cpu(found, want, base)
    out += _memory(found, want, base)
    out += _gpus(found, want, base)
    out += _infiniband(found, want, base)
    return out


def _differs(out: list, base: tuple, field: str, model_value, found_value, what: str) -> None:
    if found_value is None:
        out.append(info(base + (field,), f"{what} not discovered; not compared", CHECK))
    elif found_value != model_value:
        out.append(error(base + (field,), f"the node has {found_value} {what}, the model says {model_value}", CHECK))


def _cpu(found: Discovery, want: HardwareProfile, base: tuple) -> list[Finding]:
    out: list[Finding] = []
    cpu = found.cpu
    if cpu is None:
        return [info(base + ("sockets",), "CPU topology not discovered (no lstopo.xml or lscpu); not compared", CHECK)]
    _differs(out, base, "architecture", want.architecture, cpu.architecture or None, "architecture")
    _differs(out, base, "sockets", want.sockets, cpu.sockets, "socket(s)")
    _differs(out, base, "cores_per_socket", want.cores_per_socket, cpu.cores_per_socket, "cores per socket")
    _differs(out, base, "threads_per_core", want.threads_per_core, cpu.threads_per_core, "threads per core")
    if want.cpu_model and cpu.model_name and not same_text(want.cpu_model, cpu.model_name):
        out.append(
            warning(
                base + ("cpu_model",), f"the node's CPU is '{cpu.model_name}', the model says '{want.cpu_model}'", CHECK
            )
        )
    if found.machine_model and not same_text(want.model, found.machine_model):
        out.append(
            warning(base + ("model",), f"the node is a '{found.machine_model}', the model says '{want.model}'", CHECK)
        )
    return out


def _memory(found: Discovery, want: HardwareProfile, base: tuple) -> list[Finding]:
    if found.memory is None:
        return [info(base + ("memory_gib",), "memory not discovered (no meminfo); not compared", CHECK)]
    have = found.memory.memory_gib
    if abs(have - want.memory_gib) <= MEMORY_TOLERANCE * want.memory_gib:
        return []
    return [
        error(
            base + ("memory_gib",),
            f"the node has {have} GiB ({found.memory.source}), the model says {want.memory_gib} GiB; "
            f"tolerance {MEMORY_TOLERANCE:.0%} of the model's value, since the kernel reports less than "
            "is installed",
            CHECK,
        )
    ]


def _gpus(found: Discovery, want: HardwareProfile, base: tuple) -> list[Finding]:
    have = found.gpus.gpus if found.gpus else []
    gpus = base + ("gpus",)
    if want.gpus is None:
        if not have:
            return []
        return [error(gpus, f"the node has {len(have)} GPU(s) ({have[0].name}), the model's profile has none", CHECK)]
    if not have:
        return [
            error(
                gpus + ("devices",),
                f"the model has {want.gpu_count} GPU(s), the node shows none (neither NVML nor nvidia-smi answered)",
                CHECK,
            )
        ]
    out: list[Finding] = []
    if len(have) != want.gpu_count:
        out.append(
            error(gpus + ("devices",), f"the node has {len(have)} GPU(s), the model has {want.gpu_count}", CHECK)
        )
    models = sorted({g.name for g in have if not same_text(want.gpus.model, g.name)})
    if models:
        out.append(
            error(
                gpus + ("model",), f"the node's GPUs are {', '.join(models)}, the model says {want.gpus.model}", CHECK
            )
        )
    sizes = sorted(
        {g.memory_gib for g in have if g.memory_gib is not None and abs(g.memory_gib - want.gpus.memory_gib) > 1}
    )
    if sizes:
        out.append(
            error(
                gpus + ("memory_gib",),
                f"the node's GPUs have {', '.join(map(str, sizes))} GiB, the model says "
                f"{want.gpus.memory_gib} GiB (tolerance 1 GiB)",
                CHECK,
            )
        )
    sockets = found.gpu_sockets()
    for i, (gpu, device) in enumerate(zip(have, want.gpus.devices)):
        where = gpus + ("devices", i)
        if sockets[i] is None:
            out.append(
                info(
                    where + ("socket",),
                    f"socket of GPU {i} not discovered (no CPU affinity, or it spans sockets); not compared",
                    CHECK,
                )
            )
        elif sockets[i] != device.socket:
            out.append(
                error(
                    where + ("socket",), f"GPU {i} hangs off socket {sockets[i]}, the model says {device.socket}", CHECK
                )
            )
        wanted_file = device.file or f"/dev/nvidia{i}"
        if gpu.device_file != wanted_file:
            out.append(error(where + ("file",), f"GPU {i} is {gpu.device_file}, the model says {wanted_file}", CHECK))
    for key, what in (("pcie_generation", "PCIe gen {}"), ("pcie_width", "PCIe x{}")):
        wanted = getattr(want.gpus, key)
        low = sorted(
            {getattr(g, key) for g in have if getattr(g, key) is not None and wanted and getattr(g, key) < wanted}
        )
        if low:
            out.append(
                error(
                    gpus + (key,),
                    f"the node's GPU links reach {', '.join(what.format(v) for v in low)}, "
                    f"the model says {what.format(wanted)}",
                    CHECK,
                )
            )
    out += _nvlink(found, want, gpus)
    return out


def _nvlink(found: Discovery, want: HardwareProfile, gpus: tuple) -> list[Finding]:
    matrix = found.nvlink()
    n = len(found.gpus.gpus)
    if matrix is None:
        return [info(gpus + ("nvlink",), "NVLink not discovered (no nvidia-smi topo -m, no NVML); not compared", CHECK)]
    if n != want.gpu_count:
        return []  # the count differs: said above
    have = matrix or [[0] * n for _ in range(n)]
    model = want.gpus.nvlink or [[0] * n for _ in range(n)]
    pairs = [
        f"GPU {i}-{j}: {have[i][j]} on the node, {model[i][j]} in the model"
        for i in range(n)
        for j in range(i + 1, n)
        if have[i][j] != model[i][j]
    ]
    if not pairs:
        return []
    return [error(gpus + ("nvlink",), "NVLink connections differ: " + "; ".join(pairs), CHECK)]


def _infiniband(found: Discovery, want: HardwareProfile, base: tuple) -> list[Finding]:
    out: list[Finding] = []
    where = base + ("ib_adapters",)
    have, model = found.ib, want.ib_adapters
    if len(have) != len(model):
        shown = "; ".join(f"{a.model} ({', '.join(a.devices)})" for a in have) or "none"
        out.append(
            error(
                where, f"the node has {len(have)} InfiniBand adapter(s) ({shown}), the model lists {len(model)}", CHECK
            )
        )
    for i, (adapter, wanted) in enumerate(zip(have, model)):
        if len(adapter.ports) != wanted.ports:
            out.append(
                error(
                    where + (i, "ports"),
                    f"adapter {i} ({', '.join(adapter.devices)}) has "
                    f"{len(adapter.ports)} InfiniBand port(s), the model says "
                    f"{wanted.ports}",
                    CHECK,
                )
            )
        if adapter.rate_gbps is not None and adapter.rate_gbps != wanted.rate_gbps:
            out.append(
                error(
                    where + (i, "rate_gbps"),
                    f"adapter {i} runs at {adapter.rate_gbps} Gb/s, the model says {wanted.rate_gbps}",
                    CHECK,
                )
            )
        if not same_text(wanted.model, adapter.family):
            out.append(
                warning(
                    where + (i, "model"),
                    f"adapter {i} is a {adapter.family} ({adapter.model}), the model says '{wanted.model}'",
                    CHECK,
                )
            )
        for port in adapter.ports:
            if port.state != "ACTIVE":
                out.append(
                    warning(
                        where + (i,),
                        f"port {port.name} is {port.state}"
                        + (" (its rate is not compared)" if adapter.rate_gbps is None else ""),
                        CHECK,
                    )
                )
    return out
