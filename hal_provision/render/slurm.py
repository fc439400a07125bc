"""Slurm configuration: slurm.conf, gres.conf, cgroup.conf, topology.conf, slurmdbd.conf, and
for configless compute nodes slurmd's options and a drop-in for its unit."""

from __future__ import annotations

from collections import defaultdict
from typing import get_args

import yaml

from ..hostlist import NodeSet, fold, fold_hostlists, nodeset, overlaps, union
from ..model import Cluster, GpuSharing, HardwareProfile, Role
from ..model.configless import SLURMD_RETRIES_FETCH_FROM, served_to_slurmd
from ..model.monitoring import SLURMCTLD_METRICS_FROM
from ..model.slurm import WeightedTres, version_key
from ..model.slurm_versions import name_for
from .common import header, yes_no
from .health import slurm_conf_lines as health_lines

ETC = "files/etc/slurm"
# Configless compute nodes: slurmd's options (Debian's unit reads $SLURMD_OPTIONS from
# /etc/default/slurmd; the role puts the file where the OS's unit reads it) and a drop-in.
SLURMD_OPTIONS = "files/etc/default/slurmd"
SLURMD_DROPIN = "files/etc/systemd/system/slurmd.service.d/hal-configless.conf"

# Debian's Slurm packaging: paths and the slurm user it creates (StateSaveLocation is the
# model's, slurm.state_save_location).
SPOOL_DIR = "/var/lib/slurm/slurmd"
LOG_DIR = "/var/log/slurm"
# hal_provision/node/mps.py on every slurmd host where some node shares GPUs through MPS: its
# Prolog, Epilog and TaskProlog (slurm.conf names them for all nodes; the slurm role installs it).
MPS_PROGRAM = "/usr/local/sbin/hal-mps"


def render(cluster: Cluster) -> dict[str, str]:
    return {
        f"{ETC}/slurm.conf": slurm_conf(cluster),
        f"{ETC}/gres.conf": gres_conf(cluster),
        f"{ETC}/cgroup.conf": cgroup_conf(cluster),
        f"{ETC}/topology.conf": topology_conf(cluster),
        f"{ETC}/slurmdbd.conf": slurmdbd_conf(cluster),
        **job_namespace_files(cluster),
        **configless_files(cluster),
    }


def slurmd_files(cluster: Cluster) -> list[str]:
    """The rendered files of slurm.conf's directory that slurmd reads (slurmdbd.conf is not)."""
    return [
        "slurm.conf",
        "cgroup.conf",
        "gres.conf",
        "topology.conf",
        *(path.rsplit("/", 1)[1] for path in job_namespace_files(cluster)),
    ]


def withheld_files(cluster: Cluster) -> list[str]:
    """With slurm.configless, the rendered files configless nodes do not get because slurmctld
    serves them (all of slurmd_files in every major the model knows); empty without it."""
    if not cluster.slurm.configless:
        return []
    served = served_to_slurmd(cluster.slurm.version)
    return [name for name in slurmd_files(cluster) if name in served]


def conf_server(cluster: Cluster) -> str:
    """slurmd's --conf-server: every SlurmctldHost with SlurmctldPort, the primary first."""
    return ",".join(f"{host}:{cluster.slurm.controller_port}" for host in cluster.controllers)


def configless_files(cluster: Cluster) -> dict[str, str]:
    """With slurm.configless, slurmd's options and its unit's drop-in, for the configless nodes
    (Cluster.configless_hosts; the inventory's slurm_configless group)."""
    if not cluster.slurm.configless:
        return {}
    retry = (
        ""
        if cluster.slurm.at_least(SLURMD_RETRIES_FETCH_FROM)
        else (
            "\n[Service]\n"
            f"# Slurm {cluster.slurm.version}'s slurmd exits when no controller answers at its start (it asks\n"
            f"# again by itself from {SLURMD_RETRIES_FETCH_FROM}): systemd starts it again.\n"
            "Restart=on-failure\n"
            "RestartSec=10\n"
        )
    )
    return {
        SLURMD_OPTIONS: header(cluster)
        + "# Configless: slurmd fetches slurm.conf and the files it names from slurmctld, asking\n"
        "# the controllers in this order (the primary first).\n"
        f'SLURMD_OPTIONS="--conf-server {conf_server(cluster)}"\n',
        SLURMD_DROPIN: header(cluster) + "[Unit]\n"
        "# Debian's unit starts slurmd only where /etc/slurm/slurm.conf exists; a configless node has\n"
        "# none. The empty assignment drops that condition.\n"
        "ConditionPathExists=\n" + retry,
    }


