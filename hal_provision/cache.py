"""Where hal-provision keeps what it builds once per machine and user: the parsed inventory,
the sandbox's wheelhouse, Slurm's second-major root."""

from __future__ import annotations

import os
from pathlib import Path

# Names the caches' directory outright: `./bootstrap.sh test` runs with a HOME that starts
# empty and keeps these caches where the user's own home has them.
CACHE_ENV = "HAL_PROVISION_CACHE"


def cache_dir(name: str) -> Path:
    """$HAL_PROVISION_CACHE/NAME, else $XDG_CACHE_HOME/hal-provision/NAME, else
    ~/.cache/hal-provision/NAME (not created)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]) / name
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hal-provision" / name
