"""Fill this machine's caches for a description's sandbox ahead of `hal-provision sandbox up`:
the node image that carries the roles' packages and the wheelhouse of what the sandbox's
portal and module environments pip-install (the part of `up` that needs no container of the
sandbox). `up` then finds both and starts its containers at once.

tests/run-all.sh runs it for the embedded HAL description beside pytest, so that the `default`
scenario's `up` does not wait for downloads and wheel builds after pytest. Usage:
``python3 -m hal_provision.sandbox.prefill [FILE] [--computes N] [--cpu-only]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from ..loader import load
from . import image as image_mod
from . import lifecycle, wheelhouse
from .derive import SandboxError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", nargs="?", type=Path, help="cluster.yml; the embedded HAL description if omitted")
    ap.add_argument("--computes", type=int, default=2, help="compute nodes, as `sandbox up --computes` (default 2)")
    ap.add_argument("--cpu-only", action="store_true", help="as `sandbox up --cpu-only`")
    args = ap.parse_args(argv)
    loaded = load(args.file)
    if loaded.model is None:
        for finding in loaded.findings:
            print(finding.format(), file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory(prefix="hal-prefill-") as tmp:
            sb = lifecycle.plan(loaded.model, Path(tmp), computes=args.computes, cpu_only=args.cpu_only)
            image = image_mod.build_packages(release=sb.release)
            missing = lifecycle.fill_wheelhouse(sb, image, log=print)
    except (
        SandboxError,
        lifecycle.LifecycleError,
        image_mod.ImageError,
        wheelhouse.WheelhouseError,
        subprocess.CalledProcessError,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for module, why in sorted(missing.items()):
        print(f"module {module}: in none of this machine's pip sources ({why}); `up` leaves it out")
    print(f"wheelhouse {wheelhouse.default_dir()} holds what the {sb.name} installs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
