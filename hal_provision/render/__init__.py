"""Pure renderers: model -> {relative path: text}. Writing happens only in render.writer."""

from __future__ import annotations

from ..model import Cluster
from . import (
    accounting,
    accounts,
    backup,
    composable,
    deploy,
    diagram,
    grafana,
    health,
    hosts,
    inventory,
    monitoring,
    ood,
    policy,
    portal,
    prometheus,
    provisioning,
    recipes,
    scratch,
    slurm,
    slurm_version,
    software,
    storage,
    swsuite,
)


def render_all(cluster: Cluster) -> dict[str, str]:
    """Every artifact of the cluster, keyed by its path inside the rendered tree."""
    files: dict[str, str] = {}
    files.update(inventory.render(cluster))
    files.update(hosts.render(cluster))
    files.update(slurm.render(cluster))
    files.update(slurm_version.render(cluster))
    files.update(accounting.render(cluster))
    files.update(accounts.render(cluster))
    files.update(portal.render(cluster))
    files.update(ood.render(cluster))
    files.update(monitoring.render(cluster))
    files.update(prometheus.render(cluster))
    files.update(grafana.render(cluster))
    files.update(recipes.render(cluster))
    files.update(health.render(cluster))
    files.update(backup.render(cluster))
    files.update(deploy.render(cluster))
    files.update(provisioning.render(cluster))
    files.update(scratch.render(cluster))
    files.update(swsuite.render(cluster))
    files.update(storage.render(cluster))
    files.update(software.render(cluster))
    files.update(diagram.render(cluster))
    files.update(policy.render(cluster))
    files.update(composable.render(cluster))
    return dict(sorted(files.items()))
