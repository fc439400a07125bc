#!/usr/bin/env python3
"""Time site.yml on the sandbox: a first converge on fresh containers, then idempotent re-runs.

    python3 bench/converge.py [--reruns 2] [--podman-reruns 1] [--keep]

Destroys any existing sandbox first (same names), brings up fresh containers without
converging, then times `ansible-playbook site.yml` (first converge) and each re-run over SSH
with pipelining (the sandbox inventory and the repository's ansible.cfg, as a real site
deploys), then the same idempotent re-run through the podman connection (`podman exec` per
module, the container named by the inventory's hal_sandbox_container), so the two are
measured side by side on the same converged nodes. Prints a table with the PLAY RECAP's
changed count per run. Needs podman, the node image (built if missing) and ansible-playbook
on PATH (./bootstrap.sh sets that up). Prints figures only; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hal_provision.loader import load  # noqa: E402
from hal_provision.sandbox import lifecycle  # noqa: E402

RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def podman_inventory(sb: lifecycle.Sandbox) -> Path:
    """An inventory read after the sandbox's: the same hosts through the podman connection
    (every module by `podman exec`/`podman cp` into the node's container)."""
    path = sb.workdir / "podman-inventory.yml"
    path.write_text("all:\n  hosts:\n" + "".join(
        f"    {h}: {{ansible_connection: containers.podman.podman, ansible_host: {h}}}\n" for h in sb.hosts))
    return path


def timed_converge(sb: lifecycle.Sandbox, *extra: str) -> tuple[float, int, int, int]:
    start = time.monotonic()
    proc = subprocess.run(lifecycle.playbook_cmd(sb, "site.yml", *extra), env=lifecycle.ansible_env(),
                          capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    rows = RECAP.findall(proc.stdout)
    changed = sum(int(r[2]) for r in rows)
    failed = sum(int(r[3]) + int(r[4]) for r in rows)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-2000:])
    return took, changed, failed, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reruns", type=int, default=2)
    ap.add_argument("--podman-reruns", type=int, default=1, help="idempotent re-runs through the podman connection")
    ap.add_argument("--workdir", type=Path, default=Path(".hal-sandbox-bench"))
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up afterwards")
    args = ap.parse_args()
    sb = lifecycle.plan(load().model, args.workdir)
    lifecycle.destroy(sb.name, args.workdir, log=lambda m: None)
    t0 = time.monotonic()
    lifecycle.create(sb, log=lambda m: None)
    create_s = time.monotonic() - t0
    rows = [("containers up (image present)", create_s, "-", "-", 0)]
    try:
        took, changed, failed, rc = timed_converge(sb)
        rows.append(("site.yml first converge", took, changed, failed, rc))
        for i in range(args.reruns):
            took, changed, failed, rc = timed_converge(sb)
            rows.append((f"site.yml re-run {i + 1} (idempotent)", took, changed, failed, rc))
        for i in range(args.podman_reruns):
            took, changed, failed, rc = timed_converge(sb, "-i", str(podman_inventory(sb)))
            rows.append((f"re-run {i + 1} over podman exec", took, changed, failed, rc))
    finally:
        if not args.keep:
            lifecycle.destroy(sb.name, args.workdir, log=lambda m: None)
    print(f"{'step':<36} {'wall s':>8} {'changed':>8} {'failed':>7} {'rc':>3}")
    for name, secs, changed, failed, rc in rows:
        print(f"{name:<36} {secs:8.1f} {changed!s:>8} {failed!s:>7} {rc:>3}")
    ssh = [r[1] for r in rows if "(idempotent)" in r[0]]
    podman = [r[1] for r in rows if "podman" in r[0]]
    if ssh and podman:
        print(f"idempotent re-run, podman exec / SSH: {min(podman) / min(ssh):.1f}x")
    print(f"hosts: {', '.join(sb.hosts)}")
    return 0 if all(r[4] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
