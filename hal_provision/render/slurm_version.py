"""The Slurm major the tree is written for, as data: `hal-provision plan` compares OLD's with
NEW's to plan an upgrade (update_policy.yml's slurm_upgrade), which a rendered slurm.conf alone
does not show (most majors render it alike)."""

from __future__ import annotations

import json

from ..model import Cluster
from ..model.slurm_versions import upgrades_from
from .common import json_comment

SLURM_VERSION_JSON = "files/etc/hal-provision/slurm-version.json"


def render(cluster: Cluster) -> dict[str, str]:
    version = cluster.slurm.version
    doc = {"_comment": json_comment(cluster), "version": version, "upgrades_from": list(upgrades_from(version))}
    return {SLURM_VERSION_JSON: json.dumps(doc, indent=2, sort_keys=True) + "\n"}
