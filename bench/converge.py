#!/usr/bin/env python3
"""Time site.yml on the sandbox: a first converge on fresh containers, then idempotent re-runs,
and say where the time went.

    python3 bench/converge.py [--reruns 2] [--strategy mitogen|linear] [--top 15] [--keep]

Destroys any existing sandbox first (same names), brings up fresh containers without
converging (`sandbox up --no-converge`, so the node image and the host's caches are whatever
`sandbox up` uses), then times `ansible-playbook site.yml` (first converge) and each re-run
through hal-provision's runner, the way `sandbox up` runs it. For each run: wall time, tasks,
task-host rows, changed count; for the first converge and the last re-run, the time per role
and the slowest tasks (from the hal.provision.events callback: a task's wall time runs from
its start to the next task's). `--strategy linear` runs Ansible's own linear strategy instead
of the repository's default (Mitogen's), to compare the two on the same machine.
Prints figures only; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hal_provision.cli import runner  # noqa: E402
from hal_provision.loader import load  # noqa: E402
from hal_provision.cli.sandbox import converge_sandbox  # noqa: E402
from hal_provision.sandbox import lifecycle  # noqa: E402

STRATEGIES = {"mitogen": None, "linear": "linear"}  # None: ansible.cfg's (hal.provision.mitogen_linear)


def converge(sb: lifecycle.Sandbox, log: Path, strategy: str | None) -> runner.Run:
    if strategy is not None:
        os.environ["ANSIBLE_STRATEGY"] = strategy
    run = converge_sandbox(sb, log=log, progress=runner.Progress("  site.yml", live=sys.stderr.isatty()))
    if run.returncode != 0:
        runner.report(run, "site.yml")
    return run


def breakdown(title: str, run: runner.Run, top: int) -> None:
    t = runner.timings(run.events)
    print(f"\n{title}: time per role (wall s, tasks, task-host rows)")
    for role, v in sorted(t["roles"].items(), key=lambda kv: -kv[1]["seconds"]):
        print(f"  {v['seconds']:7.1f} {v['tasks']:5d} {v['rows']:5d}  {role}")
    print(f"{title}: the {top} slowest tasks (wall s, hosts)")
    for task in sorted(t["tasks"], key=lambda x: -x["seconds"])[:top]:
        print(
            f"  {task['seconds']:7.1f} {task['rows']:5d}  {task['name'] if task['role'] == '(play)' else task['role'] + ' : ' + task['name']}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reruns", type=int, default=2)
    ap.add_argument("--strategy", choices=sorted(STRATEGIES), default="mitogen")
    ap.add_argument("--top", type=int, default=15, help="slowest tasks to list")
    ap.add_argument("--workdir", type=Path, default=Path(".hal-sandbox-bench"))
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards")
    args = ap.parse_args()
    strategy = STRATEGIES[args.strategy]
    sb = lifecycle.plan(load().model, args.workdir)
    lifecycle.destroy(sb.name, args.workdir, log=lambda m: None)
    print(
        f"bench/converge.py {datetime.date.today()} on {platform.node()}: {os.cpu_count()} cores, "
        f"strategy {args.strategy}, sandbox {', '.join(sb.hosts)}"
    )
    t0 = time.monotonic()
    sb = lifecycle.create(sb, log=lambda m: None)
    rows = [("containers up (image present)", time.monotonic() - t0, None)]
    logs = Path(tempfile.mkdtemp(prefix="hal-bench-converge-"))  # kept: the sandbox's workdir goes
    runs = []
    try:
        first = converge(sb, logs / "first.log", strategy)
        rows.append(("site.yml first converge", first.seconds, first))
        runs.append(("first converge", first))
        for i in range(args.reruns):
            again = converge(sb, logs / f"rerun{i + 1}.log", strategy)
            rows.append((f"site.yml re-run {i + 1} (idempotent)", again.seconds, again))
            runs.append((f"re-run {i + 1}", again))
    finally:
        print(f"\n{'step':<36} {'wall s':>8} {'tasks':>6} {'rows':>6} {'changed':>8} {'failed':>7} {'rc':>3}")
        for name, secs, run in rows:
            if run is None:
                print(f"{name:<36} {secs:8.1f}")
            else:
                failed = sum(r.get("failures", 0) + r.get("unreachable", 0) for r in run.recap.values())
                print(
                    f"{name:<36} {secs:8.1f} {run.tasks:6d} {len(run.results):6d} {run.changed:8d} "
                    f"{failed:7d} {run.returncode:3d}"
                )
        if runs:
            breakdown(runs[0][0], runs[0][1], args.top)
        if len(runs) > 1:
            breakdown(runs[-1][0], runs[-1][1], args.top)
        print(f"\nAnsible's own output: {logs}/")
        if not args.keep:
            lifecycle.destroy(sb.name, args.workdir, log=lambda m: None)
    return 0 if all(run.returncode == 0 for _n, run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
