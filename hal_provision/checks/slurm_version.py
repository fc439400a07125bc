"""Checks: slurm.version against the Slurm cluster.os ships, slurm.extra against the Slurm major
the site runs (model/slurm_versions.py's tables) and against the keys hal-provision writes itself."""

from __future__ import annotations

from ..findings import error
from ..model import Cluster
from ..model.slurm_versions import RENDERED_KEYS, operating_system, versioned
from . import check


@check
def slurm_version_shipped_by_os(c: Cluster):
    """A slurm.version cluster.os does not ship: its packages would come from nowhere, unless the
    site builds its own (slurm.build_own)."""
    os = operating_system(c.cluster.os)
    if c.slurm.version != os.slurm and not c.slurm.build_own:
        yield error(
            ("slurm", "version"),
            f"{os.title} (cluster.os {os.name}) ships Slurm {os.slurm}, not "
            f"{c.slurm.version}: leave slurm.version out (or set it to {os.slurm}), "
            "or set slurm.build_own: true where the site provides its own Slurm "
            "packages",
        )


@check
def slurm_extra_in_version(c: Cluster):
    """A key, or an item of its comma-separated value, that slurm.version does not read."""
    version = c.slurm.version
    for key, value in c.slurm.extra.items():
        entry = versioned(key)
        if entry is not None and not entry.read_by(version):
            yield error(("slurm", "extra", key), entry.refusal(version))
            continue
        for item in (v.strip() for v in value.split(",")):
            entry = versioned(key, item)
            if entry is not None and not entry.read_by(version):
                yield error(("slurm", "extra", key), f"{key}: {entry.refusal(version)}")


@check
def slurm_extra_not_rendered(c: Cluster):
    """A key hal-provision writes from the model would be a second line of it in slurm.conf."""
    for key in c.slurm.extra:
        if key.lower() in RENDERED_KEYS:
            yield error(
                ("slurm", "extra", key),
                f"{key} is written by hal-provision from the model; slurm.extra "
                "would write it twice (set the model's field, or ask for one)",
            )
