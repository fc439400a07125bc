"""Node-local scratch: the mount unit and the RAID of each hardware profile with a scratch.

Per profile that some node group uses (hardware.<profile>.scratch):

* ``files/etc/hal-provision/scratch/<profile>/<unit>.mount``: the systemd mount unit of the
  scratch file system at its mount point (the unit's name is systemd's escape of that path,
  model.naming.mount_unit_name, as for the NFS mounts).
* ``files/etc/hal-provision/scratch/<profile>/mdadm.conf`` (layout raid0): the array's ARRAY
  line, its member devices named, for /etc/mdadm/mdadm.conf.d/.
* ``files/etc/hal-provision/scratch.json``: for the local_scratch role, each node group's
  profile and each profile's devices, layout, file system, mount point and file names.

The role makes the array (mdadm) and the file system only where none is there yet: a device
that already holds the file system is mounted as it is, and one holding another is refused.
"""

from __future__ import annotations

import json

from ..model import Cluster, HardwareProfile
from ..model.naming import mount_unit_name
from .common import header, json_comment

FACTS = "files/etc/hal-provision/scratch.json"
SCRATCH_DIR = "files/etc/hal-provision/scratch"
MD_DEVICE = "/dev/md/scratch"  # the raid0 array's name on every node
MDADM_CONF_D = "/etc/mdadm/mdadm.conf.d/hal-scratch.conf"
MOUNT_OPTIONS = "defaults,noatime"  # xfs and ext4 alike


def source(profile: HardwareProfile) -> str:
    """What is mounted: the one device, or the raid0 array."""
    scratch = profile.scratch
    return scratch.devices[0] if scratch.layout == "single" else MD_DEVICE


def scratch_profiles(cluster: Cluster) -> dict[str, HardwareProfile]:
    """Profiles with a scratch that some node group uses, in model order."""
    used = {g.hardware for g in cluster.nodes}
    return {name: p for name, p in cluster.hardware.items() if p.scratch is not None and name in used}


def mount_unit(cluster: Cluster, name: str, profile: HardwareProfile) -> str:
    scratch = profile.scratch
    made_of = f"{scratch.devices[0]}" if scratch.layout == "single" else f"raid0 of {', '.join(scratch.devices)}"
    return (
        header(cluster) + "[Unit]\n"
        f"Description=Node-local scratch of {name} ({made_of}, {scratch.filesystem})\n"
        "Documentation=man:job_container.conf(5) man:namespace.yaml(5)\n"
        "\n[Mount]\n"
        f"What={source(profile)}\n"
        f"Where={scratch.mount_point}\n"
        f"Type={scratch.filesystem}\n"
        f"Options={MOUNT_OPTIONS}\n"
        "\n[Install]\n"
        "WantedBy=local-fs.target\n"
    )


def mdadm_conf(cluster: Cluster, name: str, profile: HardwareProfile) -> str:
    """The array by its name and members: mdadm assembles it at boot from these devices only."""
    return (
        header(cluster) + f"# Node-local scratch of {name}: raid0 (mdadm) over its NVMe devices.\n"
        f"ARRAY {MD_DEVICE} metadata=1.2 devices={','.join(profile.scratch.devices)}\n"
    )


def render(cluster: Cluster) -> dict[str, str]:
    profiles = scratch_profiles(cluster)
    if not profiles:
        return {}
    files: dict[str, str] = {}
    facts_profiles: dict[str, dict] = {}
    for name, p in profiles.items():
        unit = mount_unit_name(p.scratch.mount_point)
        files[f"{SCRATCH_DIR}/{name}/{unit}"] = mount_unit(cluster, name, p)
        if p.scratch.layout == "raid0":
            files[f"{SCRATCH_DIR}/{name}/mdadm.conf"] = mdadm_conf(cluster, name, p)
        facts_profiles[name] = {
            "devices": list(p.scratch.devices),
            "layout": p.scratch.layout,
            "filesystem": p.scratch.filesystem,
            "mount_point": p.scratch.mount_point,
            "source": source(p),
            "unit": unit,
            "mdadm_conf": MDADM_CONF_D if p.scratch.layout == "raid0" else None,
        }
    facts = {
        "_comment": json_comment(cluster),
        "groups": {g.name: g.hardware for g in cluster.nodes if g.hardware in profiles},
        "profiles": facts_profiles,
    }
    files[FACTS] = json.dumps(facts, indent=2) + "\n"
    return files
