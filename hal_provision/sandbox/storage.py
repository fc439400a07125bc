"""The storage section of a sandbox: what of it can exist on a few podman containers."""

from __future__ import annotations

from ClusterShell.NodeSet import NodeSet

from ..hostlist import nodeset


def narrow_storage(storage: dict, keep: NodeSet) -> dict:
    """`storage` (as cluster.yml holds it) reduced to the hosts in `keep`.

    Spectrum Scale cannot run in containers, so the GPFS section goes (the arrays stay: they
    name no model node). NFS keeps the servers, exports and mounts whose hosts survive, with
    client lists narrowed; networks are dropped from exports, since the sandbox keeps only
    its own primary network.
    """
    out = {key: value for key, value in storage.items() if key != "gpfs"}
    nfs = storage.get("nfs")
    if not nfs:
        return out

    def kept(expr: str | None) -> str | None:
        hosts = nodeset(expr).intersection(keep) if expr else NodeSet()
        return str(hosts) if len(hosts) else None

    servers = [s for s in nfs.get("servers", []) if kept(s["host"])]
    names = {s["host"] for s in servers}
    exports = []
    for e in nfs.get("exports", []):
        clients = kept(e.get("clients"))
        if e["server"] in names and clients:
            exports.append({**{k: v for k, v in e.items() if k != "networks"}, "clients": clients})
    allowed = {e["name"]: nodeset(e["clients"]) for e in exports}
    mounts = []
    for m in nfs.get("mounts", []):
        clients = kept(m["clients"])
        if m["export"] in allowed and clients:
            narrowed = nodeset(clients).intersection(allowed[m["export"]])
            if len(narrowed):
                mounts.append({**m, "clients": str(narrowed)})
    out["nfs"] = {**nfs, "servers": servers, "exports": exports, "mounts": mounts}
    return out


def shared_filesystem_names(storage: dict) -> set[str]:
    """Names other sections use for shared file systems: GPFS file systems, NFS exports."""
    names = {fs["name"] for fs in (storage.get("gpfs") or {}).get("filesystems", [])}
    return names | {e["name"] for e in (storage.get("nfs") or {}).get("exports", [])}



def shared_mounts(storage: dict, keep: NodeSet) -> dict[tuple[str, str], NodeSet]:
    """(shared file system name, mount point) -> the hosts of `keep` that mount it there.

    From the full description's storage (before `narrow_storage`): a GPFS file system is
    mounted by every member of the GPFS cluster (its node classes), an NFS export where its
    mounts say. The sandbox backs each with one host directory bound into those containers,
    so the mount points are the model's; only the backing differs.
    """
    out: dict[tuple[str, str], NodeSet] = {}

    def add(name: str, mount_point: str, hosts: NodeSet) -> None:
        hosts = hosts.intersection(keep)
        if len(hosts):
            out.setdefault((name, mount_point), NodeSet()).update(hosts)

    gpfs = storage.get("gpfs") or {}
    members = NodeSet()
    for node_class in gpfs.get("node_classes", []):
        members.update(nodeset(node_class["hosts"]))
    for fs in gpfs.get("filesystems", []):
        add(fs["name"], fs["mount_point"], members)
    for mount in (storage.get("nfs") or {}).get("mounts", []):
        add(mount["export"], mount["mount_point"], nodeset(mount["clients"]))
    return out
