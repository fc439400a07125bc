"""The rendered Ansible inventory as data, for the `hal.provision.cluster` inventory plugin.

The plugin must give Ansible exactly the groups and variables of a rendered inventory
directory, so it does not group anything itself: it renders the same files
(render/inventory.py's `inventory/hosts.yml`, render/storage.py's `inventory/storage.yml`,
render/deploy.py's `inventory/deploy.yml` in pull mode, render/provisioning.py's
`inventory/provisioning.yml` with a provisioning section) and
parses them as Ansible's yaml plugin would read them from that directory (documents.py).

Checking a 100,000-node description and parsing its rendered inventory take about 5.5 s (the
parse of 18 MB of YAML nearly all of it), so the parsed documents are kept in a per-user cache
(`$XDG_CACHE_HOME/hal-provision/inventory`, else `~/.cache/...`) keyed on the description's
path, size and modification time, the Python version and the hal_provision code itself
(version and its modules' sizes and times): a changed description or a changed renderer is a
miss. Entries are marshal files (the fastest loader for plain data; the directory is the
user's own, 0700); one entry per description is kept.
Descriptions with errors are never cached: they are checked again on every run.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..files import cache_dir, write_atomic
from ..findings import Finding, Level
from .documents import cycle_collection_paused, parse_documents

PACKAGE = Path(__file__).resolve().parents[1]
FORMAT = 1
"""Bump when the cached documents' shape changes."""


class InvalidCluster(Exception):
    """The description cannot be turned into an inventory; str() lists the findings."""

    def __init__(self, file: str, findings: list[Finding]):
        self.file = file
        self.findings = findings
        errors = [f for f in findings if f.level is Level.error]
        lines = [f.format() for f in errors]
        super().__init__(
            f"{file}: {len(errors)} error{'s' if len(errors) != 1 else ''} in the cluster description "
            f"(`hal-provision validate {file}` shows every finding):\n" + "\n".join(lines)
        )


@dataclass
class InventoryData:
    """What a rendered inventory directory holds, parsed: one mapping per file, in the order
    Ansible reads them; plus the description's warnings, to show on every run."""

    documents: list[dict]
    warnings: list[str] = field(default_factory=list)
    cached: bool = False  # read from the cache (for tests and the bench)


def inventory_files(cluster) -> dict[str, str]:
    """The rendered inventory files of the cluster: {relative path: text}, as render_all has them."""
    from ..render import deploy, inventory, provisioning, storage

    files = dict(inventory.render(cluster))
    files.update(deploy.inventory_files(cluster))
    files.update(provisioning.inventory_files(cluster))
    groups = storage.inventory(cluster)
    if groups is not None:
        files[storage.INVENTORY] = groups
    return files


def build(cluster_file: str | os.PathLike) -> InventoryData:
    """Load and check the description, render its inventory and parse it (no cache)."""
    from ..loader import validate

    loaded = validate(cluster_file)
    if loaded.model is None or any(f.level is Level.error for f in loaded.findings):
        raise InvalidCluster(str(cluster_file), loaded.findings)
    warnings = [f.format() for f in loaded.findings if f.level is Level.warning]
    return InventoryData(parse_documents(inventory_files(loaded.model)), warnings)


def default_cache_dir() -> Path:
    return cache_dir("inventory")


def code_fingerprint() -> str:
    """The package's version and the size and mtime of each of its modules: editing a renderer
    in a checkout invalidates the cache as surely as installing a new version does."""
    digest = hashlib.sha256(f"{__version__}\0{FORMAT}\0{sys.version}".encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        st = path.stat()
        digest.update(f"{path.relative_to(PACKAGE)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def cache_entry(cluster_file: str | os.PathLike, cache_dir: Path) -> tuple[Path, str] | None:
    """(entry path, prefix shared by every entry of this description), or None when the
    description cannot be stat'ed (then it is not cached; loading reports why)."""
    path = os.path.abspath(cluster_file)
    try:
        st = os.stat(path)
    except OSError:
        return None
    prefix = hashlib.sha256(path.encode()).hexdigest()[:16]
    state = hashlib.sha256(f"{st.st_size}\0{st.st_mtime_ns}\0{code_fingerprint()}".encode()).hexdigest()[:16]
    return cache_dir / f"{prefix}-{state}.marshal", prefix


def load(
    cluster_file: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    write_cache: bool = True,
) -> InventoryData:
    """The inventory data of the description: from the cache when it holds this version of
    the file (and use_cache), else built and, when write_cache, stored."""
    directory = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    entry = cache_entry(cluster_file, directory) if (use_cache or write_cache) else None
    if entry is not None and use_cache:
        cached = _read(entry[0])
        if cached is not None:
            return cached
    data = build(cluster_file)
    if entry is not None and write_cache:
        _write(entry[0], entry[1], data)
    return data


def _read(path: Path) -> InventoryData | None:
    try:
        with open(path, "rb") as fh, cycle_collection_paused():
            documents, warnings = marshal.load(fh)
    except (OSError, EOFError, ValueError, TypeError):
        return None
    return InventoryData(documents, warnings, cached=True)


def _write(path: Path, prefix: str, data: InventoryData) -> None:
    """Atomically (a reader never sees half an entry), readable by the user only; older entries
    of the same description go. Not synced to disk: a lost entry is only a miss. A cache that
    cannot be written (or data marshal cannot hold) is no error: the next run builds again."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, marshal.dumps((data.documents, data.warnings)), mode=0o600, durable=False)
        for old in path.parent.glob(f"{prefix}-*.marshal"):
            if old != path:
                old.unlink(missing_ok=True)
    except (OSError, ValueError):
        pass
