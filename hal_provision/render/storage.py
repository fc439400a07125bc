"""Storage artifacts: Spectrum Scale creation files and tuning, NFS exports and client mounts.

    files/gpfs/nodes.list              node file for mmcrcluster -N
    files/gpfs/classes/<class>.list    node file per node class, for mmcrnodeclass -N
    files/gpfs/<fs>.nsd                NSD stanzas for mmcrnsd -F and mmcrfs -F
    files/gpfs/<fs>.mmcrfs             the file system's creation command
    files/gpfs/tuning.json             desired mmchconfig values per scope (read by the gpfs role)
    files/gpfs/tuning-plan.txt         the same per node class, with memory use and the commands
    files/nfs/<server>/exports         /etc/exports of each NFS server
    files/nfs/<server>/nfs.conf        /etc/nfs.conf.d/hal-provision.conf (nfsd threads)
    files/nfs/mounts/<unit>.mount      systemd mount unit per client mount
    files/nfs/nfs.json                 export paths per server; which group installs which unit
    inventory/storage.yml              groups gpfs_admin, nfs_servers, nfs_mount_<unit>

Creation files are for the administrator's one-time mmcrcluster/mmcrnsd/mmcrfs: the gpfs role
copies them to the admin node and never runs them (they destroy data when misused).
"""

from __future__ import annotations

import json

from ..hostlist import ansible_name, expand, nodeset
from ..model import Cluster, Gpfs
from ..model.storage import GpfsFilesystem, NfsMount
from ..model import gpfs_tuning as desired
from ..model import gpfs_plan as tuning
from ..model.naming import mount_unit_name, nsd_records
from .common import header, json_comment

GPFS_DIR = "files/gpfs"
NFS_DIR = "files/nfs"
INVENTORY = "inventory/storage.yml"
MANIFEST = f"{NFS_DIR}/nfs.json"
NFS_CONF_DEST = "/etc/nfs.conf.d/hal-provision.conf"


def render(cluster: Cluster) -> dict[str, str]:
    files: dict[str, str] = {}
    gpfs = cluster.storage.gpfs
    if gpfs is not None:
        files.update(gpfs_files(cluster, gpfs))
    files.update(nfs_files(cluster))
    groups = inventory(cluster)
    if groups is not None:
        files[INVENTORY] = groups
    return files


# ---- Spectrum Scale -------------------------------------------------------------------------
class _Members:
    """Per node class: each host's daemon node name and admin node name, in hostlist order.

    Model nodes take the daemon network's suffix (hal01-ib) and keep their primary name for
    administration; appliance servers have one name. Built once per class and shared by the
    node file and the class file: at 100,000 nodes each list costs a noticeable share."""

    def __init__(self, cluster: Cluster, gpfs: Gpfs):
        self.suffix = ""
        if gpfs.daemon_network is not None and gpfs.daemon_network != cluster.cluster.primary_network:
            self.suffix = cluster.networks[gpfs.daemon_network].host_suffix or f"-{gpfs.daemon_network}"
        self.appliances = cluster.storage.appliance_servers
        self.by_class = {nc.name: self._names(nc.hosts) for nc in gpfs.node_classes}

    def _names(self, expr: str) -> tuple[list[str], list[str]]:
        admin = expand(expr)
        if not self.suffix:
            return admin, admin
        if any(name in nodeset(expr) for name in self.appliances):
            return [h if h in self.appliances else h + self.suffix for h in admin], admin
        return [h + self.suffix for h in admin], admin


def node_file(cluster: Cluster, gpfs: Gpfs, members: _Members) -> str:
    special = {
        h: "-".join(r for r, hosts in (("quorum", gpfs.quorum), ("manager", gpfs.managers)) if h in set(expand(hosts)))
        for h in set(expand(gpfs.quorum)) | set(expand(gpfs.managers))
    }
    out = [
        header(cluster),
        f"# Node file of GPFS cluster {gpfs.cluster_name}, one NodeName:Designation:AdminNodeName per line:\n",
        f"#   mmcrcluster -N nodes.list -C {gpfs.cluster_name} -r /usr/bin/ssh -R /usr/bin/scp\n",
    ]
    for nc in gpfs.node_classes:
        out.append(f"\n# node class {nc.name}: {nc.hosts}\n")
        names, admins = members.by_class[nc.name]
        out.extend(
            f"{name}:{special.get(admin, 'client')}:{admin}\n"
            if name != admin
            else f"{name}:{special.get(admin, 'client')}\n"
            for name, admin in zip(names, admins)
        )
    return "".join(out)


def class_file(cluster: Cluster, name: str, members: _Members) -> str:
    names, _admins = members.by_class[name]
    return "".join(
        [
            header(cluster),
            f"# Members of node class {name}:  mmcrnodeclass {name} -N {name}.list\n",
            "\n".join(names),
            "\n",
        ]
    )


