"""`hal-provision plan`: what a converge of NEW would change on a cluster that runs OLD.

Both sides are rendered trees ({relative path: text}); the update policy
(hal_provision/update_policy.yml) says which component each file belongs to, which hosts get it
and what a change does there. The Slurm rule, the accounting commands and the GPFS tuning
plan are computed the way the roles compute them; jobs read from `squeue --json` and
`sinfo --json` say which of them the change would lose or strand. Pure: no CLI, nothing
written; the only commands run are `git show` (an OLD from a revision) and `ansible` (--live).
"""

from __future__ import annotations

from .core import ComponentPlan, Consequence, FileChange, Plan, build
from .sources import PlanError

__all__ = ["ComponentPlan", "Consequence", "FileChange", "Plan", "PlanError", "build"]