def job_namespace_files(cluster: Cluster) -> dict[str, str]:
    """The job namespace file where some group has a job_tmp_base: job_container.conf before
    Slurm 25.11, namespace.yaml from it."""
    if not job_tmp_groups(cluster):
        return {}
    if cluster.slurm.namespace_yaml:
        return {f"{ETC}/namespace.yaml": namespace_yaml(cluster)}
    return {f"{ETC}/job_container.conf": job_container_conf(cluster)}


def job_tmp_groups(cluster: Cluster) -> list:
    """Slurm node groups whose jobs get a private /tmp (job_tmp_base), in model order."""
    return [g for g in cluster.groups_with_role(Role.compute) if g.job_tmp_base]


def scratch_mount(cluster: Cluster) -> str | None:
    """slurm.conf TmpFS: the local scratch mount point of the Slurm nodes' profiles (one path for
    the whole cluster; a check reports profiles that differ), None without scratch."""
    points = [
        p.scratch.mount_point
        for g in cluster.groups_with_role(Role.compute)
        if (p := cluster.profile_of(g)) is not None and p.scratch is not None
    ]
    return points[0] if points else None


def _tmp_bases(cluster: Cluster) -> dict[str, list[str]]:
    """job_tmp_base -> the hostlists of the groups under it, in model order."""
    by_base: dict[str, list[str]] = defaultdict(list)
    for g in job_tmp_groups(cluster):
        by_base[g.job_tmp_base].append(g.hosts)
    return by_base


def namespace_yaml(cluster: Cluster) -> str:
    """namespace/linux (Slurm 25.11 on): the same bases as job_container_conf, as namespace.yaml's
    node_confs (the default dirs, /tmp and /dev/shm; no extra PID or user namespace)."""
    node_confs = [
        {"nodes": [fold_hostlists(hosts)], "options": {"auto_base_path": True, "base_path": base}}
        for base, hosts in _tmp_bases(cluster).items()
    ]
    return (
        header(cluster) + "# Each job's private /tmp and /dev/shm (NamespaceType=namespace/linux in slurm.conf),\n"
        "# made under base_path when the job starts and removed when it ends.\n"
        + yaml.safe_dump({"node_confs": node_confs}, sort_keys=False, explicit_start=True)
    )


def job_container_conf(cluster: Cluster) -> str:
    """job_container/tmpfs (Slurm before 25.11): per node group, the base under which each job gets
    a private /tmp and /dev/shm, made on demand (AutoBasePath) and removed with the job."""
    out = [
        header(cluster),
        "# Each job's private /tmp and /dev/shm (JobContainerType=job_container/tmpfs in slurm.conf),\n"
        "# made under BasePath when the job starts and removed when it ends.\n",
    ]
    for base, hosts in _tmp_bases(cluster).items():
        out.append(f"NodeName={fold_hostlists(hosts)} AutoBasePath=true BasePath={base}\n")
    return "".join(out)


def hardware_groups(
    cluster: Cluster,
) -> list[tuple[str, HardwareProfile, tuple[str, ...], GpuSharing | None, list[str]]]:
    """Slurm nodes grouped by identical hardware, features and GPU sharing, in model order.

    Returns (profile name, profile, features, GPU sharing, the groups' hostlists) for each
    distinct combination; hostlist.fold_hostlists writes the hostlists as one. Composed hosts (a
    pool's) group by the GPUs the active layout gives them: 6+2 makes two lines, 4+4 one.
    """
    groups: dict[tuple, tuple[HardwareProfile, GpuSharing | None, list[str]]] = {}
    for group in cluster.groups_with_role(Role.compute):
        profile = cluster.hardware[group.hardware]
        for build in cluster.node_builds(group):
            features = tuple(dict.fromkeys([*profile.features, *group.features, *build.features]))
            gpus = build.profile.gpus.model_dump_json() if build.profile.gpus else ""
            sharing = group.gpu_sharing.model_dump_json() if group.gpu_sharing else ""
            key = (group.hardware, features, gpus, sharing)
            groups.setdefault(key, (build.profile, group.gpu_sharing, []))[2].append(build.hosts)
    return [(name, p, feats, sharing, hosts) for (name, feats, _g, _s), (p, sharing, hosts) in groups.items()]