def nsd_stanzas(cluster: Cluster, fs: GpfsFilesystem) -> str:
    out = [
        header(cluster),
        f"# NSDs of file system {fs.name}:  mmcrnsd -F {fs.name}.nsd, then {fs.name}.mmcrfs\n",
    ]
    for run in fs.nsds:
        for name, device, servers in nsd_records(run):
            out.append(
                f"\n%nsd:\n  nsd={name}\n  device={device}\n  servers={','.join(servers)}\n"
                f"  usage={run.usage}\n  failureGroup={run.failure_group}\n  pool={run.pool}\n"
            )
    return "".join(out)


def mmcrfs_command(fs: GpfsFilesystem) -> list[str]:
    argv = ["mmcrfs", fs.name, "-F", f"{fs.name}.nsd", "-B", fs.block_size]
    if fs.metadata_block_size:
        argv += ["--metadata-block-size", fs.metadata_block_size]
    if fs.log_size:
        argv += ["-L", fs.log_size]
    argv += ["-T", fs.mount_point, "-A", "yes" if fs.automount else "no"]
    argv += ["-m", str(fs.metadata_replicas), "-M", str(fs.max_metadata_replicas)]
    argv += ["-r", str(fs.data_replicas), "-R", str(fs.max_data_replicas)]
    argv += ["-Q", "yes" if fs.quotas else "no"]
    if fs.inode_limit:
        argv += [
            "--inode-limit",
            f"{fs.inode_limit}" + (f":{fs.inodes_preallocated}" if fs.inodes_preallocated else ""),
        ]
    return argv


def mmcrfs_file(cluster: Cluster, fs: GpfsFilesystem) -> str:
    argv = mmcrfs_command(fs)
    # One option per line: the parameters are what a reviewer reads.
    pairs = [argv[:2]] + [argv[i : i + 2] for i in range(2, len(argv), 2)]
    body = " \\\n    ".join(" ".join(p) for p in pairs)
    return (
        header(cluster)
        + f"# Creates file system {fs.name} on the NSDs of {fs.name}.nsd (run mmcrnsd -F {fs.name}.nsd first).\n"
        + "# Run once, by hand, on the admin node: mmcrfs formats the disks.\n"
        + body
        + "\n"
    )


def tuning_json(cluster: Cluster, gpfs: Gpfs) -> str:
    doc = {
        "_comment": json_comment(cluster),
        "cluster_name": gpfs.cluster_name,
        "scopes": desired.desired_state(gpfs),
    }
    # Not sort_keys: scopes stay in model order (cluster-wide first), the order of the commands.
    return json.dumps(doc, indent=2) + "\n"


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def tuning_plan(cluster: Cluster, gpfs: Gpfs) -> str:
    out = [
        header(cluster),
        f"# Tuning plan of GPFS cluster {gpfs.cluster_name}: the value of every managed attribute per\n"
        "# node class and where it comes from (class, cluster-wide, GPFS default); the cache memory it\n"
        "# takes next to the smallest member; the commands that set it on a new cluster. The gpfs role\n"
        "# applies only what `mmlsconfig -Y` shows to differ.\n",
    ]
    for nc in gpfs.node_classes:
        values = desired.effective(gpfs, nc)
        managed = sorted(
            set(desired.tuning_values(gpfs.tuning))
            | set(desired.tuning_values(nc.tuning))
            | {"pagepool", "maxFilesToCache", "maxStatCache"}
        )
        out.append(f"\n[{nc.name}] {nc.hosts} ({len(nodeset(nc.hosts))} nodes)\n")
        width = max(len(a) for a in managed)
        for attribute in managed:
            value, source = values[attribute]
            note = "" if attribute in desired.IMMEDIATE else "  (restart)"
            out.append(f"  {attribute:<{width}}  {value:<10} {source}{note}\n")
        mem = desired.cache_memory({k: v for k, (v, _s) in values.items()})
        members = desired.member_memory(cluster, nodeset(nc.hosts))
        fit = ""
        if members:
            gib, what, hosts = min(members, key=lambda m: m[0])
            who = str(hosts) if len(hosts) <= 32 else f"{len(hosts)} hosts"  # no 100,000-host hostlists
            fit = f" of {gib} GiB ({what} {who})"
        out.append(
            f"  cache memory: pagepool {_gib(mem.pagepool)} + files {_gib(mem.files)} + stat {_gib(mem.stats)}"
            f" = {_gib(mem.total)}{fit}\n"
        )
    fresh = tuning.plan(desired.desired_state(gpfs), [])
    out.append("\n# On a new cluster (nothing set yet):\n")
    out.extend(" ".join(argv) + "\n" for argv in fresh.commands())
    restart = fresh.restart()
    if restart:
        out.append(
            f"# then restart GPFS on: {', '.join('all nodes' if s == desired.CLUSTER else s for s in restart)}\n"
        )
    return "".join(out)


