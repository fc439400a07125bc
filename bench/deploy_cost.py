#!/usr/bin/env python3
"""What a deploy costs per host, measured on the sandbox, and what that means at 1,000 and
10,000 nodes.

    python3 bench/deploy_cost.py [--workdir .hal-sandbox] [--forks 5 20]

Needs a converged sandbox (`hal-provision sandbox up`). Runs the idempotent `site.yml` re-run
(over SSH with pipelining, the sandbox's inventory and the repository's ansible.cfg) once per
--forks value and once limited to one compute node, and measures for each: wall time, the
controller's CPU time (ansible-playbook and its workers: os.wait4 of the child), and the
host-tasks run (PLAY RECAP ok + skipped + failed over the hosts). From them:

* controller CPU per host-task: what every task on every node costs the machine running
  ansible-playbook (forking a worker, templating, SSH, the module's result);
* wall per task on one node: the latency a node adds to each task (SSH round trip, python on
  the node, the module's work).

Then, for N compute nodes each running the compute node's host-tasks, two bounds of a push
deploy from one controller with C cores and F forks: CPU-bound N x tasks x CPU / min(C, F),
and latency-bound tasks x ceil(N / F) x latency (the linear strategy runs each task on F hosts
at a time). And a pull deploy (ansible-pull on every node from a shared checkout): every node
runs its own tasks, so the wall time is about one node's run, whatever N. Prints figures,
asserts nothing; the extrapolation is arithmetic on the measured figures, stated as such.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hal_provision.cli import runner  # noqa: E402
from hal_provision.sandbox import lifecycle  # noqa: E402

RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)", re.M)


def run(sb: lifecycle.Sandbox, *extra: str) -> dict:
    cmd = runner.playbook_cmd("site.yml", lifecycle.inventories(sb.inventory), *extra)
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env=dict(runner.ansible_env(), ANSIBLE_NOCOLOR="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = proc.stdout.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    rows = RECAP.findall(out)
    if os.waitstatus_to_exitcode(status) != 0 or not rows:
        sys.stderr.write(out[-3000:])
        raise SystemExit(f"{' '.join(cmd)} failed")
    per_host = {r[0]: int(r[1]) + int(r[5]) + int(r[4]) for r in rows}
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "host_tasks": sum(per_host.values()),
        "hosts": len(per_host),
        "changed": sum(int(r[2]) for r in rows),
        "per_host": per_host,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=Path(".hal-sandbox"))
    ap.add_argument("--forks", type=int, nargs="+", default=[5, 20])
    ap.add_argument("--controller-cores", type=int, default=16, help="cores of the controller to extrapolate to")
    args = ap.parse_args()
    from hal_provision.loader import load

    sb = lifecycle.plan(load().model, args.workdir)
    if not sb.inventory.is_dir():
        raise SystemExit(f"no sandbox at {args.workdir}: run `hal-provision sandbox up` first")
    node = str(list(sb.cluster.slurm_nodes)[0])
    runs = [(f"all {len(sb.hosts)} hosts, forks {f}", run(sb, "-f", str(f))) for f in args.forks]
    one = run(sb, "--limit", node)
    runs.append((f"one compute node ({node})", one))
    print(f"measured on {os.cpu_count()} cores; idempotent site.yml re-runs over SSH")
    print(f"{'run':<34} {'wall s':>7} {'ctl CPU s':>9} {'host-tasks':>10} {'changed':>7} {'CPU/host-task':>13}")
    for name, r in runs:
        print(
            f"{name:<34} {r['wall']:7.1f} {r['cpu']:9.1f} {r['host_tasks']:10d} {r['changed']:7d} "
            f"{r['cpu'] / r['host_tasks'] * 1000:10.0f} ms"
        )
    tasks = one["per_host"][node]
    cpu = min(r["cpu"] / r["host_tasks"] for _n, r in runs)
    latency = one["wall"] / tasks
    print(
        f"\ncompute node: {tasks} host-tasks a run; controller CPU {cpu * 1000:.0f} ms per host-task; "
        f"{latency:.2f} s per task on one node (wall / tasks)"
    )
    c = args.controller_cores
    print(f"\nextrapolated (arithmetic on the figures above), controller with {c} cores:")
    print(f"{'nodes':>7} {'forks':>6} {'push, CPU-bound':>16} {'push, latency-bound':>20} {'pull (ansible-pull)':>20}")
    for n in (1_000, 10_000):
        for forks in (50, 200):
            cpu_bound = n * tasks * cpu / min(c, forks)
            lat_bound = tasks * math.ceil(n / forks) * latency
            print(
                f"{n:>7,} {forks:>6} {cpu_bound / 60:13.0f} min {lat_bound / 60:17.0f} min {one['wall'] / 60:17.1f} min"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
