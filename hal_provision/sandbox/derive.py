"""Derive the sandbox cluster from a full description: same hardware, fewer nodes.

The sandbox keeps the primary slurmctld host (which also runs slurmdbd and MariaDB, and the
web portal and Grafana when their own hosts are not kept), one login node and the first compute nodes, on one private podman network. Everything else in
the description is narrowed to those hosts, so the sandbox model passes the same checks as
the original and renders with the same renderers.

The backup section stays where its destination can: an NFS export whose server the sandbox
does not keep (HAL's data node) is served in the sandbox's model by a kept host that runs no
service (the login node), as every shared file system of the sandbox is a host directory bound
into the hosts that mount it, whoever the model says serves it. A host's own destination
(backup.host_destinations) goes with the host where the sandbox does not keep it (HAL's
hal-mgmt2, whose portal moves to the management node).

Two settings are shortened so the tests see their effect within a minute: the health check's
interval and PriorityCalcPeriod (fair-share factors of new accounts).

The sandbox's compute nodes get a local scratch whatever the description says: one device
(SCRATCH_STANDIN, a host loop device over a sparse file of SCRATCH_STANDIN_GIB, bound into
the container outside /dev, where systemd would wait for a udev that containers lack), with
the description's file system and mount point where it has a scratch (ext4 and /local where
not), and each job's private /tmp under <mount point>/jobs unless the group names its own.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network

from ClusterShell.NodeSet import NodeSet

from ..hostlist import nodeset, union
from ..model import Cluster, Role
from ..model.slurm_versions import operating_system
from .storage import narrow_storage

DEFAULT_SUBNET = "10.89.77.0/24"
# The NVMe stand-in of every sandbox compute node (lifecycle.create binds a loop device there).
SCRATCH_STANDIN = "/var/lib/hal-sandbox/nvme0n1"
SCRATCH_STANDIN_GIB = 1


class SandboxError(ValueError):
    pass


def derive_sandbox(
    cluster: Cluster,
    computes: int = 2,
    subnet: str = DEFAULT_SUBNET,
    cpu_only: bool = False,
    os: str | None = None,
    bare_metal: bool = False,
    bmc_credentials: str = "/var/lib/hal-provision/sandbox/bmc/credentials.yml",
) -> Cluster:
    """The sandbox's model of `cluster`; `os`: the nodes' cluster.os when it is not the description's
    (sandbox up --release). `bare_metal`: the compute nodes are QEMU guests that boot the model's
    image from the management node (sandbox up --bare-metal N), with the sandbox's Redfish emulator
    as their BMC (its credentials in the file `bmc_credentials`, which `up` makes); without it the
    sandbox's nodes are containers and the model's network boot is left out."""
    if bare_metal:
        comps = cluster.groups_with_role(Role.compute)
        if cluster.provisioning is None or not comps or comps[0].image is None:
            raise SandboxError(
                "--bare-metal needs a description whose first compute group boots an image from the network "
                "(a `provisioning` section and the group's `image`; tests/data/clusters/baremetal.yml is one)"
            )
    data = cluster.model_dump(mode="json", exclude_none=True)
    primary = cluster.cluster.primary_network
    mgmt_host = cluster.controllers[0]  # the primary
    logins = cluster.groups_with_role(Role.login)
    comps = cluster.groups_with_role(Role.compute)
    if not logins or not comps:
        raise SandboxError("the description needs a login group and a compute group for a sandbox")
    login_host = nodeset(logins[0].hosts)[0]
    first_compute = comps[0]
    comp_ns = nodeset(first_compute.hosts)
    if len(comp_ns) < computes:
        raise SandboxError(f"compute group {first_compute.name} has fewer than {computes} hosts")
    comp_hosts = str(comp_ns[0:computes])
    keep = union([mgmt_host, login_host, comp_hosts])

    net = IPv4Network(subnet)
    base = int(net.network_address)
    picks = [  # (group name, hosts, first address)
        (_group_of(cluster, mgmt_host).name, mgmt_host, base + 10),
        (logins[0].name, login_host, base + 11),
        (first_compute.name, comp_hosts, base + 21),
    ]
    # A group that plays several roles (a workstation: controller, login and compute node at
    # once) is picked more than once: it keeps the union of its picks, at its first address.
    plan: dict[str, tuple[NodeSet, int]] = {}
    for name, hosts, first in picks:
        kept, address = plan.setdefault(name, (NodeSet(), first))
        kept.update(nodeset(hosts))
    groups = []
    for name, (hosts, first) in plan.items():
        src = next(g for g in data["nodes"] if g["name"] == name)
        g = dict(src, hosts=str(hosts), addresses={primary: str(_ip(first))})
        g.pop("count", None)
        groups.append(g)
    data["nodes"] = groups
    data["networks"] = {primary: dict(data["networks"][primary], cidr=subnet)}
    used_profiles = {g["hardware"] for g in groups if "hardware" in g}  # login/management may have none
    data["hardware"] = {k: v for k, v in data["hardware"].items() if k in used_profiles}
    if not bare_metal:  # a container's scratch is a loop device the sandbox binds in; a guest has none
        _sandbox_scratch(data, next(g for g in groups if g["name"] == first_compute.name))

    svc = data["services"]
    for key in list(svc):
        if key in ("slurmctld", "slurmdbd", "accounting_db"):
            svc[key] = mgmt_host
        elif key == "portal" and not set(nodeset(svc[key])) & set(keep):
            svc[key] = mgmt_host  # the portal is what users see first: keep it, on the management host
        elif not set(nodeset(svc[key])) & set(keep):
            del svc[key]
        else:
            svc[key] = str(nodeset(svc[key]).intersection(keep))

    if "fabric" in data:
        links = []
        for link in data["fabric"]["links"]:
            hosts = nodeset(link["hosts"])
            kept = hosts.intersection(keep)
            if len(kept):
                # Keep each kept host on the switch port it has in the full cluster.
                offset = list(hosts).index(kept[0])
                links.append(
                    dict(link, hosts=str(kept), first_switch_port=link["first_switch_port"] + offset)
                    if _contiguous(hosts, kept)
                    else dict(link, hosts=str(kept))
                )
        data["fabric"]["links"] = links

    comp_set = nodeset(comp_hosts)
    parts = []
    for part in data["slurm"]["partitions"]:
        nodes = nodeset(part["nodes"]).intersection(comp_set)
        if len(nodes):
            parts.append(dict(part, nodes=str(nodes)))
    data["slurm"]["partitions"] = parts
    part_names = {p["name"] for p in parts}
    deploy = data.get("deploy") or {}
    if deploy.get("distribution"):  # pull mode: each point serves the kept nodes of its own; one point
        points = []  # left (the management host) when the others went with the narrowing
        for point in deploy["distribution"]:
            if point["host"] not in keep:
                continue
            served = nodeset(point["serves"]).intersection(comp_set) if point.get("serves") else None
            if served is None or len(served):
                points.append(dict(point, serves=str(served)) if served is not None else dict(point))
        deploy["distribution"] = points or None
        if deploy["distribution"] is None or len(points) == 1:
            deploy["distribution"] = [{"host": points[0]["host"]}] if points else None
    profile = cluster.hardware[first_compute.hardware]
    vps = []
    for vp in data.get("swsuite", {}).get("virtual_partitions", []):
        if vp["partition"] not in part_names:
            continue
        if vp["kind"] == "gpu" and vp["gpus"] > computes * profile.gpu_count:
            continue
        if vp["kind"] == "cpu" and vp["nodes"] > computes:
            continue
        vps.append(vp)
    if "swsuite" in data:
        data["swsuite"]["virtual_partitions"] = vps

    if "storage" in data:
        storage = narrow_storage(
            cluster.storage, keep, _backup_rehome(cluster, keep, svc, [login_host, *comp_ns[0:computes]])
        )
        data["storage"] = storage.model_dump(mode="json", exclude_none=True)
        binds = (data.get("containers") or {}).get("bind_filesystems")
        if binds is not None:  # containers bind only the shared file systems the sandbox keeps
            shared = storage.filesystem_names()
            data["containers"]["bind_filesystems"] = [name for name in binds if name in shared]
        if "backup" in data:
            data["backup"] = _sandbox_backup(data["backup"], storage.filesystem_names(), svc, keep)
            if data["backup"] is None:
                del data["backup"]
    kept_roles = {g["role"] for g in data["nodes"]}
    if "monitoring" in data:
        data["monitoring"] = _sandbox_monitoring(
            data["monitoring"], mgmt_host, keep, kept_roles, {g["name"] for g in data["nodes"]}
        )
    if data.get("recipes"):
        data["recipes"] = _sandbox_recipes(data["recipes"], vps)
    if data.get("health"):
        data["health"] = _sandbox_health(data["health"])
    _sandbox_priority(data)
    # The nodes install Slurm from their release's archive: the sandbox runs the major it ships,
    # whatever the description's own packages (slurm.build_own) would be.
    data["cluster"]["os"] = os or cluster.cluster.os
    data["slurm"]["version"] = operating_system(data["cluster"]["os"]).slurm
    _sandbox_provisioning(data, cluster, mgmt_host, first_compute.name, net, bare_metal, bmc_credentials)
    if cpu_only:
        _cpu_only(data, first_compute.name)
    data["cluster"]["description"] = f"sandbox of {cluster.cluster.name}: " + data["cluster"].get("description", "")
    return Cluster.model_validate(data)


def without_module_packages(cluster: Cluster, modules: set[str]) -> Cluster:
    """The sandbox's model with the named modules' (name/version) pip environments left out:
    their packages are in none of this machine's pip sources. Their modulefiles stay; the
    lmod role installs nothing for them, and the tests that need what they hold skip."""
    data = cluster.model_dump(mode="json", exclude_none=True)
    for module in data.get("software", {}).get("modules", []):
        if f"{module['name']}/{module['version']}" in modules:
            module.pop("pip", None)
    return Cluster.model_validate(data)


# The sandbox's Redfish emulator (sushy-tools, on the sandbox's host) answers for every guest on
# a loopback address derived from the sandbox's subnet: the controller reaches it, the nodes never do.
BMC_PORT = 8000
BMC_CREDENTIALS = "bmc/credentials.yml"  # under the sandbox's work directory, 0600, made by `up`


def bmc_endpoint(net: IPv4Network) -> tuple[str, str]:
    """(the emulator's network, its address) for a sandbox on `net`: 127.B.C.0/24 and .1."""
    b, c = str(net.network_address).split(".")[1:3]
    return f"127.{b}.{c}.0/24", f"127.{b}.{c}.1"


def _sandbox_provisioning(
    data: dict, cluster: Cluster, mgmt_host: str, compute: str, net, bare_metal: bool, credentials: str
) -> None:
    """Bare metal: the network boot on the sandbox's network, served by its management host, each
    kept guest's boot MAC (the model's, else one made from its address), and the emulator as the
    guests' BMC. Otherwise the nodes are containers: no network boot, no BMCs."""
    if not bare_metal:
        data.pop("provisioning", None)
        for g in data["nodes"]:
            for key in ("image", "boot_macs", "bmc"):
                g.pop(key, None)
        return
    primary = cluster.cluster.primary_network
    prov = data["provisioning"]
    prov["network"] = primary
    prov["boot_server"] = mgmt_host
    # The guests reach the archives as the containers do: through the podman bridge's gateway, the
    # sandbox host, which also answers DNS there (aardvark-dns).
    gateway = str(net.network_address + 1)
    prov["gateway"], prov["dns_servers"] = gateway, [gateway]
    bmc_net = next((n for n, v in cluster.networks.items() if v.kind == "bmc"), "bmc")
    cidr, address = bmc_endpoint(net)
    data["networks"][bmc_net] = {"kind": "bmc", "cidr": cidr, "description": "the sandbox's Redfish emulator"}
    for g in data["nodes"]:
        if g["name"] != compute:
            for key in ("image", "boot_macs", "bmc"):
                g.pop(key, None)
            continue
        first = int(IPv4Address(g["addresses"][primary]))
        macs = dict(g.get("boot_macs") or {})
        g["boot_macs"] = {
            host: macs.get(host) or _guest_mac(IPv4Address(first + i)) for i, host in enumerate(nodeset(g["hosts"]))
        }
        g["bmc"] = {
            "protocol": "redfish",
            "network": bmc_net,
            "endpoint": f"http://{address}:{BMC_PORT}",
            "system": "{host}",
            "verify_tls": False,
            "credentials": {"file": credentials},
        }


def _guest_mac(address: IPv4Address) -> str:
    """A guest's MAC: QEMU's prefix and the last three octets of its address."""
    return "52:54:00:" + ":".join(f"{int(o):02x}" for o in str(address).split(".")[1:])


def _cpu_only(data: dict, compute: str) -> None:
    """The sandbox's compute group as a CPU-only one: its profile without GPUs, the
    GPU virtual partitions gone and whatever named them narrowed to the cpu ones."""
    group = next(g for g in data["nodes"] if g["name"] == compute)
    data["hardware"][group["hardware"]].pop("gpus", None)
    vps = [vp for vp in data.get("swsuite", {}).get("virtual_partitions", []) if vp["kind"] == "cpu"]
    if "swsuite" in data:
        data["swsuite"]["virtual_partitions"] = vps
    kept = {vp["name"] for vp in vps}
    if data.get("recipes"):
        r = data["recipes"]
        if r.get("virtual_partition") not in kept and vps:
            r["virtual_partition"] = vps[0]["name"]
        r["scaling_partitions"] = [n for n in r.get("scaling_partitions", []) if n in kept]
    portal = data.get("portal")
    if portal:
        apps = []
        for app in portal.get("apps", []):
            names = [n for n in app.get("virtual_partitions", []) if n in kept]
            if names:
                apps.append(dict(app, virtual_partitions=names))
        portal["apps"] = apps


def _sandbox_scratch(data: dict, compute: dict) -> None:
    """The compute group's profile gets the stand-in scratch; the group a job /tmp base on it."""
    profile = data["hardware"][compute["hardware"]]
    source = profile.get("scratch") or {}
    mount_point = source.get("mount_point", "/local")
    profile["local_disks"] = [{"device": SCRATCH_STANDIN, "kind": "nvme", "size_gib": SCRATCH_STANDIN_GIB}]
    profile["scratch"] = {
        "devices": [SCRATCH_STANDIN],
        "layout": "single",
        "filesystem": source.get("filesystem", "ext4"),
        "mount_point": mount_point,
    }
    if not compute.get("job_tmp_base", "").startswith(mount_point.rstrip("/") + "/"):
        compute["job_tmp_base"] = mount_point.rstrip("/") + "/jobs"


# Collection interval in the sandbox: short, so the monitoring tests see data and a stopped
# node within a minute; no shorter than the slowest collector (bmc) needs.
SANDBOX_INTERVAL_SECONDS = 30


def _sandbox_monitoring(mon: dict, mgmt_host: str, keep, kept_roles: set[str], kept_groups: set[str]) -> dict:
    """Monitoring narrowed to the sandbox: inputs of the node roles and groups it keeps, Grafana beside
    the database on the management host when its own host is not kept, a short interval, and
    no InfiniBand counters (containers have no InfiniBand devices: that input would find
    nothing to read; a group's list left empty keeps the heartbeat, system)."""
    mon = dict(mon, interval_seconds=min(mon.get("interval_seconds", 60), SANDBOX_INTERVAL_SECONDS))
    mon["inputs"] = {
        role: [n for n in names if n != "infiniband"]
        for role, names in mon.get("inputs", {}).items()
        if role in kept_roles
    }
    mon["inputs_by_group"] = {
        group: [n for n in names if n != "infiniband"] or ["system"]
        for group, names in mon.get("inputs_by_group", {}).items()
        if group in kept_groups
    }
    grafana = mon.get("grafana")
    if grafana is not None and not set(nodeset(grafana["host"])) & set(keep):
        mon["grafana"] = dict(grafana, host=mgmt_host)
    return mon


def _backup_rehome(cluster: Cluster, keep, services: dict, candidates: list[str]) -> dict[str, str]:
    """Where the backup destination is an NFS export whose server the sandbox does not keep
    (HAL's: the data node's), the kept host that serves it in the sandbox's model: the first
    of `candidates` (the login node, then the compute nodes) that runs no service, so that it
    backs nothing up. The sandbox binds the export's host directory into the hosts that mount
    it whoever serves it (lifecycle.SharedMount); the model keeps the section and its checks.
    Empty where nothing needs re-homing or no host qualifies (the section is then dropped).
    The same for each kept host's own destination (backup.host_destinations)."""
    if cluster.backup is None:
        return {}
    names = [cluster.backup.destination.filesystem]
    names += [d.filesystem for host, d in cluster.backup.host_destinations.items() if host in keep]
    busy = {h for hosts in services.values() for h in nodeset(hosts)}
    host = next((h for h in candidates if h not in busy), None)
    out = {}
    for name in dict.fromkeys(names):
        export = cluster.storage.nfs.export(name)
        if export is not None and export.server not in keep and host is not None:
            out[name] = host
    return out


def _sandbox_backup(backup: dict, filesystems: set[str], services: dict, keep) -> dict | None:
    """The backup section where its file system survives the narrowing (None where it does
    not: a GPFS file system, which containers cannot run, or an export no kept host can
    serve), without the states whose service the sandbox lost, and with the own destinations
    of kept hosts only."""
    if backup["destination"]["filesystem"] not in filesystems:
        return None
    if "host_destinations" in backup:
        own = {
            host: d
            for host, d in backup["host_destinations"].items()
            if host in keep and d["filesystem"] in filesystems
        }
        backup = dict(backup, host_destinations=own)
    needs = {"directory": "ldap", "monitoring": "monitoring_db"}
    if "state" in backup:
        backup = dict(backup, state=[s for s in backup["state"] if needs.get(s, "slurmctld") in services])
    return backup if backup.get("state", True) else None


def _sandbox_recipes(recipes: dict, vps: list[dict]) -> dict:
    """Recipes narrowed to the virtual partitions the sandbox keeps (its two compute nodes
    hold no gpux16 job)."""
    gpu = [vp["name"] for vp in vps if vp["kind"] == "gpu"]
    out = dict(recipes)
    if out.get("scaling_partitions"):
        out["scaling_partitions"] = [n for n in out["scaling_partitions"] if n in gpu]
    if out.get("virtual_partition") not in gpu and gpu:
        out["virtual_partition"] = gpu[0]
    return out


# Health-check interval in the sandbox: short, so the tests see a drain and a resume within a
# minute. The checks a container cannot pass are left out: its CPUs and memory are the host's
# (slurm.conf's config_overrides, above), the fake nvidia-smi answers with a recorded H100,
# not the model's GPU, and is installed only with monitoring (the telegraf role), so a
# sandbox without it has no nvidia-smi for gpu_model and gpu_faults (tests/unit/
# test_health_gpu_faults.py runs gpu_faults on that fake instead); containers have no
# InfiniBand adapters; the node image has no DCGM, so dcgm would pass without looking at
# anything. gpus (the fake device files), mounts (the bound shared file systems) and services
# stay: the tests break them.
SANDBOX_HEALTH_INTERVAL_SECONDS = 10
SANDBOX_HEALTH_UNCHECKABLE = ("cpus", "memory", "gpu_model", "gpu_faults", "dcgm", "infiniband")


# PriorityCalcPeriod of the sandbox, in minutes: the least Slurm takes. An account the accounts
# play adds (or a user the directory tests re-enable) has a fair-share factor of 0 until the next
# recalculation; the sandbox's tests of job priority wait for it, a minute at most instead of
# the description's period (HAL: 5).
SANDBOX_PRIORITY_CALC_PERIOD_MINUTES = 1


def _sandbox_priority(data: dict) -> None:
    priority = data.get("slurm", {}).get("priority")
    if priority is not None:
        priority["calc_period_minutes"] = min(
            priority.get("calc_period_minutes", 5), SANDBOX_PRIORITY_CALC_PERIOD_MINUTES
        )


def _sandbox_health(health: dict) -> dict:
    checks = health.get("checks")
    if checks is None:
        from ..model.health import CHECKS as checks
    return dict(
        health,
        interval_s=min(health.get("interval_s", 300), SANDBOX_HEALTH_INTERVAL_SECONDS),
        checks=[c for c in checks if c not in SANDBOX_HEALTH_UNCHECKABLE],
    )


def _ip(n: int) -> str:
    from ipaddress import IPv4Address

    return str(IPv4Address(n))


def _contiguous(hosts, kept) -> bool:
    names = list(hosts)
    idx = [names.index(h) for h in kept]
    return idx == list(range(idx[0], idx[0] + len(idx)))


def _group_of(cluster: Cluster, host: str):
    g = cluster.group_of(host)
    if g is None:
        raise SandboxError(f"service host {host} is in no node group")
    return g
