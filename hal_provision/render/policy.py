"""The update policy, rendered into the tree the roles read.

``files/etc/hal-provision/update-policy.json`` is hal_provision/update_policy.yml as JSON: the
roles take their restart-or-reconfigure rule from it (the slurm role reads
``slurm.reconfigure_keys``), so a converge does what `hal-provision plan` predicted from the
same table. The table is the toolkit's, not the cluster's: only the header names the cluster.
"""

from __future__ import annotations

import json

from .. import update_policy
from ..model import Cluster
from .common import json_comment

POLICY_JSON = "files/etc/hal-provision/update-policy.json"


def render(cluster: Cluster) -> dict[str, str]:
    doc = {"_comment": json_comment(cluster), **update_policy.load().data}
    return {POLICY_JSON: json.dumps(doc, indent=2, sort_keys=True) + "\n"}
