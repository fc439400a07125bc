"""Time the command line's start: `hal-provision validate` on the embedded HAL description.

    python3 bench/cli_startup.py              # 5 runs of each command
    python3 bench/cli_startup.py --runs 11 --top 12

Runs `hal-provision validate` (the embedded HAL description) and `hal-provision --help` as
child processes, RUNS times each, and prints each run's wall and CPU time (os.wait4) and the
medians; CPU time is the steadier figure on a shared machine (the header shows the load
average). The command is the console script beside this interpreter when there is one, else
`python -m hal_provision.cli`; either way this checkout's package comes first on the path
(PYTHONPATH), whichever checkout the environment has installed. One untimed run of each
command comes first and writes the bytecode caches, as an installed package has them
(PYTHONDONTWRITEBYTECODE is dropped for the children).

Then the import times (`python -X importtime`, median of RUNS): `import hal_provision.cli`,
what every command pays before it parses its options, and everything a `validate` run
imports (`python -X importtime -m hal_provision.cli validate`), with the modules that cost most (cumulative time of the modules first in their import
chain and of the modules those import directly).

The target: validate at most 0.35 s (median of 5) on HAL. The bench prints figures;
nothing here asserts on them (tests/unit/cli/test_cli.py guards what validate imports instead).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def command() -> list[str]:
    script = Path(sys.executable).with_name("hal-provision")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "hal_provision.cli"]


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one child; a non-zero exit ends the bench."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{stderr.decode()}")
    return wall, usage.ru_utime + usage.ru_stime


def import_times(python_args: list[str]) -> list[tuple[int, str, int]]:
    """(depth, module, cumulative µs) of each import one `python -X importtime ...` makes."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *python_args],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line or "cumulative" in line:
            continue
        _self, cumulative, name = line.removeprefix("import time:").split("|")
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        rows.append((depth, name.strip(), int(cumulative)))
    return rows


def report_imports(title: str, python_args: list[str], runs: int, top: int) -> None:
    samples = [import_times(python_args) for _ in range(runs)]
    totals = [sum(us for depth, _name, us in rows if depth == 0) for rows in samples]
    median = statistics.median(totals)
    rows = min(samples, key=lambda r: abs(sum(us for d, _n, us in r if d == 0) - median))
    print(
        f"\n{title}: {median / 1000:.0f} ms of imports (median of {runs}; {len(rows)} modules); "
        "most costly, cumulative (unindented: first in their import chain; indented: what those import):"
    )
    for depth, name, us in sorted((r for r in rows if r[0] <= 1), key=lambda r: -r[2])[:top]:
        print(f"  {us / 1000:>7.1f} ms  {'  ' * depth}{name}")


def report_runs(title: str, argv: list[str], runs: int) -> tuple[float, float]:
    """Each run's (wall s, CPU s) and the medians, which it returns."""
    timed(argv)  # writes the bytecode caches
    results = [timed(argv) for _ in range(runs)]
    print(f"\n{title}\n  {'run':>6} {'wall s':>8} {'CPU s':>7}")
    for i, (wall, cpu) in enumerate(results, 1):
        print(f"  {i:>6} {wall:>8.3f} {cpu:>7.3f}")
    wall, cpu = (statistics.median(r[i] for r in results) for i in range(2))
    print(f"  {'median':>6} {wall:>8.3f} {cpu:>7.3f}")
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each command; the median is shown")
    parser.add_argument("--top", type=int, default=8, help="modules listed under each import time")
    args = parser.parse_args(argv)

    cli = command()
    print(
        f"{' '.join(cli)} (package from {REPO}); {os.cpu_count()} CPUs; "
        f"load average {os.getloadavg()[0]:.1f}; Python {sys.version.split()[0]}"
    )
    validate = report_runs("hal-provision validate (embedded HAL description)", [*cli, "validate"], args.runs)
    helped = report_runs("hal-provision --help", [*cli, "--help"], args.runs)
    report_imports("import hal_provision.cli", ["-c", "import hal_provision.cli"], args.runs, args.top)
    report_imports("hal-provision validate", ["-m", "hal_provision.cli", "validate"], args.runs, args.top)
    print(
        f"\nmedians: validate {validate[0]:.3f} s wall, {validate[1]:.3f} s CPU; --help {helped[0]:.3f} s wall, "
        f"{helped[1]:.3f} s CPU (target: validate <= 0.35 s on HAL)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
