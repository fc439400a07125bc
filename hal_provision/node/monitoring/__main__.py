"""`python3 -m hal_monitoring <collector> [options]` (on a node) or
`python -m hal_provision.node.monitoring <collector> [options]` (here)."""

from __future__ import annotations

import sys

from . import bmc, gpu, healthstate, probe, pullstate, slurm, standin, textfile
from .commands import guarded

COLLECTORS = {
    "slurm": slurm.main,
    "bmc": bmc.main,
    "gpu": gpu.main,
    "nvidia_smi": gpu.nvidia_smi_main,
    "storage_responsiveness": probe.main,
    "health": healthstate.main,
    "pull": pullstate.main,
    "standin": standin.main,
    "textfile": textfile.main,
}
USAGE = f"usage: python3 -m hal_monitoring {{{','.join(COLLECTORS)}}} [options]   (each takes --help)"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr if not argv else sys.stdout)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COLLECTORS:
        print(f"hal_monitoring: no collector {name!r}\n{USAGE}", file=sys.stderr)
        return 2
    return guarded(name, COLLECTORS[name], rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
