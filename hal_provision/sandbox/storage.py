"""The storage section of a sandbox: what of it can exist on a few podman containers."""

from __future__ import annotations

from ClusterShell.NodeSet import NodeSet

from ..hostlist import nodeset
from ..model import Cluster, Storage
from ..model.storage import Nfs, NfsServer


def narrow_storage(storage: Storage, keep: NodeSet, rehome: dict[str, str] | None = None) -> Storage:
    """`storage` reduced to the hosts in `keep` (a new model; `storage` does not change).

    Spectrum Scale cannot run in containers, so the GPFS section goes (the arrays stay: they
    name no model node). NFS keeps the servers, exports and mounts whose hosts survive, with
    client lists narrowed; networks are dropped from exports, since the sandbox keeps only
    its own primary network.

    `rehome` (export name -> a host of `keep`) keeps those exports even where their server is
    not kept: the host named serves them in the model, declared with the old server's
    volumes. The sandbox serves no NFS at all (every shared file system is a host directory
    bound into the containers that mount it, see shared_mounts), so the server only keeps the
    narrowed model whole; derive.py uses it for the backup destination.
    """
    nfs = storage.nfs
    if rehome:
        nfs = _rehomed(nfs, rehome)

    def kept(expr: str | None) -> str | None:
        hosts = nodeset(expr).intersection(keep) if expr else NodeSet()
        return str(hosts) if len(hosts) else None

    servers = [s for s in nfs.servers if kept(s.host)]
    names = {s.host for s in servers}
    exports = []
    for e in nfs.exports:
        clients = kept(e.clients)
        if e.server in names and clients:
            exports.append(e.model_copy(update={"clients": clients, "networks": []}))
    allowed = {e.name: nodeset(e.clients) for e in exports}
    mounts = []
    for m in nfs.mounts:
        clients = kept(m.clients)
        if m.export in allowed and clients:
            narrowed = nodeset(clients).intersection(allowed[m.export])
            if len(narrowed):
                mounts.append(m.model_copy(update={"clients": str(narrowed)}))
    narrowed_nfs = nfs.model_copy(update={"servers": servers, "exports": exports, "mounts": mounts})
    return storage.model_copy(update={"gpfs": None, "nfs": narrowed_nfs})


def shared_mounts(cluster: Cluster, keep: NodeSet) -> dict[tuple[str, str], NodeSet]:
    """(shared file system name, mount point) -> the hosts of `keep` that mount it there.

    From the full description (before `narrow_storage`), its shared mounts
    (Cluster.shared_mounts). The sandbox backs each with one host directory bound into those
    containers, so the mount points are the model's; only the backing differs.
    """
    out: dict[tuple[str, str], NodeSet] = {}
    for mount in cluster.shared_mounts:
        hosts = mount.hosts.intersection(keep)
        if len(hosts):
            out.setdefault((mount.name, mount.mount_point), NodeSet()).update(hosts)
    return out


def _rehomed(nfs: Nfs, rehome: dict[str, str]) -> Nfs:
    """`nfs` with each export of `rehome` served by its host instead (declared as a server with
    the old server's volumes where it is none yet)."""
    servers = {s.host: s for s in nfs.servers}
    exports = []
    for e in nfs.exports:
        host = rehome.get(e.name)
        if host is None or host == e.server:
            exports.append(e)
            continue
        old = servers.get(e.server)
        volumes = list(old.volumes) if old is not None else [e.path]
        if host in servers:
            here = servers[host]
            servers[host] = here.model_copy(update={"volumes": list(dict.fromkeys([*here.volumes, *volumes]))})
        else:
            servers[host] = NfsServer(
                host=host, volumes=volumes, description=f"sandbox: serves {e.name} for {e.server}"
            )
        exports.append(e.model_copy(update={"server": host}))
    return nfs.model_copy(update={"servers": list(servers.values()), "exports": exports})
