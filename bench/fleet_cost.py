#!/usr/bin/env python3
"""Pull against push on the same compute nodes, measured on the sandbox, and what that means at
1,000 and 10,000 nodes with herds.

    python3 bench/fleet_cost.py [--computes 2 4] [--workdir .hal-sandbox-bench]

For each compute-node count N: `hal-provision sandbox up tests/data/clusters/fleet.yml
--computes N` (its own work directory; the push of site.yml is the nodes' enrolment), then one
change of the model (deploy.drain_wait_s, which every compute node's deploy.json carries) applied
twice, as a site would:

* push: site.yml from the controller, limited to the compute nodes (`--limit deploy_pull`), over
  SSH with the repository's ansible.cfg (Mitogen where installed);
* pull: the bundle built (in this process), published by playbooks/publish.yml to the
  distribution point, and `hal-provision fleet converge --wait` (ClusterShell over SSH: each node
  runs hal-converge, which checks, drains, converges and resumes itself).

Measured: wall time, and the controller's CPU time (the processes it runs and their children:
os.wait4 of each child; the bundle's build: this process's CPU time), total and per node. The
sandbox's nodes share this machine's cores with the controller, so the wall times of N nodes
converging at once are an upper bound of a real cluster's (where each node has its own).

Then the arithmetic, stated as such: push from one controller with C cores costs N x (push CPU
per node) / C of CPU-bound wall time; pull costs the controller the bundle and one publish per
distribution point (herds of at most --herd nodes) and the fan-out's CPU per node, and its wall
time is about one node's converge whatever N (each node runs its own), plus the timer's
randomized delay when the timer rather than `fleet converge` starts it. Prints figures, asserts
nothing; nothing is kept.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hal_provision import tools  # noqa: E402
from hal_provision.cli import runner  # noqa: E402
from hal_provision.sandbox import lifecycle  # noqa: E402

CLUSTER = REPO / "tests" / "data" / "clusters" / "fleet.yml"
SUBNET = "10.89.79.0/24"


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """(wall s, CPU s of the command and its children, output) of one command; exits on failure."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.stderr.write(out[-3000:])
        raise SystemExit(f"{' '.join(cmd)} failed")
    return wall, usage.ru_utime + usage.ru_stime, out


def playbook(sb: lifecycle.Sandbox, name: str, *extra: str) -> tuple[float, float]:
    cmd = runner.playbook_cmd(name, lifecycle.inventories(sb.inventory), *extra)
    wall, cpu, _out = timed(cmd, env=dict(runner.ansible_env(), ANSIBLE_NOCOLOR="1"))
    return wall, cpu


def changed(sb: lifecycle.Sandbox, step: int) -> tuple[lifecycle.Sandbox, dict]:
    """The sandbox with deploy.drain_wait_s moved by `step` seconds, and its rendered tree."""
    from dataclasses import replace

    data = json.loads(sb.cluster.model_dump_json())
    data["deploy"]["drain_wait_s"] += step
    cluster = type(sb.cluster).model_validate(data)
    new = replace(sb, cluster=cluster)
    return new, lifecycle.rendered_files(new)