def node_gres(profile: HardwareProfile, sharing: GpuSharing | None) -> list[str]:
    """slurm.conf's Gres entries of a node: its GPUs, with shards or mps, or as MIG instances, where shared."""
    if not profile.gpus:
        return []
    if sharing is None:
        return [f"gpu:{profile.gpus.type}:{profile.gpu_count}"]
    return sharing.gres(profile.gpus.type, profile.gpu_count)


def _offered(cluster: Cluster, kind: str) -> bool:
    """Whether some compute node with GPUs shares them as `kind` (GpuSharing.shares)."""
    return any(
        s is not None and s.shares and s.shares[0] == kind and p.gpus for _n, p, _f, s, _h in hardware_groups(cluster)
    )


def shard_nodes(cluster: Cluster) -> bool:
    """Whether some compute node offers shards (GresTypes and AccountingStorageTRES name them)."""
    return _offered(cluster, "shard")


def mps_nodes(cluster: Cluster) -> bool:
    """Whether some compute node offers mps (GresTypes, AccountingStorageTRES and hal-mps as the
    Prolog, Epilog and TaskProlog of every node)."""
    return _offered(cluster, "mps")


def gres_types(cluster: Cluster) -> list[str]:
    """slurm.conf's GresTypes: gpu, then the shared GPU GRES some node offers."""
    return ["gpu", *(["shard"] if shard_nodes(cluster) else []), *(["mps"] if mps_nodes(cluster) else [])]


def mps_lines(cluster: Cluster) -> str:
    """Prolog, Epilog and TaskProlog running hal-mps, where some node offers mps."""
    if not mps_nodes(cluster):
        return ""
    return (
        "\n# CUDA MPS (gpu_sharing.mps_per_gpu): Slurm does not start it. hal-mps starts the MPS control\n"
        "# daemon of a job's mps GPU (Prolog), points its tasks at it (TaskProlog) and stops it after\n"
        "# the GPU's last such job (Epilog). slurm.conf is every node's: hal-mps does nothing for a job\n"
        "# without mps, and the slurm role installs it on every compute node.\n"
        f"Prolog={MPS_PROGRAM}\n"
        f"Epilog={MPS_PROGRAM}\n"
        f"TaskProlog={MPS_PROGRAM}\n"
    )


def _first_host(expr: str) -> str:
    return nodeset(expr)[0]


REBOOT_PROGRAM = "/usr/sbin/reboot"  # systemd-sysv's, on every image


def reboot_lines(cluster: Cluster) -> str:
    """Where nodes boot an image from the network: the program slurmd reboots them with (for
    `scontrol reboot ASAP`, which `hal-provision reimage` uses so no job is killed) and how long
    a rebooting node has to come back before slurmctld marks it DOWN."""
    if not cluster.booted_groups:
        return ""
    return (
        "\n# Network-booted nodes: `hal-provision reimage` reboots them through Slurm (scontrol reboot ASAP,\n"
        "# after their jobs); each has ResumeTimeout to boot its image, be enrolled and converge.\n"
        f"RebootProgram={REBOOT_PROGRAM}\n"
        f"ResumeTimeout={cluster.provisioning.reboot_timeout_s}\n"
    )


def metrics_lines(cluster: Cluster) -> str:
    """Where Prometheus scrapes slurmctld itself (Slurm 25.11 and later, no PrivateData): its
    OpenMetrics endpoints on SlurmctldPort. A MetricsType of the site's own (slurm.extra) wins."""
    m = cluster.monitoring
    if (
        m is None
        or m.backend != "prometheus"
        or "PrivateData" in cluster.slurm.extra
        or "MetricsType" in cluster.slurm.extra
        or version_key(cluster.slurm.version) < version_key(SLURMCTLD_METRICS_FROM)
    ):
        return ""
    return "\n# Prometheus scrapes slurmctld's own metrics (/metrics/... on SlurmctldPort).\nMetricsType=metrics/openmetrics\n"


