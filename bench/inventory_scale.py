"""Inventory bench: the hal.provision.cluster plugin against the rendered YAML inventory.

    python3 bench/inventory_scale.py                          # 1,000, 10,000 and 100,000 nodes
    python3 bench/inventory_scale.py --sizes 1000 --keep /tmp/inv   # keep models, trees, cache

Models come from bench/scale.py's generator (HAL with N compute nodes). At each size, in the
same run, each command goes through three inventories:

    rendered YAML    the rendered inventory directory (inventory/hosts.yml and storage.yml, the
                     files `hal-provision render` writes there; the rest of the tree is not
                     read by Ansible and not written here)
    plugin, cold     a plugin source naming the model, its cache empty: load, check, render and
                     parse the inventory, then hand it to Ansible (and write the cache)
    plugin, cached   the same source again, read from the cache the cold run wrote

and the commands are `ansible-inventory --list` (to /dev/null), `ansible-playbook --list-hosts`
of a no-op play, and the no-op play itself (hosts: all, gather_facts: false, connection: local,
one ansible.builtin.meta: noop task: no host is contacted). Wall seconds and peak RSS (os.wait4
of the Ansible process) of one run each, or the median of --runs. Ansible runs with the
repository's ansible.cfg, as the README's commands do. The bench prints figures and asserts
nothing. `inventory_table(sizes)` returns the same table for other benches to print.

The executed play is left out above --play-limit (10,000) compute nodes: ansible-core 2.19
builds ansible_play_hosts for every host by filtering the play's hosts against a list
(vars/manager.py, and the strategy's hosts-remaining list), so its time grows with the square
of the hosts: 17 s at 10,000; at 100,000, 21,565 hosts in 7.5 min, some 35 min for all,
whichever the inventory. There the inventory's share is lost in it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SIZES = (1_000, 10_000, 100_000)
PLAY = """\
- name: No-op over every host (bench/inventory_scale.py)
  hosts: all
  gather_facts: false
  connection: local
  tasks:
    - name: Nothing
      ansible.builtin.meta: noop
