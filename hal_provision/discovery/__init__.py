"""Hardware discovery: read a node's CPUs, memory, GPUs and InfiniBand adapters and describe
them as a hardware profile in the model's shape.

This package (all but `compare`) uses only the standard library (pynvml when importable), so
`python3 -m hal_provision.discovery` runs on a bare node. `compare` holds the model-side half:
the differences between a discovered profile and the one cluster.yml assigns to a host.

    sources.py     records directory or live machine -> raw texts and sysfs trees
    cpu.py         hwloc XML, lscpu -J, lscpu -p -> sockets, cores, threads, CPU -> socket
    memory.py      MemTotal / online memory blocks -> installed GiB (the rounding rule)
    gpu.py         NVML, nvidia-smi -q -x, nvidia-smi topo -m -> GPUs, sockets, NVLink
    infiniband.py  /sys/class/infiniband -> adapters, ports, rates
    profile.py     all of it -> a profile; YAML and JSON output
    compare.py     profile vs cluster.yml -> located findings (needs pydantic)
"""

from __future__ import annotations

from .profile import Discovery, discover, profile_name, to_json, to_yaml
from .sources import DiscoveryError, Sources, read_live, read_records

__all__ = [
    "Discovery",
    "DiscoveryError",
    "Sources",
    "discover",
    "profile_name",
    "read_live",
    "read_records",
    "to_json",
    "to_yaml",
]