def slurm_conf(cluster: Cluster) -> str:
    s = cluster.slurm
    svc = cluster.services
    out = [header(cluster)]
    out.append(f"ClusterName={cluster.cluster.name}\n")
    if len(cluster.controllers) > 1:
        out.append("# The primary controller first, then its backup; both share StateSaveLocation.\n")
    for host in cluster.controllers:
        out.append(f"SlurmctldHost={host}\n")
    out.append(
        "SlurmUser=slurm\n"
        "AuthType=auth/munge\n"
        # CredType is the 22.05 name (man slurm.conf); CryptoType is an undocumented alias.
        "CredType=cred/munge\n"
        f"SlurmctldPort={s.controller_port}\n"
        f"SlurmdPort={s.slurmd_port}\n"
        f"StateSaveLocation={s.state_save_location}\n"
        f"SlurmdSpoolDir={SPOOL_DIR}\n"
        "SlurmctldPidFile=/run/slurmctld.pid\n"
        "SlurmdPidFile=/run/slurmd.pid\n"
        f"SlurmctldLogFile={LOG_DIR}/slurmctld.log\n"
        f"SlurmdLogFile={LOG_DIR}/slurmd.log\n"
        "ReturnToService=2\n"
        f"SlurmctldTimeout={s.slurmctld_timeout_s}\n"
        f"SlurmdTimeout={s.slurmd_timeout_s}\n"
        "MpiDefault=none\n"
        + slurmctld_parameters_lines(cluster)
        + "\n# Scheduling: GPUs, cores and memory are consumable resources.\n"
        "SchedulerType=sched/backfill\n"
        "SelectType=select/cons_tres\n"
        "SelectTypeParameters=CR_Core_Memory\n"
        f"GresTypes={','.join(gres_types(cluster))}\n"
        f"DefMemPerCPU={cluster.def_mem_per_cpu_mib}\n"
        "\n# Jobs live in cgroups; PrologFlags=Contain lets pam_slurm_adopt adopt ssh sessions.\n"
        "ProctrackType=proctrack/cgroup\n"
        "TaskPlugin=task/cgroup,task/affinity\n"
        "JobAcctGatherType=jobacct_gather/cgroup\n"
        "PrologFlags=Contain\n"
        + mps_lines(cluster)
        + (
            (
                "\n# Each job's private /tmp and /dev/shm on the node's local scratch (namespace.yaml).\n"
                "NamespaceType=namespace/linux\n"
                if cluster.slurm.namespace_yaml
                else "\n# Each job's private /tmp and /dev/shm on the node's local scratch (job_container.conf).\n"
                "JobContainerType=job_container/tmpfs\n"
            )
            if job_tmp_groups(cluster)
            else ""
        )
        + (
            f"# The local scratch slurmd measures for TmpDisk.\nTmpFS={scratch_mount(cluster)}\n"
            if scratch_mount(cluster)
            else ""
        )
        + (
            "\n# Network-aware placement from the InfiniBand fabric (topology.conf).\nTopologyPlugin=topology/tree\n"
            if cluster.fabric is not None
            # The flat topology's name is the version's (topology/none, default or flat).
            else "\n# No fabric described: no network-aware placement (topology.conf is not read).\n"
            f"TopologyPlugin={name_for(s.version, 'TopologyPlugin', 'topology/none')}\n"
        )
        + priority_lines(cluster)
        + "\n# Accounting through slurmdbd.\n"
        "AccountingStorageType=accounting_storage/slurmdbd\n"
        f"AccountingStorageHost={_first_host(svc.slurmdbd)}\n"
        f"AccountingStoragePort={s.dbd_port}\n"
        f"AccountingStorageTRES={','.join(f'gres/{name}' for name in gres_types(cluster))}\n"
        + (
            "# Only users with an association run jobs, and their QOS limits bite.\n"
            f"AccountingStorageEnforce={','.join(s.accounting_enforce)}\n"
            if s.accounting_enforce
            else ""
        )
        + health_lines(cluster)
        + reboot_lines(cluster)
        + metrics_lines(cluster)
        + extra_lines(cluster)
    )
    out.append(
        "\n# Nodes: one line per identical hardware group. RealMemory is installed memory minus\n"
        f"# slurm.memory_reserve_mib ({s.memory_reserve_mib} MiB) kept for the OS and daemons.\n"
    )
    hw = hardware_groups(cluster)
    for name, p, feats, sharing, hosts in hw:
        gres = f" Gres={','.join(node_gres(p, sharing))}" if p.gpus else ""
        feat = f" Features={','.join(feats)}" if feats else ""
        tmp = f" TmpDisk={p.tmp_disk_mib()}" if p.scratch is not None else ""
        out.append(
            f"NodeName={fold_hostlists(hosts)} CPUs={p.cpus} Boards=1 SocketsPerBoard={p.sockets} "
            f"CoresPerSocket={p.cores_per_socket} ThreadsPerCore={p.threads_per_core} "
            f"RealMemory={cluster.real_memory_mib(p)}{tmp}{gres}{feat} State=UNKNOWN\n"
        )
    out.append("\n# Node sets: one per hardware profile.\n")
    by_profile: dict[str, list[str]] = defaultdict(list)
    for name, _p, _f, _s, hosts in hw:
        by_profile[name].extend(hosts)
    for name, hosts in by_profile.items():
        out.append(f"NodeSet={name} Nodes={fold_hostlists(hosts)}\n")
    out.append("\n# Partitions.\n")
    for part in s.partitions:
        line = f"PartitionName={part.name} Nodes={fold_hostlists([part.nodes])}"
        if part.default:
            line += " Default=YES"
        line += f" MaxTime={part.max_time}"
        if part.default_time:
            line += f" DefaultTime={part.default_time}"
        if part.def_mem_per_cpu_mib:
            line += f" DefMemPerCPU={part.def_mem_per_cpu_mib}"
        if part.max_nodes:
            line += f" MaxNodes={part.max_nodes}"
        if part.qos:
            line += f" QOS={part.qos}"
        if part.priority_tier is not None:
            line += f" PriorityTier={part.priority_tier}"
        line += f" State={part.state}"
        out.append(line + "\n")
    return "".join(out)


