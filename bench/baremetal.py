#!/usr/bin/env python3
"""Bare metal on the sandbox: power-on to idle in Slurm per node, for N guests at once; the
image's build time and size; the boot server's bytes per node.

    python3 bench/baremetal.py [--guests 2 4] [--workdir .hal-sandbox-bench-bm] [--keep]

For each N: `hal-provision sandbox up tests/data/clusters/baremetal.yml --bare-metal N` in its
own work directory and network (10.89.83.0/24, apart from the baremetal scenario's), which builds
the model's image (the first N reuses a version already in the work directory's store: only a
removed work directory builds again), starts the management node and pushes it, then powers the
N guests on at once through their Redfish BMC and waits until each is idle in Slurm. Printed per
guest, in seconds since the power-on request: sshd answering (the image booted), the bundle
published, enrolled (enroll.yml done, the guests converged by pull mode), idle; then the image's
manifest (build seconds, the three files' sizes) and the bytes the boot server's nginx sent each
guest's address (its access log). Each guest has one vCPU and 2 GiB; the N guests, the
management node's container and the controller share this machine's 2 cores, so N = 4 measures
contention more than a site's nodes (each with its own cores and a faster network) would see.
Prints figures, asserts nothing; removes the sandbox unless --keep.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hal_provision import tools  # noqa: E402

CLUSTER = REPO / "tests" / "data" / "clusters" / "baremetal.yml"
SUBNET = "10.89.83.0/24"
ACCESS_LOG = "/var/log/nginx/hal-provision-boot.access.log"


def hal(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([tools.self_command(), *argv], env=tools.child_env(), text=True, capture_output=True)


def bytes_per_client(boot_server: str) -> dict[str, int]:
    """Bytes nginx sent per client address (the combined format's 10th field is the body size)."""
    proc = subprocess.run(["podman", "exec", boot_server, "cat", ACCESS_LOG], capture_output=True, text=True)
    sent: dict[str, int] = collections.Counter()
    for line in proc.stdout.splitlines():
        fields = line.split()
        if len(fields) > 9 and fields[9].isdigit():
            sent[fields[0]] += int(fields[9])
    return dict(sent)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--guests", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--workdir", type=Path, default=REPO / ".hal-sandbox-bench-bm")
    ap.add_argument("--keep", action="store_true", help="leave the last sandbox up")
    args = ap.parse_args()
    for n in args.guests:
        started = time.monotonic()
        up = hal(
            "sandbox", "up", str(CLUSTER), "--bare-metal", str(n), "--subnet", SUBNET, "--workdir", str(args.workdir)
        )
        wall = time.monotonic() - started
        if up.returncode != 0:
            print(f"{n} guests: sandbox up failed ({up.returncode}):\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
            return 1
        timings = json.loads((args.workdir / "baremetal-timings.json").read_text())
        model = json.loads((args.workdir / "model.json").read_text())
        boot_server = model["provisioning"]["boot_server"]
        sent = bytes_per_client(boot_server)
        print(f"== {n} guests at once (sandbox up: {wall:.0f} s in all)")
        print(f"{'guest':8} {'ssh_s':>7} {'published_s':>12} {'enrolled_s':>11} {'idle_s':>7} {'MB served':>10}")
        addresses = {}
        for group in model["nodes"]:
            for i, host in enumerate(sorted(group.get("boot_macs", {}))):
                base = group["addresses"][model["cluster"]["primary_network"]]
                addresses[host] = ".".join([*base.split(".")[:3], str(int(base.split(".")[3]) + i)])
        for host, t in sorted(timings.items()):
            mb = sent.get(addresses.get(host, ""), 0) / 1e6
            print(
                f"{host:8} {t.get('ssh_s', 0):7.0f} {t.get('published_s', 0):12.0f} {t.get('enrolled_s', 0):11.0f} "
                f"{t.get('idle_s', 0):7.0f} {mb:10.1f}"
            )
        for manifest in sorted((args.workdir / "images").glob("*/*/manifest.json")):
            m = json.loads(manifest.read_text())
            sizes = ", ".join(f"{name} {f['size'] / 1e6:.1f} MB" for name, f in sorted(m["files"].items()))
            print(f"image {m['name']}@{m['version']}: built in {m['build_s']:.0f} s; {sizes}")
    if not args.keep:
        hal("sandbox", "down", str(CLUSTER), "--workdir", str(args.workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