def measure(computes: int, workdir: Path) -> dict:
    up = [
        tools.self_command(),
        "sandbox",
        "up",
        str(CLUSTER),
        "--computes",
        str(computes),
        "--subnet",
        SUBNET,
        "--workdir",
        str(workdir),
    ]
    enrol_wall, _cpu, _out = timed(up, env=tools.child_env())
    sb = lifecycle.load(workdir)
    nodes = list(sb.cluster.deploy_pull_nodes)
    from hal_provision.pull import bundle as lib
    from hal_provision import release
    from hal_provision.cli.bundle import write_outputs
    from hal_provision.render.writer import write_tree

    with tempfile.TemporaryDirectory(prefix="hal-fleet-bench-") as tmp:
        tmp = Path(tmp)
        # push: the changed tree, site.yml on the compute nodes
        _pushed, files = changed(sb, 1)
        write_tree(files, tmp / "push")
        push_wall, push_cpu = playbook(
            sb, "site.yml", "--limit", "deploy_pull", "-e", f"hal_rendered_dir={tmp / 'push' / 'files'}"
        )
        # pull: another change, built, published, converged by the nodes
        pulled, files = changed(sb, 2)
        start, cpu0 = time.monotonic(), time.process_time()
        built = lib.build(pulled.cluster, files)
        write_outputs(release.sign_outputs(built.outputs(), pulled.cluster.cluster.name), tmp / "bundle")
        build_cpu = time.process_time() - cpu0
        publish_wall, publish_cpu = playbook(sb, "publish.yml", "-e", f"bundle_dir={tmp / 'bundle'}")
        converge_wall, converge_cpu, _out = timed(
            [tools.self_command(), "fleet", "converge", ",".join(nodes), "-i", str(sb.inventory), "--wait"],
            env=tools.child_env(),
        )
        pull_wall = time.monotonic() - start
        runs = {}
        for host in nodes:
            out = subprocess.run(
                ["podman", "exec", host, "cat", "/var/lib/hal-provision/converge/last.json"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            runs[host] = json.loads(out or "{}")
        bad = {
            h: r.get("state")
            for h, r in runs.items()
            if r.get("version") != built.version or r.get("state") != "changed"
        }
        if bad:
            raise SystemExit(f"pull did not converge every node to {built.version}: {bad}")
    return {
        "nodes": len(nodes),
        "enrol_wall": enrol_wall,
        "push_wall": push_wall,
        "push_cpu": push_cpu,
        "build_cpu": build_cpu,
        "publish_wall": publish_wall,
        "publish_cpu": publish_cpu,
        "converge_wall": converge_wall,
        "converge_cpu": converge_cpu,
        "pull_wall": pull_wall,
        "node_seconds": max(r["seconds"] for r in runs.values()),
        "bundle_bytes": len(built.outputs()[f"{built.version}.tar.gz"]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--computes", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--workdir", type=Path, default=REPO / ".hal-sandbox-bench")
    ap.add_argument("--controller-cores", type=int, default=16, help="cores of the controller to extrapolate to")
    ap.add_argument("--herd", type=int, default=500, help="pull nodes per distribution point to extrapolate with")
    ap.add_argument("--keep", action="store_true", help="leave the last sandbox up")
    ap.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="measure nothing: print the tables of the JSON lines an earlier run printed into FILE",
    )
    args = ap.parse_args()
    if args.report:
        rows = [json.loads(line) for line in args.report.read_text().splitlines() if line.startswith("{")]
        return report(rows, args.controller_cores, args.herd)
    rows = []
    try:
        for n in args.computes:
            rows.append(measure(n, args.workdir))
            print(json.dumps(rows[-1]), flush=True)  # each as it comes: a later failure keeps it
    finally:
        if not args.keep:
            subprocess.run(
                [tools.self_command(), "sandbox", "down", str(CLUSTER), "--workdir", str(args.workdir)],
                env=tools.child_env(),
                capture_output=True,
                check=False,
            )
    return report(rows, args.controller_cores, args.herd)


def report(rows: list[dict], cores: int, herd: int) -> int:
    print(
        f"measured on {os.cpu_count()} cores (controller and sandbox nodes share them); one change of every "
        "compute node's deploy.json, applied by push, then by pull"
    )
    print(
        f"{'nodes':>5} | {'push wall':>9} {'push CPU':>8} {'CPU/node':>8} | {'pull wall':>9} {'build':>6} "
        f"{'publish':>8} {'fan-out':>8} {'ctl CPU/node':>12} {'node run':>8}"
    )
    for r in rows:
        pull_cpu = r["build_cpu"] + r["publish_cpu"] + r["converge_cpu"]
        print(
            f"{r['nodes']:>5} | {r['push_wall']:8.1f}s {r['push_cpu']:7.1f}s {r['push_cpu'] / r['nodes']:7.2f}s | "
            f"{r['pull_wall']:8.1f}s {r['build_cpu']:5.2f}s {r['publish_cpu']:7.2f}s {r['converge_cpu']:7.2f}s "
            f"{pull_cpu / r['nodes']:11.2f}s {r['node_seconds']:7.1f}s"
        )
    big = rows[-1]
    push_per_node = big["push_cpu"] / big["nodes"]
    fan_per_node = big["converge_cpu"] / big["nodes"]
    publish_per_point = big["publish_cpu"]  # one point in the sandbox
    print(
        f"\nbundle: {big['bundle_bytes'] / 1e6:.2f} MB; a node's own run (check, drain, converge, resume): "
        f"{big['node_seconds']:.0f} s with {big['nodes']} nodes sharing {os.cpu_count()} cores"
    )
    c = cores
    print(
        f"\nextrapolated (arithmetic on the {big['nodes']}-node figures above), controller with {c} cores, "
        f"herds of {herd} (one distribution point each):"
    )
    print(
        f"{'nodes':>7} {'points':>6} | {'push CPU':>10} {'push wall, CPU-bound':>21} | {'pull ctl CPU, timer':>19} "
        f"{'+ fleet converge':>16} {'pull wall':>10}"
    )
    for n in (1_000, 10_000):
        points = math.ceil(n / herd)
        push_cpu = n * push_per_node
        timer_cpu = big["build_cpu"] + points * publish_per_point
        print(
            f"{n:>7,} {points:>6} | {push_cpu / 60:8.0f} min {push_cpu / c / 60:17.0f} min | "
            f"{timer_cpu / 60:15.1f} min {(timer_cpu + n * fan_per_node) / 60:12.1f} min "
            f"{big['node_seconds'] / 60:7.1f} min"
        )
    print(
        "pull ctl CPU, timer: the bundle and one publish per point; the nodes' timers start their runs. With "
        "`fleet converge` the controller also opens an SSH session per node (the fan-out's CPU per node)."
    )
    print(
        "pull wall: one node's run, every node at once (each on its own cores); add the timer's randomized "
        "delay when the timer starts it, and the fan-out's own wall time (ClusterShell, its fanout at a time)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