def extra_lines(cluster: Cluster) -> str:
    """slurm.extra: the options the model does not cover, in key order."""
    extra = cluster.slurm.extra
    if not extra:
        return ""
    return "\n# slurm.extra: options the model does not cover.\n" + "".join(
        f"{key}={extra[key]}\n" for key in sorted(extra)
    )


def slurmctld_parameters(cluster: Cluster) -> list[str]:
    """SlurmctldParameters, one entry per option the model sets (slurm.conf has one such line)."""
    return ["enable_configless"] if cluster.slurm.configless else []


def slurmctld_parameters_lines(cluster: Cluster) -> str:
    params = slurmctld_parameters(cluster)
    if not params:
        return ""
    why = (
        "\n# Configless: slurmctld serves this file and the ones it names to slurmd on the compute\n"
        "# nodes (slurmd --conf-server); only a restart of slurmctld changes it.\n"
        if "enable_configless" in params
        else ""
    )
    return why + f"SlurmctldParameters={','.join(params)}\n"


def priority_lines(cluster: Cluster) -> str:
    """PriorityType, named even when it is priority/basic (the default changes between Slurm
    releases), and under priority/multifactor the weights and usage decay it reads."""
    if cluster.priority_type == "basic":
        return (
            "\n# Job priority: first in, first out (no account sets a fair-share, no QOS a priority).\n"
            "PriorityType=priority/basic\n"
        )
    p = cluster.slurm.priority
    tres = ",".join(f"{name}={p.weight_tres[name]}" for name in get_args(WeightedTres) if name in p.weight_tres)
    return (
        "\n# Job priority: a weighted sum of factors. priority/basic (first in, first out) would ignore\n"
        "# the accounts' fair-share and the QOS priorities.\n"
        "PriorityType=priority/multifactor\n"
        f"PriorityWeightAge={p.weight_age}\n"
        f"PriorityWeightFairshare={p.weight_fairshare}\n"
        f"PriorityWeightJobSize={p.weight_job_size}\n"
        f"PriorityWeightPartition={p.weight_partition}\n"
        f"PriorityWeightQOS={p.weight_qos}\n"
        + (f"PriorityWeightTRES={tres}\n" if tres else "")
        + f"PriorityDecayHalfLife={p.decay_half_life}\n"
        f"PriorityMaxAge={p.max_age}\n"
        f"PriorityFavorSmall={'YES' if p.favor_small else 'NO'}\n"
        f"PriorityUsageResetPeriod={p.usage_reset_period}\n"
        f"PriorityCalcPeriod={p.calc_period_minutes}\n"
    )


