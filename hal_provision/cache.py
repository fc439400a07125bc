"""Where hal-provision keeps what it builds once per machine and user: the parsed inventory,
the sandbox's wheelhouse, Slurm's second-major root."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(name: str) -> Path:
    """$XDG_CACHE_HOME/hal-provision/NAME, else ~/.cache/hal-provision/NAME (not created)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hal-provision" / name