def gpfs_files(cluster: Cluster, gpfs: Gpfs) -> dict[str, str]:
    members = _Members(cluster, gpfs)
    files = {
        f"{GPFS_DIR}/nodes.list": node_file(cluster, gpfs, members),
        f"{GPFS_DIR}/tuning.json": tuning_json(cluster, gpfs),
        f"{GPFS_DIR}/tuning-plan.txt": tuning_plan(cluster, gpfs),
    }
    for nc in gpfs.node_classes:
        files[f"{GPFS_DIR}/classes/{nc.name}.list"] = class_file(cluster, nc.name, members)
    for fs in gpfs.filesystems:
        files[f"{GPFS_DIR}/{fs.name}.nsd"] = nsd_stanzas(cluster, fs)
        files[f"{GPFS_DIR}/{fs.name}.mmcrfs"] = mmcrfs_file(cluster, fs)
    return files


# ---- NFS ------------------------------------------------------------------------------------
def exports_file(cluster: Cluster, server: str) -> str:
    out = [header(cluster)]
    for e in cluster.storage.nfs.exports:
        if e.server != server:
            continue
        options = ",".join(e.options)
        hosts = expand(e.clients) if e.clients else []
        # One join for the hosts, not one format per host: an export may name 100,000 clients.
        clients = [f"({options}) \\\n    ".join(hosts) + f"({options})"] if hosts else []
        clients += [f"{cluster.networks[net].cidr}({options})" for net in e.networks if net in cluster.networks]
        out.append(f"\n# export {e.name}\n{e.path} \\\n    " + " \\\n    ".join(clients) + "\n")
    return "".join(out)


def nfs_conf(cluster: Cluster, threads: int) -> str:
    return header(cluster) + f"# Installed as {NFS_CONF_DEST}.\n[nfsd]\nthreads={threads}\n"


def mount_group(mount: NfsMount) -> str:
    return "nfs_mount_" + ansible_name(mount_unit_name(mount.mount_point).removesuffix(".mount"))


def mount_unit(cluster: Cluster, mount: NfsMount) -> str:
    export = next(e for e in cluster.storage.nfs.exports if e.name == mount.export)
    options = ",".join([*mount.options, "_netdev"])
    return (
        header(cluster)
        + "[Unit]\n"
        + f"Description=NFS export {export.name} ({export.server}:{export.path}) on {mount.mount_point}\n"
        + "Wants=network-online.target\n"
        + "After=network-online.target\n"
        + "\n[Mount]\n"
        + f"What={export.server}:{export.path}\n"
        + f"Where={mount.mount_point}\n"
        + "Type=nfs\n"
        + f"Options={options}\n"
        + "\n[Install]\n"
        + "WantedBy=remote-fs.target\n"
    )


def nfs_files(cluster: Cluster) -> dict[str, str]:
    nfs = cluster.storage.nfs
    exports = {e.name for e in nfs.exports}
    files: dict[str, str] = {}
    servers = {}
    for server in nfs.servers:
        files[f"{NFS_DIR}/{server.host}/exports"] = exports_file(cluster, server.host)
        files[f"{NFS_DIR}/{server.host}/nfs.conf"] = nfs_conf(cluster, server.threads)
        servers[server.host] = {"paths": [e.path for e in nfs.exports if e.server == server.host]}
    mounts = []
    for mount in nfs.mounts:
        if mount.export not in exports:
            continue
        unit = mount_unit_name(mount.mount_point)
        files[f"{NFS_DIR}/mounts/{unit}"] = mount_unit(cluster, mount)
        mounts.append({"unit": unit, "group": mount_group(mount), "mount_point": mount.mount_point})
    if servers or mounts:
        doc = {"_comment": json_comment(cluster), "servers": servers, "mounts": mounts}
        files[MANIFEST] = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    return files


# ---- inventory ------------------------------------------------------------------------------
def inventory(cluster: Cluster) -> str | None:
    """Groups the storage plays target (None: there are none, and no file is written).

    Appliance servers are not Ansible hosts: only model nodes appear. Loaded beside hosts.yml
    (Ansible reads every file of an inventory directory); it sets no host variables, so the
    order in which Ansible reads it does not matter."""
    groups: list[tuple[str, list[str]]] = []
    gpfs = cluster.storage.gpfs
    if gpfs is not None:
        groups.append(("gpfs_admin", expand(gpfs.admin_host)))
    nfs = cluster.storage.nfs
    if nfs.servers:
        groups.append(("nfs_servers", [s.host for s in nfs.servers]))
    for mount in nfs.mounts:
        groups.append((mount_group(mount), expand(mount.clients)))
    if not groups:
        return None
    lines = [header(cluster), "all:\n  children:\n"]
    for name, hosts in groups:
        lines.append(f"    {name}:\n      hosts:\n")
        if hosts:
            lines.append("        " + ":\n        ".join(hosts) + ":\n")
    clients = [name for name, _hosts in groups if name.startswith("nfs_mount_")]
    if clients:
        lines.append("    nfs_clients:\n      children:\n")
        lines.extend(f"        {name}:\n" for name in clients)
    return "".join(lines)
