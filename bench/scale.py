"""Scale bench: render HAL-shaped clusters of 16 to 100,000 compute nodes through the CLI.

    python3 bench/scale.py                      # sizes 16, 1,000, 10,000, 100,000; median of 3
    python3 bench/scale.py --sizes 1000 --runs 1 --keep /tmp/scale   # keep models and output
    python3 bench/scale.py --phases             # also time each step in-process, largest size
    python3 bench/scale.py --explicit-fabric    # the fabric one entry per switch and link

Each model is derived from the embedded HAL description: the same service nodes, hardware,
services, QOS and virtual partitions, with the 16 compute nodes replaced by N nodes in node
groups ("scalable units") of at most 1,000 nodes. Three quarters are AC922 GPU nodes
(hal000001...), a quarter x86 CPU nodes (halc000001...) once N reaches 1,000. Addresses come
from a /8, a /12 and a /10; each unit starts on its own 1,024-address block. The InfiniBand
fabric is a fat tree: 36-port EDR leaves (18 nodes down) under the GPU units, 40-port HDR
leaves (20 nodes down) under the CPU units, two director spines per unit and two core
directors joining the units, so topology.conf looks like a real one at every size. The fabric
is written compactly (per unit one entry for the spines, one for the leaves, one link cabling
the unit's hosts over its leaves), as a large site would write it; --explicit-fabric writes one
entry per switch and per link instead (5,451 leaves at 100,000 nodes), which renders the same
bytes (tests/unit/test_scale_fabric.py).

`hal-provision render FILE -o OUT` runs as a child process (Python start-up, loading,
validation checks, rendering and writing included). Wall time, the child's CPU time and peak
RSS (both from os.wait4) are the medians of the runs; CPU time is the steadier figure on a
shared machine (the header shows the load average). The 100,000-node row is the one the scale
targets speak of (at most 1.5 s wall and 150 MiB peak RSS). The bench prints figures; nothing
here asserts on them.

A second table follows (bench/inventory_scale.py, --no-inventory leaves it out): at each size
of 1,000 nodes and up, `ansible-inventory --list`, `ansible-playbook --list-hosts` and a no-op
play through the rendered YAML inventory and through the hal.provision.cluster inventory plugin
reading the same model (cold and cached), side by side in the same run.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

SIZES = (16, 1_000, 10_000, 100_000)
UNIT = 1_000
"""Most nodes in one node group (a scalable unit)."""

NETWORKS = {  # name -> cidr; replaces HAL's three /16s, which cannot hold 100,000 hosts
    "mgmt": "10.0.0.0/8",
    "bmc": "172.16.0.0/12",
    "ib": "100.64.0.0/10",
}
UNIT_BLOCK = 1_024
"""Addresses reserved per unit; unit u starts at network + 65,536 + u * UNIT_BLOCK + 1."""

LEAF = {  # hardware profile of a unit -> (switch ports, nodes cabled down, model)
    "ac922": (36, 18, "Mellanox SB7800 EDR"),
    "x86-cpu": (40, 20, "Mellanox QM8700 HDR"),
}

X86_CPU = {
    "model": "x86 2U 4-node chassis",
    "architecture": "x86_64",
    "cpu_model": "AMD EPYC 7763",
    "sockets": 2,
    "cores_per_socket": 64,
    "threads_per_core": 2,
    "memory_gib": 512,
    "ib_adapters": [{"model": "Mellanox ConnectX-6 HDR100", "ports": 1, "rate_gbps": 100}],
    "features": ["x86", "epyc"],
}


def _yaml():
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt", pure=True)
    yaml.default_flow_style = None  # innermost collections in flow style
    yaml.width = 4096
    yaml.representer.ignore_aliases = lambda _data: True
    return yaml


def _one_line(entry: dict):
    """A mapping dumped on one line, as a hand-written cluster.yml lists switches and links."""
    from ruamel.yaml.comments import CommentedMap

    line = CommentedMap(entry)
    line.fa.set_flow_style()
    return line


def hal_description() -> dict:
    from hal_provision.loader import default_path

    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(default_path().read_text(encoding="utf-8"))


def _hostlist(prefix: str, first: int, last: int, width: int) -> str:
    if first == last:
        return f"{prefix}{first:0{width}d}"
    return f"{prefix}[{first:0{width}d}-{last:0{width}d}]"


def _chunks(total: int, size: int) -> list[tuple[int, int]]:
    """(first, last), 1-based and inclusive, of consecutive chunks of at most `size`."""
    return [(start, min(start + size - 1, total)) for start in range(1, total + 1, size)]


def generate(n_compute: int, explicit_fabric: bool = False) -> dict:
    """A cluster description (plain data, as cluster.yml holds it) with n_compute compute nodes;
    its fabric in the compact form, or with `explicit_fabric` one entry per switch and link."""
    if n_compute < 1:
        raise ValueError("n_compute must be at least 1")
    doc = hal_description()
    old_nets = {name: IPv4Network(net["cidr"]) for name, net in doc["networks"].items()}
    for name, cidr in NETWORKS.items():
        doc["networks"][name]["cidr"] = cidr
    new_nets = {name: IPv4Network(cidr) for name, cidr in NETWORKS.items()}

    def moved(net: str, addr: str) -> str:  # same offset inside the new network
        offset = int(IPv4Address(addr)) - int(old_nets[net].network_address)
        return str(new_nets[net].network_address + offset)

    hal_compute = next(g["hosts"] for g in doc["nodes"] if g["role"] == "compute")  # hal[01-16]
    service_groups = [g for g in doc["nodes"] if g["role"] != "compute"]
    for g in service_groups:
        g["addresses"] = {net: moved(net, a) for net, a in g["addresses"].items()}
    doc["cluster"]["description"] = f"HAL scaled to {n_compute:,} compute nodes by bench/scale.py"

    n_gpu = n_compute if n_compute < UNIT else n_compute * 3 // 4
    n_cpu = n_compute - n_gpu
    width = max(2, len(str(n_compute)))
    kinds = [("gpu", "hal", "ac922", n_gpu), ("cpu", "halc", "x86-cpu", n_cpu)]
    if n_cpu:
        doc["hardware"]["x86-cpu"] = X86_CPU

    units = []  # (group name, prefix, hardware, first, last)
    for kind, prefix, hardware, total in kinds:
        for i, (first, last) in enumerate(_chunks(total, UNIT), 1):
            units.append((f"{kind}-su{i:03d}", prefix, hardware, first, last))
    groups = []
    for u, (name, prefix, hardware, first, last) in enumerate(units):
        start = 65_536 + u * UNIT_BLOCK + 1
        groups.append(
            {
                "name": name,
                "role": "compute",
                "hosts": _hostlist(prefix, first, last, width),
                "count": last - first + 1,
                "hardware": hardware,
                "addresses": {net: str(new_nets[net].network_address + start) for net in NETWORKS},
            }
        )
    doc["nodes"] = service_groups + groups

    every = {prefix: _hostlist(prefix, 1, total, width) for _k, prefix, _h, total in kinds if total}
    partitions = doc["slurm"]["partitions"]
    partitions[0]["nodes"] = every["hal"]
    partitions.append(
        {
            "name": "debug",
            "nodes": _hostlist("hal", 1, min(4, n_gpu), width),
            "max_time": "04:00:00",
            "max_nodes": 2,
            "qos": "debug",
        }
    )
    if n_cpu:
        partitions.append({"name": "cpu", "nodes": every["halc"], "max_time": "2-00:00:00", "qos": "normal"})
    # Everything else that names HAL's compute nodes (storage clients, node classes, ...) now
    # names all of them.
    compute_expr = ",".join(every.values())
    for key in doc:
        if key not in ("nodes", "fabric", "slurm"):
            doc[key] = _renamed(doc[key], hal_compute, compute_expr)

    doc["fabric"] = _fat_tree(doc["fabric"], hal_compute, units, width, explicit_fabric)
    return doc


def _renamed(value, old: str, new: str):
    """`value` with every occurrence of `old` in its strings replaced by `new`."""
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {k: _renamed(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, old, new) for v in value]
    return value


def _fat_tree(hal_fabric: dict, hal_compute: str, units, width: int, explicit: bool = False) -> dict:
    """The fat tree, compactly (one switch entry per unit's spines and per unit's leaves, one
    link entry per unit: `names`, `switches` with `hosts_per_switch`), or with `explicit` one
    entry per switch and per link, as a hand-drawn cluster.yml has it. Both mean the same
    cabling (tests/unit/test_scale_fabric.py renders both)."""
    switches: list[dict] = []
    links: list[dict] = []
    cores = ["core1", "core2"] if len(units) > 1 else []
    for core in cores:
        switches.append({"name": core, "tier": "core", "ports": 648, "model": "Mellanox CS7500 EDR director"})
    # Service nodes keep HAL's cabling, on a leaf of their own.
    switches.append(
        {"name": "svc-leaf1", "tier": "leaf", "ports": 36, "uplinks": list(cores), "model": "Mellanox SB7800 EDR"}
    )
    for link in hal_fabric["links"]:
        if link["hosts"] != hal_compute:
            links.append({**link, "switch": "svc-leaf1"})
    for name, prefix, hardware, first, last in units:
        ports, down, model = LEAF[hardware]
        leaves = _chunks(last - first + 1, down)
        spines = [f"{name}-spine{i}" for i in (1, 2)] if len(leaves) > 1 else []
        spine = {"tier": "spine", "ports": 648, "uplinks": list(cores), "model": "Mellanox CS7500 EDR director"}
        leaf = {"tier": "leaf", "ports": ports, "uplinks": spines or list(cores), "model": model}
        hosts = _hostlist(prefix, first, last, width)
        if explicit:
            switches.extend({"name": s, **spine} for s in spines)
            for j, (lo, hi) in enumerate(leaves, 1):
                switches.append({"name": f"{name}-leaf{j:02d}", **leaf})
                links.append(
                    {
                        "hosts": _hostlist(prefix, first + lo - 1, first + hi - 1, width),
                        "port": 1,
                        "switch": f"{name}-leaf{j:02d}",
                        "first_switch_port": 1,
                    }
                )
            continue
        if spines:
            switches.append({"names": f"{name}-spine[1-2]", **spine})
        leaf_names = _hostlist(f"{name}-leaf", 1, len(leaves), 2)
        switches.append({"names": leaf_names, **leaf})
        links.append(
            {"hosts": hosts, "port": 1, "switches": leaf_names, "hosts_per_switch": down, "first_switch_port": 1}
        )
    for sw in switches:
        if not sw.get("uplinks"):
            sw.pop("uplinks", None)
    return {
        "name": hal_fabric["name"],
        "rate_gbps": hal_fabric["rate_gbps"],
        "switches": [_one_line(sw) for sw in switches],
        "links": [_one_line(link) for link in links],
    }


def write_model(n_compute: int, directory: Path, explicit_fabric: bool = False) -> Path:
    path = Path(directory) / f"scale-{n_compute}{'-explicit' if explicit_fabric else ''}.yml"
    buf = io.StringIO()
    buf.write(f"# Scale-bench cluster: HAL with {n_compute:,} compute nodes. Written by bench/scale.py.\n")
    _yaml().dump(generate(n_compute, explicit_fabric), buf)
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path


# ---- timing -------------------------------------------------------------------------------


def cli() -> list[str]:
    script = shutil.which("hal-provision")
    return [script] if script else [sys.executable, "-m", "hal_provision.cli"]


def run_render(model: Path, out: Path) -> tuple[float, float, float]:
    """One `hal-provision render` child: (wall seconds, CPU seconds, peak RSS in MiB)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*cli(), "render", str(model), "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    stderr = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"render of {model} failed ({proc.returncode}):\n{stderr.decode()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # maxrss: KiB on Linux


def tree_size_mib(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20


def phases(model: Path) -> list[tuple[str, float, float]]:
    """(step, wall s, CPU s) of each step of one render, in this (already started) process.

    The steps mirror `hal-provision render`: the loader's YAML parse (libyaml) and pydantic
    validation, the semantic checks, locating their findings (libyaml's node tree; ruamel's
    round-trip parse runs only for a file the fast path refuses), each renderer module, the
    atomic write.
    """
    import inspect

    from hal_provision import render
    from hal_provision.checks import run_all
    from hal_provision.model import Cluster
    from hal_provision.render.writer import write_tree

    steps = []

    def timed(name, fn, *args):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn(*args)
        steps.append((name, time.perf_counter() - wall, time.process_time() - cpu))
        return result

    text = model.read_text(encoding="utf-8")
    from hal_provision.loader import _fast_parse

    data = timed("YAML parse (libyaml fast path)", _fast_parse, text)
    cluster = timed("pydantic validation", Cluster.model_validate, data)
    found = timed("checks", run_all, cluster)
    from hal_provision.loader import LazyLocator

    locator = LazyLocator(text, str(model))
    timed(f"locate {len(found)} findings", lambda: [locator.locate(f) for f in found])
    files = {}
    renderers = [m for m in vars(render).values() if inspect.ismodule(m) and hasattr(m, "render")]
    for module in renderers:
        files.update(timed(f"render: {module.__name__.rsplit('.', 1)[1]}", module.render, cluster))
    with tempfile.TemporaryDirectory() as tmp:
        timed("write_tree", write_tree, files, Path(tmp) / "out")
    return steps


def _inventory_bench():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import inventory_scale
    finally:
        sys.path.pop(0)
    return inventory_scale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="compute node counts, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="runs per size; the median is shown")
    parser.add_argument("--keep", type=Path, help="write models and output here and keep them")
    parser.add_argument("--phases", action="store_true", help="also time each step in-process")
    parser.add_argument(
        "--explicit-fabric",
        action="store_true",
        help="write the fabric one entry per switch and link instead of the compact form",
    )
    parser.add_argument(
        "--no-inventory",
        dest="inventory",
        action="store_false",
        help="leave out the second table (Ansible reading the inventory: plugin vs rendered YAML)",
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]

    work = args.keep or Path(tempfile.mkdtemp(prefix="hal-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        print(
            f"{'nodes':>8} {'wall s':>8} {'CPU s':>7} {'peak RSS MiB':>13} {'output MiB':>11} "
            f"{'s per 1k nodes':>15} {'model lines':>12}   (median of {args.runs}; {os.cpu_count()} CPUs; "
            f"load average {os.getloadavg()[0]:.1f}; {'explicit' if args.explicit_fabric else 'compact'} fabric)"
        )
        for n in sizes:
            model = write_model(n, work, args.explicit_fabric)
            out = work / f"out-{n}"
            runs = [run_render(model, out) for _ in range(args.runs)]
            wall, cpu, rss = (statistics.median(r[i] for r in runs) for i in range(3))
            lines = model.read_text(encoding="utf-8").count("\n")
            print(
                f"{n:>8,} {wall:>8.2f} {cpu:>7.2f} {rss:>13.0f} {tree_size_mib(out):>11.1f} "
                f"{wall / n * 1000:>15.4f} {lines:>12,}",
                flush=True,
            )
        if args.phases:
            steps = phases(write_model(sizes[-1], work, args.explicit_fabric))
            print(f"\nsteps at {sizes[-1]:,} nodes, in-process:  {'wall s':>7} {'CPU s':>7}")
            for name, wall, cpu in [*steps, ("total", sum(s[1] for s in steps), sum(s[2] for s in steps))]:
                print(f"  {name:<38} {wall:>7.2f} {cpu:>7.2f}")
        inventory_sizes = [n for n in sizes if n >= 1_000]
        if args.inventory and inventory_sizes:
            print()
            for line in _inventory_bench().inventory_rows(inventory_sizes):
                print(line, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
