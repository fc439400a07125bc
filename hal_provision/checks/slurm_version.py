"""Checks: slurm.extra against the Slurm major the site runs (model/slurm_versions.py's table)
and against the keys hal-provision writes itself."""

from __future__ import annotations

from ..findings import error
from ..model import Cluster
from ..model.slurm_versions import RENDERED_KEYS, versioned
from . import check


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
            yield error(("slurm", "extra", key), f"{key} is written by hal-provision from the model; slurm.extra "
                                                 "would write it twice (set the model's field, or ask for one)")
