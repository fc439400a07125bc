"""Composable GPUs: the pools and layouts as data, and every layout's Slurm and health files.

* ``files/etc/hal-provision/composable.json``: the active layout, each pool (its GPU type and
  count, cabled hosts, slots, driver) and every layout as host -> pool GPUs, every cabled host
  of every layout listed (0 included). The compose driver and plan read it.
* ``files/etc/hal-provision/layouts/<layout>/``: what the main tree would hold were that layout
  the active one, at the same relative paths: etc/slurm/slurm.conf, etc/slurm/gres.conf and
  etc/hal-provision/health/ (the active layout's are the main tree's, byte for byte).

The main tree itself follows the active layout (render/slurm.py, health.py, inventory.py ask
the model's Cluster.node_builds / host_profile).
"""

from __future__ import annotations

import json

from ..model import Cluster
from . import health, slurm
from .common import json_comment

COMPOSABLE = "files/etc/hal-provision/composable.json"
LAYOUTS = "files/etc/hal-provision/layouts"
FILES = "files/"


def composable_json(cluster: Cluster) -> str:
    comp = cluster.composable
    return (
        json.dumps(
            {
                "_comment": json_comment(cluster),
                "active": comp.active,
                "pools": [
                    {
                        "name": pool.name,
                        "gpu_type": pool.gpus.type,
                        "count": pool.gpus.count,
                        "hosts": pool.host_names,
                        "slots_per_host": pool.slots_per_host,
                        "driver": pool.driver,
                        "driver_url": pool.driver_url,
                    }
                    for pool in comp.pools
                ],
                "layouts": {layout.name: comp.counts(layout) for layout in comp.layouts},
            },
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )


def layout_files(cluster: Cluster) -> dict[str, str]:
    """Rendered path -> text: the layout's slurm.conf, gres.conf and health expectations."""
    files = {f"{slurm.ETC}/slurm.conf": slurm.slurm_conf(cluster), f"{slurm.ETC}/gres.conf": slurm.gres_conf(cluster)}
    files.update(
        {path: text for path, text in health.render(cluster).items() if path.startswith(health.HEALTH_DIR + "/")}
    )
    return files


def render(cluster: Cluster) -> dict[str, str]:
    comp = cluster.composable
    if comp is None:
        return {}
    files = {COMPOSABLE: composable_json(cluster)}
    for layout in comp.layouts:
        for path, text in layout_files(cluster.with_layout(layout.name)).items():
            files[f"{LAYOUTS}/{layout.name}/{path.removeprefix(FILES)}"] = text
    return files