"""
COMMANDS = {  # key -> (label, command line with {inv} and {play} filled in)
    "list": ("ansible-inventory --list", ("ansible-inventory", "-i", "{inv}", "--list", "--output", os.devnull)),
    "list-hosts": ("ansible-playbook --list-hosts", ("ansible-playbook", "-i", "{inv}", "{play}", "--list-hosts")),
    "play": ("no-op play, connection: local", ("ansible-playbook", "-i", "{inv}", "{play}")),
}
WAYS = ("rendered YAML", "plugin, cold", "plugin, cached")
PLAY_LIMIT = 10_000


def _scale():
    sys.path.insert(0, str(BENCH))
    try:
        import scale
    finally:
        sys.path.remove(str(BENCH))
    return scale


def _executable(name: str) -> str:
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else (shutil.which(name) or name)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "HAL_INVENTORY_"))}
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_NOCOLOR"] = "1"
    env["ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED"] = "1"  # a failed source must not look fast
    return env


def run(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in MiB) of one child; its output is discarded."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(), cwd=REPO)
    stderr = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{stderr.decode()[-3000:]}")
    return wall, usage.ru_maxrss / 1024


def prepare(n: int, work: Path) -> tuple[Path, Path, Path]:
    """(model, rendered inventory directory, plugin source) for n compute nodes."""
    from hal_provision.inventory.source import inventory_files
    from hal_provision.loader import validate
    from hal_provision.render.writer import write_tree

    model = _scale().write_model(n, work)
    rendered = work / f"rendered-{n}"
    write_tree(inventory_files(validate(model).model), rendered)
    source = work / f"plugin-{n}" / "cluster.hal.yml"
    source.parent.mkdir(exist_ok=True)
    source.write_text(f"plugin: hal.provision.cluster\ncluster_file: {model}\nmodel_cache_dir: {work / f'cache-{n}'}\n")
    return model, rendered / "inventory", source


def measure(n: int, work: Path, runs: int = 1, commands=tuple(COMMANDS)):
    """Yield (command, {way: (wall, rss)}) for each command at n nodes."""
    _model, rendered, source = prepare(n, work)
    play = work / "noop.yml"
    play.write_text(PLAY)
    cache = work / f"cache-{n}"
    for key in commands:
        label, (exe, *args) = COMMANDS[key]

        def argv(inv: Path) -> list[str]:
            return [_executable(exe), *(a.format(inv=inv, play=play) for a in args)]

        samples: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
        for _ in range(runs):
            samples["rendered YAML"].append(run(argv(rendered)))
            shutil.rmtree(cache, ignore_errors=True)
            samples["plugin, cold"].append(run(argv(source)))
            samples["plugin, cached"].append(run(argv(source)))
        yield (
            label,
            {
                way: (statistics.median(s[0] for s in got), statistics.median(s[1] for s in got))
                for way, got in samples.items()
            },
        )


def header(runs: int = 1) -> list[str]:
    return [
        f"Inventory: hal.provision.cluster plugin vs rendered YAML, wall s / peak RSS MiB "
        f"({'median of %d' % runs if runs > 1 else 'one run'}; {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.1f})",
        f"{'nodes':>8}  {'command':<31}"
        + "".join(f"{way:>18}" for way in WAYS)
        + f"{'speed-up cold':>15}{'cached':>8}",
        f"{'':>8}  {'':<31}" + f"{'wall s':>11}{'RSS':>7}" * len(WAYS),
    ]


def row(n: int, label: str, figures: dict[str, tuple[float, float]]) -> str:
    base = figures["rendered YAML"][0]
    cells = "".join(f"{wall:>10.2f} {rss:>7.0f}" for wall, rss in (figures[w] for w in WAYS))
    return (
        f"{n:>8,}  {label:<31}{cells}"
        f"{base / figures['plugin, cold'][0]:>14.1f}x{base / figures['plugin, cached'][0]:>7.1f}x"
    )


def inventory_rows(
    sizes=SIZES, work: Path | None = None, runs: int = 1, commands=tuple(COMMANDS), play_limit: int = PLAY_LIMIT
):
    """The table's lines, one as soon as it is measured (header first)."""
    keep = work is not None
    work = Path(work) if keep else Path(tempfile.mkdtemp(prefix="hal-inventory-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        yield from header(runs)
        for n in sizes:
            here = tuple(c for c in commands if c != "play" or n <= play_limit)
            for label, figures in measure(n, work, runs, here):
                yield row(n, label, figures)
            if here != tuple(commands):
                yield f"{n:>8,}  {COMMANDS['play'][0]:<31}  not run above --play-limit {play_limit:,} (see the docstring)"
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def inventory_table(
    sizes=SIZES, work: Path | None = None, runs: int = 1, commands=tuple(COMMANDS), play_limit: int = PLAY_LIMIT
) -> str:
    """The whole table as text (for bench/scale.py to print after its own)."""
    return "\n".join(inventory_rows(sizes, work, runs, commands, play_limit)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="compute node counts, comma-separated")
    parser.add_argument("--runs", type=int, default=1, help="runs per cell; the median is shown")
    parser.add_argument("--keep", type=Path, help="write models, rendered inventories and caches here and keep them")
    parser.add_argument(
        "--commands",
        default=",".join(COMMANDS),
        help="which commands, comma-separated: " + ", ".join(f"{k} ({v[0]})" for k, v in COMMANDS.items()),
    )
    parser.add_argument(
        "--play-limit", type=int, default=PLAY_LIMIT, help="run the play only up to this many compute nodes"
    )
    args = parser.parse_args(argv)
    commands = tuple(c.strip() for c in args.commands.split(","))
    unknown = [c for c in commands if c not in COMMANDS]
    if unknown:
        parser.error(f"unknown command {unknown[0]!r}")
    for line in inventory_rows(
        [int(s) for s in args.sizes.split(",")], args.keep, args.runs, commands, args.play_limit
    ):
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
