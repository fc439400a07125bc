"""How the nodes are converged: pushed from the controller (the default), or pulled by the
compute nodes themselves from a published bundle.

In pull mode the controller pushes the control plane only (management, login, storage,
portal hosts), builds a bundle (`hal-provision bundle`) and publishes it on the distribution
points; each compute node's hal-converge timer fetches the newest bundle from its point and
converges itself with `ansible-playbook -c local`. Which point serves which nodes, the pull
nodes and the points' addresses are derived views of the Cluster (`deploy_points`,
`deploy_pull_nodes`); the files are the renderer's (render/deploy.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Strict
from .placement import Placement
from .oncalendar import FORMS

DEFAULT_SCHEDULE = "*:0/30"
DEFAULT_PORT = 8181
DEFAULT_HERD_SIZE = 500


class DistributionPoint(Strict):
    host: str = Field(
        description="The model host that serves bundles (nginx, read-only, on the primary network); not itself a "
        "pull node."
    )
    serves: Placement | None = Field(
        None,
        description="The pull nodes this point serves, a hostlist that may name node groups (@GROUP) and roles "
        "(@role:ROLE), so that a grown group needs no second edit. May be left out when there is one point: it then "
        "serves every pull node.",
    )


class Deploy(Strict):
    mode: Literal["push", "pull"] = Field(
        "push",
        description="push: the controller converges every host (ansible-playbook over SSH); pull: the "
        "compute nodes (role compute, the Slurm nodes) converge themselves from the bundle their distribution "
        "point publishes, and the controller pushes the control plane only.",
    )
    herd_size: int = Field(
        DEFAULT_HERD_SIZE, ge=1, description="At most this many pull nodes per distribution point (a check)."
    )
    distribution: list[DistributionPoint] | None = Field(
        None,
        min_length=1,
        description="The distribution points. None: one point, the first management host (role management; "
        "else the first slurmctld host), serving every pull node.",
    )
    port: int = Field(
        DEFAULT_PORT,
        description="TCP port the points serve bundles on (HTTP, read-only, internal network); 1-65535 (a check).",
    )
    schedule: str = Field(
        DEFAULT_SCHEDULE,
        description="When each pull node looks for a new bundle: the OnCalendar= expression of its hal-converge "
        f"timer (systemd.time(7)). Accepted: {FORMS}.",
    )
    randomized_delay_s: int = Field(
        300, ge=0, description="RandomizedDelaySec= of the timer: the nodes of a herd do not all fetch at once."
    )
    boot_delay_s: int = Field(
        120,
        ge=0,
        description="OnBootSec= of the timer: how long after boot a node converges (a node that was down "
        "catches up then, once its network and slurmd are up).",
    )
    drain_wait_s: int = Field(
        3600,
        ge=0,
        description="How long a node waits, per run, for its jobs after draining itself for a change; jobs still "
        "running then: it stays drained and the next run goes on (jobs are never cancelled).",
    )
