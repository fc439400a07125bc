# hal-provision: the filter playbooks/tasks/resume-ours.yml picks the nodes to resume with:
# hal_provision/node/drains.py's rule, the one hal-converge and hal-healthcheck apply on the nodes.
# Apache-2.0, like the rest of hal-provision.

from __future__ import annotations

from hal_provision.node import drains


def slurm_drained_ours(lines, prefix, also=()):
    """Lines of `sinfo -h -N -o '%N|%T|%E'` -> the nodes to resume, each once in sinfo's order:
    those drained with a reason of PREFIX's, and those in ALSO drained whatever their reason
    (nodes the caller drained itself, whose reason slurmctld may have rewritten since)."""
    out = []
    for line in lines:
        node, _, rest = str(line).strip().partition("|")
        parsed = drains.parse(rest)
        if not node or parsed is None or node in out or not drains.is_drained(parsed[0]):
            continue
        if node in also or drains.ours(parsed[1], prefix):
            out.append(node)
    return out


class FilterModule:
    def filters(self):
        return {"slurm_drained_ours": slurm_drained_ours}