def gres_conf(cluster: Cluster) -> str:
    out = [
        header(cluster),
        (
            "# slurmd is built with NVML (slurm.nvml), yet GPUs are declared, not detected, except MIG\n"
            "# instances, which only NVML finds (AutoDetect=nvml on their nodes' lines).\n"
            if cluster.slurm.nvml
            else "# Debian's Slurm is built without NVML, so GPUs are declared, not detected.\n"
        )
        + "# Cores= are Slurm's logical core indices of the GPU's socket (not CPU thread ids).\n"
        "AutoDetect=off\n",
    ]
    for _name, p, _feats, sharing, hosts in hardware_groups(cluster):
        if not p.gpus:
            continue
        folded = fold_hostlists(hosts)
        if sharing is not None and sharing.mig_instances:
            # Each instance's files are /dev/nvidia-caps minors of GPU and compute instance ids the
            # driver picks when the instances are made: NVML reads them on the node (checks
            # refuse MIG without slurm.nvml). Gres= in slurm.conf names the profiles.
            out.append(f"NodeName={folded} AutoDetect=nvml\n")
            continue
        matrix = p.gpus.nvlink
        for i, dev in enumerate(p.gpus.devices):
            first = dev.socket * p.cores_per_socket
            cores = f"{first}-{first + p.cores_per_socket - 1}"
            file = dev.file or f"/dev/nvidia{i}"
            line = f"NodeName={folded} Name=gpu Type={p.gpus.type} File={file} Cores={cores}"
            if matrix:
                links = ",".join("-1" if i == j else str(n) for j, n in enumerate(matrix[i]))
                line += f" Links={links}"
            out.append(line + "\n")
        if sharing is not None and sharing.shares is not None:
            # Name and Count only, shards and mps alike: Slurm spreads the count evenly over the
            # node's GPUs above, one record bound to each (File= per GPU is for uneven counts, and
            # then needed on every node that has the GRES).
            kind, per_gpu = sharing.shares
            out.append(f"NodeName={folded} Name={kind} Count={per_gpu * p.gpu_count}\n")
    return "".join(out)


def cgroup_conf(cluster: Cluster) -> str:
    c = cluster.slurm.cgroup
    return (
        header(cluster)
        + "CgroupPlugin=autodetect\n"
        + f"ConstrainCores={yes_no(c.constrain_cores)}\n"
        + f"ConstrainDevices={yes_no(c.constrain_devices)}\n"
        + f"ConstrainRAMSpace={yes_no(c.constrain_ram_space)}\n"
        + f"ConstrainSwapSpace={yes_no(c.constrain_swap_space)}\n"
    )


def topology_conf(cluster: Cluster) -> str:
    out = [header(cluster)]
    fabric = cluster.fabric
    if fabric is None:
        out.append("# No fabric is described: every node is equally close to every other.\n")
        return "".join(out)
    every = fabric.every_switch()
    leaf_nodes = _slurm_nodes_per_switch(cluster)
    children: dict[str, list[str]] = {name: [] for _i, name, _sw in every}
    for _i, name, sw in every:
        for up in sw.uplinks:
            children.setdefault(up, []).append(name)
    # Only switches with Slurm nodes somewhere below them are written, and a parent names only
    # those: slurmctld refuses to start on a child it was not given ("fatal: Switch
    # configuration <parent> has invalid child (<child>)"), e.g. a storage-only leaf.
    written = _switches_above_nodes(leaf_nodes, children)
    slurm_nodes = cluster.slurm_nodes
    other_rails = {
        switch
        for link in fabric.links
        for switch, run in link.runs()
        if switch not in leaf_nodes and overlaps(nodeset(run), slurm_nodes)
    }
    out.append(f"# Fabric {fabric.name}: {fabric.rate_gbps} Gb/s. Only Slurm nodes are listed.\n")
    for _i, name, _sw in every:
        parts = []
        kids = [kid for kid in children[name] if kid in written]
        if name in leaf_nodes:
            parts.append(f"Nodes={leaf_nodes[name]}")
        if kids:
            parts.append(f"Switches={fold(kids)}")
        if parts:
            out.append(f"SwitchName={name} {' '.join(parts)}\n")
        elif name in other_rails:
            out.append(f"# {name}: its Slurm nodes are listed under the switch of their lowest cabled port\n")
        else:
            out.append(f"# {name}: no Slurm nodes below it\n")
    return "".join(out)


def _slurm_nodes_per_switch(cluster: Cluster) -> dict[str, str]:
    """Switch name -> the Slurm nodes cabled to it, folded; switches without any are left out.
    A node cabled on several ports (one adapter per rail, each to its rail's leaf) is listed
    under the switch of its lowest port only: Slurm's topology/tree places a node under one
    leaf ("Multiple leaf switches contain nodes" otherwise), and on a rail-optimised fabric the
    nodes under one rail's leaf share a leaf on every rail.

    A link whose hosts are all Slurm nodes (nearly every one) gives each switch its share by
    arithmetic on the hostlist (hostlist.chunks); only a link that mixes in other hosts, or a
    switch that several links share, goes through NodeSets.
    """
    slurm_nodes = cluster.slurm_nodes
    shares: dict[str, list[str]] = {}  # switch -> folded hostlists of its Slurm nodes
    links = cluster.fabric.links
    first = min((link.port for link in links), default=1)
    placed = None  # with several ports cabled: the nodes a lower port placed already
    if any(link.port != first for link in links):
        links, placed = sorted(links, key=lambda link: link.port), NodeSet()
    for link in links:
        runs = link.runs()
        if placed is not None:  # a node on several rails: under the leaf of its lowest port only
            runs = [(switch, nodeset(run).intersection(slurm_nodes).difference(placed)) for switch, run in runs]
            for _switch, run in runs:
                placed.update(run)
            runs = [(switch, fold(run)) for switch, run in runs]
        elif not nodeset(link.hosts).issubset(slurm_nodes):
            runs = [(switch, fold(nodeset(run).intersection(slurm_nodes))) for switch, run in runs]
        for switch, run in runs:
            if run:
                shares.setdefault(switch, []).append(run)
    return {switch: runs[0] if len(runs) == 1 else fold(union(runs)) for switch, runs in shares.items()}


def _switches_above_nodes(direct: dict[str, str], children: dict[str, list[str]]) -> set[str]:
    """Names of the switches with at least one Slurm node in their subtree (`direct`: the
    switches with Slurm nodes cabled to them; `children`: every switch's child switches).

    Safe on cabling loops (a semantic check reports those): a switch is counted once.
    """
    found: set[str] = set()
    visited: set[str] = set()

    def visit(name: str) -> bool:
        if name in visited:
            return name in found
        visited.add(name)
        below = [visit(child) for child in children.get(name, [])]
        if name in direct or any(below):
            found.add(name)
        return name in found

    for name in children:
        visit(name)
    return found


def slurmdbd_conf(cluster: Cluster) -> str:
    s = cluster.slurm
    dbd_host = _first_host(cluster.services.slurmdbd)
    db_host = _first_host(cluster.services.accounting_db)
    return (
        header(cluster)
        + "AuthType=auth/munge\n"
        + f"DbdHost={dbd_host}\n"
        + f"DbdPort={s.dbd_port}\n"
        + "SlurmUser=slurm\n"
        + f"LogFile={LOG_DIR}/slurmdbd.log\n"
        + "PidFile=/run/slurmdbd.pid\n"
        + "StorageType=accounting_storage/mysql\n"
        + f"StorageHost={'localhost' if db_host == dbd_host else db_host}\n"
        + "StoragePort=3306\n"
        + f"StorageLoc={s.accounting_database}\n"
        + f"StorageUser={s.accounting_user}\n"
        + "# StoragePass is never rendered: the deploy adds it from the secret\n"
        + "# `slurm_dbd_storage_pass` (Ansible Vault or generated on the node).\n"
    )
