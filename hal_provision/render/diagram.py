"""The cluster's architecture as a Graphviz drawing (DOT source), read top to bottom the way
HAL's paper draws it (PEARC '20, Figure 1): users, the access nodes they log in to, the compute
nodes, the InfiniBand fabric, then storage; management, its services and the networks in a
column on the side.

One box per node group, with its host count and hardware, never one per host; groups of one
role and one hardware profile share a box, so a 100,000-node cluster is still a page. Large
fabrics likewise: past MAX_SWITCHES, switches of one tier, model and port count share a node.
Edges are few: users to the nodes they reach, each box to the switches it is cabled to (with
the number of cables), file systems to the arrays or servers holding their disks.

`hal-provision diagram` lays this out with Graphviz's `dot`; nothing here runs it.
"""

from __future__ import annotations

import textwrap
from collections import Counter, defaultdict
from dataclasses import dataclass
from html import escape
from ipaddress import IPv4Address

import graphviz
from ClusterShell.NodeSet import NodeSet

from ..hostlist import common_count, expand, fold, fold_hostlists, nodeset, overlaps, union
from ..model import Cluster, HardwareProfile, NodeGroup, Role, Switch
from .common import header

PATH = "diagram/cluster.dot"

MAX_SWITCHES = 12
"""Fabrics with more switches are drawn one node per switch class (tier, model, ports)."""

WRAP = 56
"""Characters per line of free text in a box."""

FONT = "Helvetica"
SPEEDS = {10: "SDR", 20: "DDR", 40: "QDR", 56: "FDR", 100: "EDR", 200: "HDR", 400: "NDR", 800: "XDR"}
NETWORK_KINDS = {"ethernet": "Ethernet", "bmc": "BMC, out-of-band", "infiniband": "InfiniBand, IPoIB"}
SWITCH_TIERS = {"leaf": 0, "spine": 1, "core": 2}
"""Drawing order of switch tiers, top down: leaves next to the nodes, cores towards storage."""

# (fill, border) per role: one hue per tier of the drawing.
COLOURS = {
    Role.login: ("#dbe9f6", "#4a7ab0"),
    Role.data_transfer: ("#dbe9f6", "#4a7ab0"),
    Role.compute: ("#dff0d8", "#4b8a3c"),
    Role.development: ("#eef6e8", "#4b8a3c"),
    Role.storage: ("#fbe8d0", "#b5732a"),
    Role.management: ("#ececec", "#666666"),
}
FABRIC_COLOURS = ("#ebe3f3", "#6b4c9a")
SERVICE_COLOUR = "#7a1f1f"
NOTE_COLOUR = "#444444"

# The tiers (cluster subgraphs) top down, with the roles each holds in drawing order.
TIERS: list[tuple[str, str, tuple[Role, ...]]] = [
    ("access", "Access", (Role.login, Role.data_transfer)),
    ("compute", "Compute", (Role.compute, Role.development)),
    ("storage", "Storage", (Role.storage,)),
    ("management", "Management", (Role.management,)),
]


@dataclass
class Box:
    """Node groups of the same roles and hardware profile, drawn as one box. `role` (the
    groups' own) places it in a tier; `roles` adds what the nodes also are (`also:`)."""

    id: str
    role: Role
    profile: str | None  # None: groups without a hardware profile (login, management, ...)
    groups: list[NodeGroup]
    hosts: NodeSet
    roles: tuple[Role, ...] = ()

    @property
    def count(self) -> int:
        return len(self.hosts)


class Boxes(list):
    """Every box, in model order, and which box a host is drawn in."""

    def of(self, host: str) -> Box | None:
        return next((box for box in self if host in box.hosts), None)

    def tier(self, roles: tuple[Role, ...]) -> list[Box]:
        return sorted((b for b in self if b.role in roles), key=lambda b: roles.index(b.role))


def render(cluster: Cluster) -> dict[str, str]:
    return {PATH: header(cluster, "//") + diagram(cluster).source}


def diagram(cluster: Cluster) -> graphviz.Digraph:
    boxes = _boxes(cluster)
    g = graphviz.Digraph(name=cluster.cluster.name)
    # remincross=false: dot's last crossing pass over the whole graph ignores the left-to-right
    # order asked for inside a cluster, and mirrors rows (dot 2.43).
    g.attr(
        rankdir="TB",
        newrank="true",
        compound="true",
        remincross="false",
        nodesep="0.35",
        ranksep="0.6",
        fontname=FONT,
        fontsize="20",
        labelloc="t",
        label=_title(cluster, boxes),
    )
    g.attr("node", shape="box", style="rounded,filled", fontname=FONT, fontsize="12", margin="0.12,0.06")
    g.attr("edge", fontname=FONT, fontsize="11", color="#555555", fontcolor="#333333")
    g.node("users", _html([_row("Users", bold=True, size=14)]), style="rounded", color="#333333", margin="0.25,0.08")

    services = _services(cluster, boxes)
    storage = cluster.storage
    has_storage = bool(storage.arrays or storage.gpfs or storage.nfs.exports)
    for key, title, roles in TIERS:
        tier = boxes.tier(roles)
        if not (tier or key == "management" or (key == "storage" and has_storage)):
            continue
        with g.subgraph(name=f"cluster_{key}") as sub:
            sub.attr(label=title, labeljust="l", fontsize="14", style="rounded,dashed", color="#999999", margin="14")
            for box in tier:
                fill, border = COLOURS[box.role]
                sub.node(box.id, _box_label(cluster, box, services.get(box.id, {})), fillcolor=fill, color=border)
            if key == "compute":
                _pools(cluster, g, sub, boxes)
            if key in ("access", "compute"):
                _row_order(sub, [box.id for box in tier])
            if key == "storage":
                _storage(cluster, g, sub, boxes)
            if key == "management":
                _networks(cluster, sub)
                for host, names in services.get(None, {}).items():
                    sub.node(
                        f"host-{host}",
                        _html([_row(host, bold=True), _row("in no node group", size=10), _service_row(names)]),
                        fillcolor="#ffffff",
                    )
    _users(cluster, g, boxes)
    _fabric(cluster, g, boxes)
    _order(cluster, g, boxes)
    return g


# ---- composable GPU pools ---------------------------------------------------------------------
def pool_gpus_attached(cluster: Cluster) -> int:
    """The pool GPUs the active layout attaches to hosts (0 without a composable section)."""
    comp = cluster.composable
    layout = comp.active_layout if comp is not None else None
    return sum(comp.counts(layout).values()) if layout is not None else 0


def _pools(cluster: Cluster, g: graphviz.Digraph, sub: graphviz.Digraph, boxes: Boxes) -> None:
    """Each pool (expansion chassis) beside the compute nodes, with its GPUs, the active layout's
    attachment, and an edge to every box of hosts cabled to it."""
    comp = cluster.composable
    if comp is None:
        return
    for pool in comp.pools:
        attached = "; ".join(f"{hosts}: {n}" for n, hosts in comp.attached(pool))
        sub.node(
            f"pool-{pool.name}",
            _html(
                [
                    _row(f"GPU pool {pool.name}", bold=True, size=14),
                    _row(f"{pool.gpus.count} x {pool.gpus.model}"),
                    _row(f"layout {comp.active}: {attached or 'none attached'}", size=10, colour=NOTE_COLOUR),
                ]
            ),
            fillcolor="#fff7e0",
            color="#b08800",
        )
        for box_id in dict.fromkeys(b.id for host in pool.host_names if (b := boxes.of(host)) is not None):
            g.edge(f"pool-{pool.name}", box_id, label="PCIe", style="dashed", color="#b08800")


# ---- node groups ------------------------------------------------------------------------------
def _boxes(cluster: Cluster) -> Boxes:
    grouped: dict[tuple[tuple[Role, ...], str | None], list[NodeGroup]] = {}
    for group in cluster.nodes:
        grouped.setdefault((group.roles, group.hardware), []).append(group)
    return Boxes(
        Box(
            id=f"group-{groups[0].name}",
            role=roles[0],
            profile=profile,
            groups=groups,
            hosts=union(g.hosts for g in groups),
            roles=roles,
        )
        for (roles, profile), groups in grouped.items()
    )


def _box_label(cluster: Cluster, box: Box, services: dict[str, list[str]]) -> str:
    profile = _profile(cluster, box)
    more = len(box.groups) - 3
    names = ", ".join(g.name for g in box.groups[:3]) + (f" and {more} more" if more > 0 else "")
    role = ", ".join(r.value for r in box.roles)
    subtitle = names if names == role else f"{names} ({role})"
    if len(box.groups) > 1:
        subtitle = f"{len(box.groups)} groups: {subtitle}"
    rows = [
        _row(fold_hostlists(g.hosts for g in box.groups), bold=True, size=14),
        _row(subtitle, size=10, colour=NOTE_COLOUR),
    ]
    if profile is not None:
        rows += [_row(f"{box.count:,} x {profile.model}"), *[_row(line) for line in _hardware(profile)]]
    else:  # no hardware profile: the count alone
        rows.append(_row(f"{box.count:,} host{'s' * (box.count != 1)}"))
    partitions = [
        p.name + (" (default)" if p.default else "")
        for p in cluster.slurm.partitions
        if overlaps(nodeset(p.nodes), box.hosts)
    ]
    if partitions:
        rows.append(_row("Slurm partitions: " + ", ".join(partitions)))
    rows += [_row(line, size=10, colour=NOTE_COLOUR) for line in _addresses(cluster, box)]
    for host, names in services.items():
        rows.append(_service_row(names, host if box.count > 1 else ""))
    for group in box.groups:
        if group.description:
            rows.append(_row(group.description, size=10, italic=True, colour=NOTE_COLOUR, wrap=True))
    return _html(rows)


def _profile(cluster: Cluster, box: Box) -> HardwareProfile | None:
    return cluster.hardware.get(box.profile) if box.profile is not None else None


def _gpus(cluster: Cluster, box: Box) -> int:
    """GPUs per node of a box: 0 without a hardware profile."""
    profile = _profile(cluster, box)
    return profile.gpu_count if profile else 0


def _hardware(profile: HardwareProfile) -> list[str]:
    """CPUs and memory, GPUs, InfiniBand adapters: one line each."""
    cpu = profile.cpu_model or f"{profile.architecture} CPU"
    smt = f" SMT{profile.threads_per_core}" if profile.threads_per_core > 1 else ""
    lines = [f"{profile.sockets} x {profile.cores_per_socket}-core {cpu}{smt}, {profile.memory_gib} GiB"]
    if profile.gpus is not None:
        nvlink = any(any(row) for row in profile.gpus.nvlink)
        lines.append(f"{profile.gpu_count} x {profile.gpus.model}" + (" (NVLink)" if nvlink else ""))
    alike = Counter((a.model, a.ports, a.rate_gbps) for a in profile.ib_adapters)  # 8 rails: one line
    lines += [
        f"{f'{n} x ' if n > 1 else ''}{model}, {ports} x {gbps} Gb/s" for (model, ports, gbps), n in alike.items()
    ]
    return lines


def _addresses(cluster: Cluster, box: Box) -> list[str]:
    """The box's address range on each network it is on (only the networks, for several groups)."""
    if len(box.groups) > 1:
        nets = [n for n in cluster.networks if all(n in g.addresses for g in box.groups)]
        return [f"on {', '.join(nets)}"] if nets else []
    addresses = box.groups[0].addresses
    parts = [f"{net} {_range(addresses[net], box.count)}" for net in cluster.networks if net in addresses]
    return [" | ".join(parts)] if parts else []


def _range(first: IPv4Address, count: int) -> str:
    """172.22.1.1-16 within one /24, else both addresses in full."""
    if count == 1:
        return str(first)
    last = first + (count - 1)
    head, _, low = str(first).rpartition(".")
    last_head, _, high = str(last).rpartition(".")
    return f"{head}.{low}-{high}" if head == last_head else f"{first} - {last}"


# ---- services ---------------------------------------------------------------------------------
def _services(cluster: Cluster, boxes: Boxes) -> dict[str | None, dict[str, list[str]]]:
    """Box id (None: a host in no node group) -> host -> the services it runs, in model order."""
    s = cluster.services
    portal = "portal"
    if cluster.portal is not None:
        portal += " (JupyterHub)" if cluster.portal.front_end == "jupyterhub" else " (Open OnDemand)"
    grafana = cluster.monitoring.grafana if cluster.monitoring else None
    placed = [
        ("slurmctld", s.slurmctld),
        ("slurmdbd", s.slurmdbd),
        ("accounting_db (MariaDB)", s.accounting_db),
        ("monitoring_db (InfluxDB)", s.monitoring_db),
        ("ldap", s.ldap),
        (portal, s.portal),
        ("grafana", grafana.host if grafana else None),
    ]
    out: dict[str | None, dict[str, list[str]]] = {}
    for name, hosts in placed:
        if hosts is None:
            continue
        members = expand(hosts)
        for n, host in enumerate(members):
            label = name if len(members) == 1 else f"{name} ({'primary' if n == 0 else 'backup'})"
            box = boxes.of(host)
            out.setdefault(box.id if box else None, {}).setdefault(host, []).append(label)
    return out


def _service_row(names: list[str], host: str = "") -> str:
    text = (f"services on {host}: " if host else "services: ") + ", ".join(names)
    return _row(text, colour=SERVICE_COLOUR, wrap=True)


# ---- users ------------------------------------------------------------------------------------
def _users(cluster: Cluster, g: graphviz.Digraph, boxes: Boxes) -> None:
    for box in boxes:
        if Role.login in box.roles:
            g.edge("users", box.id, label="ssh")
        elif Role.data_transfer in box.roles:
            g.edge("users", box.id, label="data transfer")
    if cluster.services.portal is not None:
        host = expand(cluster.services.portal)[0]
        portal = cluster.portal
        name = portal.server_name if portal and portal.server_name else f"{host}.{cluster.cluster.domain}"
        port = f":{portal.port}" if portal and portal.port != 443 else ""
        box = boxes.of(host)
        g.edge("users", box.id if box else f"host-{host}", label=f"https://{name}{port}", style="dashed")


# ---- fabric -----------------------------------------------------------------------------------
def _switch_nodes(switches: list[tuple[int, str, Switch]]) -> dict[str, tuple[str, str]]:
    """Switch name -> (node id, label): one node per switch, or per switch class when many.
    `switches`: Fabric.every_switch()."""
    if len(switches) <= MAX_SWITCHES:
        return {
            name: (
                f"switch-{name}",
                _html(
                    [
                        _row(name, bold=True),
                        _row(f"{s.tier}, {s.ports} ports", size=10),
                        *([_row(s.model, size=10)] if s.model else []),
                    ]
                ),
            )
            for _i, name, s in switches
        }
    classes = Counter((s.tier, s.model, s.ports) for _i, _name, s in switches)
    ordered = sorted(classes, key=lambda k: (SWITCH_TIERS[k[0]], k[1], k[2]))
    nodes = {
        k: (
            f"switches-{n + 1}",
            _html(
                [_row(f"{classes[k]:,} x {k[0]} switch", bold=True), _row(f"{k[1] or 'switch'}, {k[2]} ports", size=10)]
            ),
        )
        for n, k in enumerate(ordered)
    }
    return {name: nodes[(s.tier, s.model, s.ports)] for _i, name, s in switches}


def _fabric_ends(cluster: Cluster) -> list[str]:
    """Node ids of a switch of the lowest tier (drawn on top) and of the highest (drawn lowest,
    where the fabric's logical edges to storage start); none without a fabric."""
    fabric = cluster.fabric
    if fabric is None or not fabric.switches:
        return []
    every = fabric.every_switch()
    nodes = _switch_nodes(every)
    top = min(every, key=lambda e: SWITCH_TIERS[e[2].tier])
    bottom = max(every, key=lambda e: SWITCH_TIERS[e[2].tier])
    return list(dict.fromkeys([nodes[top[1]][0], nodes[bottom[1]][0]]))


def _fabric(cluster: Cluster, g: graphviz.Digraph, boxes: Boxes) -> None:
    fabric = cluster.fabric
    if fabric is None:
        return
    every = fabric.every_switch()
    nodes = _switch_nodes(every)
    fill, border = FABRIC_COLOURS
    speed = f"{SPEEDS.get(fabric.rate_gbps, '')} {fabric.rate_gbps} Gb/s".strip()
    ipoib = [f"IPoIB network {name} {net.cidr}" for name, net in cluster.networks.items() if net.kind == "infiniband"]
    caption = [_row(f"InfiniBand fabric {fabric.name}", bold=True, size=14), _row(speed), *map(_row, ipoib)]
    with g.subgraph(name="cluster_fabric") as sub:
        # The caption is a node beside the top switches, not the cluster's label: cables coming
        # down from the nodes would cross a label.
        sub.attr(label="", style="rounded,filled", fillcolor="#f7f4fb", color=border, margin="14")
        sub.node("fabric", _html(caption), shape="plain", style="")
        for node_id, label in dict(nodes.values()).items():
            sub.node(node_id, label, style="filled", fillcolor=fill, color=border)
        tiers = sorted({s.tier for s in fabric.switches}, key=SWITCH_TIERS.get)
        for n, tier in enumerate(tiers):
            row = list(dict.fromkeys(nodes[name][0] for _i, name, s in every if s.tier == tier))
            _row_order(sub, ["fabric", *row] if n == 0 else row)
    cable = {"dir": "none", "color": border, "penwidth": "2"}
    uplinks = Counter((nodes[name][0], nodes[u][0]) for _i, name, s in every for u in s.uplinks if u in nodes)
    for (lower, upper), n in sorted(uplinks.items()):
        g.edge(lower, upper, label=f"{n:,} x uplink" if n > 1 else "uplink", **cable)
    # Cables per (switch node, adapter port): a host may be cabled once per port.
    cabled: defaultdict[tuple[str, int], NodeSet] = defaultdict(NodeSet)
    for link in fabric.links:
        segments = link.segments()
        drawn = {nodes[switch][0] if switch in nodes else None for switch, _start, _n in segments}
        if len(drawn) == 1 and None not in drawn and sum(n for *_, n in segments) == link.host_count:
            # Every host to one drawn node (a switch class, in a large fabric): no NodeSet per switch.
            cabled[(drawn.pop(), link.port)].update(nodeset(link.hosts))
            continue
        for switch, hosts in link.runs():
            if switch in nodes:
                cabled[(nodes[switch][0], link.port)].update(nodeset(hosts))
    cables: Counter[tuple[int, str]] = Counter()  # (box index, switch node) -> cables
    ports: defaultdict[tuple[int, str], set[int]] = defaultdict(set)  # the adapter ports those cables leave
    for (switch_id, port), hosts in cabled.items():
        for index, box in enumerate(boxes):
            n = common_count(hosts, box.hosts)
            cables[(index, switch_id)] += n
            if n:
                ports[(index, switch_id)].add(port)
    for (index, switch_id), n in sorted(cables.items()):
        box = boxes[index]
        label = f"{n:,} x {fabric.rate_gbps} Gb/s"
        if len({p for (i, _s), ps in ports.items() if i == index for p in ps}) > 1:  # rails: which port goes where
            label += f", port {'/'.join(map(str, sorted(ports[(index, switch_id)])))}"
        if not n:
            continue
        if box.role is Role.storage:  # storage hangs below the fabric
            g.edge(switch_id, box.id, label=label, **cable)
        else:
            g.edge(box.id, switch_id, label=label, **cable)


# ---- storage ----------------------------------------------------------------------------------
def _storage(cluster: Cluster, g: graphviz.Digraph, sub: graphviz.Digraph, boxes: Boxes) -> None:
    """Arrays, file systems and exports go into `sub`, their edges into the whole graph `g`: an
    edge statement inside a cluster pulls the node at its other end (a switch) into it."""
    storage = cluster.storage
    fill, border = COLOURS[Role.storage]
    array_of = {server.name: array.name for array in storage.arrays for server in array.servers}
    for array in storage.arrays:
        rows = [_row(array.name, bold=True, size=14), _row(array.model)]
        if array.usable_tib:
            rows.append(_row(f"{array.usable_tib:g} TiB usable"))
        if array.servers:
            servers = ", ".join(f"{s.name} ({s.memory_gib} GiB)" for s in array.servers)
            rows.append(_row(f"servers: {servers}", size=10))
        if array.description:
            rows.append(_row(array.description, size=10, italic=True, wrap=True))
        sub.node(f"array-{array.name}", _html(rows), shape="box3d", style="filled", fillcolor="#ffffff", color=border)
    gpfs = storage.gpfs
    if gpfs is not None:
        # Every model node of the GPFS cluster mounts its file systems; appliance servers serve them.
        clients = fold(cluster.gpfs_nodes)
        release = f"Spectrum Scale {gpfs.release}" if gpfs.release else "Spectrum Scale"
        ends = _fabric_ends(cluster)
        net = cluster.networks.get(gpfs.daemon_network or "")
        for fs in gpfs.filesystems:
            size = f", {fs.usable_tib:g} TiB" if fs.usable_tib else ""
            rows = [
                _row(fs.name, bold=True, size=14),
                _row(f"GPFS file system ({release})", size=10),
                _row(f"mounted at {fs.mount_point}{size}"),
                _row(f"on {clients}", size=10),
                _row(
                    f"block size {fs.block_size}, {fs.metadata_replicas} x metadata, {fs.data_replicas} x data", size=10
                ),
            ]
            fs_id = f"fs-gpfs-{fs.name}"
            sub.node(fs_id, _html(rows), shape="folder", fillcolor=fill, color=border)
            holders: Counter[str] = Counter()
            for nsd in fs.nsds:
                primary = nsd.servers[0]
                box = boxes.of(primary)
                holder = f"array-{array_of[primary]}" if primary in array_of else box.id if box else None
                if holder is not None:
                    holders[holder] += nsd.count
            for holder, n in sorted(holders.items()):
                g.edge(fs_id, holder, label=f"{n:,} NSDs", dir="back", color=border)
            if ends and net is not None and net.kind == "infiniband":
                g.edge(
                    ends[-1],
                    fs_id,
                    label=f"GPFS over {gpfs.daemon_network}",
                    style="dashed",
                    dir="none",
                    color=border,
                    ltail="cluster_fabric",
                )
    for export in storage.nfs.exports:
        mounts = [m for m in storage.nfs.mounts if m.export == export.name]
        rows = [
            _row(export.name, bold=True, size=14),
            _row("NFS export", size=10),
            _row(f"{export.server}:{export.path}"),
        ]
        for m in mounts:
            rows += [
                _row(f"mounted at {m.mount_point}" + (" (read-only)" if "ro" in m.options else "")),
                _row(f"on {m.clients}", size=10),
            ]
        if not mounts:
            rows.append(_row("mounted nowhere", size=10))
        export_id = f"fs-nfs-{export.name}"
        sub.node(export_id, _html(rows), shape="folder", fillcolor=fill, color=border)
        server = boxes.of(export.server)
        if server is not None:
            g.edge(server.id, export_id, label="exports", color=border)


# ---- networks ---------------------------------------------------------------------------------
def _networks(cluster: Cluster, sub: graphviz.Digraph) -> None:
    """One table: every network with its kind, CIDR and how many hosts have an address on it."""

    def cells(values: list[str], bold: bool = False) -> str:
        return "".join(f'<TD ALIGN="LEFT">{f"<B>{escape(v)}</B>" if bold else escape(v)}</TD>' for v in values)

    rows = [
        '<TR><TD ALIGN="LEFT" COLSPAN="4"><B>Networks</B></TD></TR>',
        f"<TR>{cells(['network', 'kind', 'CIDR', 'hosts'], bold=True)}</TR>",
    ]
    for name, net in cluster.networks.items():
        hosts = sum(len(nodeset(g.hosts)) for g in cluster.nodes if name in g.addresses)
        primary = " (primary)" if name == cluster.cluster.primary_network else ""
        values = [name + primary, NETWORK_KINDS[net.kind], str(net.cidr), f"{hosts:,}"]
        rows.append(f"<TR>{cells(values)}</TR>")
        if net.description:
            rows.append(
                f'<TR><TD></TD><TD ALIGN="LEFT" COLSPAN="3"><FONT POINT-SIZE="10"><I>'
                f"{escape(net.description)}</I></FONT></TD></TR>"
            )
    table = f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="3">{"".join(rows)}</TABLE>>'
    sub.node("networks", table, style="filled", fillcolor="#ffffff", color="#666666")


# ---- reading order ----------------------------------------------------------------------------
def _order(cluster: Cluster, g: graphviz.Digraph, boxes: Boxes) -> None:
    """Invisible edges that keep the tiers in reading order where no real edge does."""

    def first(*roles: Role) -> str | None:
        return next((b.id for b in boxes if b.role in roles), None)

    # Each step spans one rank: a longer invisible edge gets an invisible bend point beside the
    # fabric, which shoves the tiers sideways. Weight 0: ranks only, no pull to line them up.
    # Users reach the access tier by real edges; without one, an invisible edge keeps them on top.
    chain = [
        first(Role.login, Role.data_transfer) or "users",
        first(Role.compute, Role.development),
        *_fabric_ends(cluster),
        first(Role.storage),
    ]
    steps = [node for node in chain if node is not None]
    for upper, lower in zip(steps, steps[1:]):
        g.edge(upper, lower, style="invis", weight="0")
    # Management is a column on the side: its boxes one under the other, the networks below.
    column = [b.id for b in boxes if b.role is Role.management] + ["networks"]
    g.edge("users", column[0], style="invis")
    for upper, lower in zip(column, column[1:]):
        g.edge(upper, lower, style="invis")


def _row_order(sub: graphviz.Digraph, ids: list[str]) -> None:
    """Side by side, left to right in this order (the model's: boxes and the switches they are
    cabled to then tend to line up without crossing)."""
    if len(ids) < 2:
        return
    with sub.subgraph() as row:
        row.attr(rank="same")
        for left, right in zip(ids, ids[1:]):
            row.edge(left, right, style="invis")


# ---- labels -----------------------------------------------------------------------------------
def _row(
    text: str,
    *,
    bold: bool = False,
    italic: bool = False,
    size: int | None = None,
    colour: str = "",
    wrap: bool = False,
) -> str:
    """One left-aligned cell of an HTML-like label; the text is escaped, and with `wrap` broken
    into lines of at most WRAP characters."""
    lines = textwrap.wrap(text, WRAP) if wrap else [text]
    inner = "<BR/>".join(map(escape, lines))
    if bold:
        inner = f"<B>{inner}</B>"
    if italic:
        inner = f"<I>{inner}</I>"
    attrs = (f' POINT-SIZE="{size}"' if size else "") + (f' COLOR="{colour}"' if colour else "")
    if attrs:
        inner = f"<FONT{attrs}>{inner}</FONT>"
    return f'<TR><TD ALIGN="LEFT" BALIGN="LEFT">{inner}</TD></TR>'


def _html(rows: list[str]) -> str:
    """An HTML-like label (the graphviz package passes <...> through unquoted)."""
    return f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="1">{"".join(rows)}</TABLE>>'


def _title(cluster: Cluster, boxes: Boxes) -> str:
    info = cluster.cluster
    hosts = sum(b.count for b in boxes)
    pooled = pool_gpus_attached(cluster)  # on compute nodes, as the active layout attaches them
    gpus = sum(b.count * _gpus(cluster, b) for b in boxes) + pooled
    compute_gpus = sum(b.count * _gpus(cluster, b) for b in boxes if b.role is Role.compute) + pooled
    totals = f"{hosts:,} host{'s' * (hosts != 1)}" + (f", {gpus:,} GPU{'s' * (gpus != 1)}" if gpus else "")
    if gpus != compute_gpus:
        totals += f" ({compute_gpus:,} on compute nodes)"
    return _html(
        [
            _row(f"{info.name}: {info.description}" if info.description else info.name, bold=True, size=20),
            _row(f"{totals}; drawn from the cluster description", size=11, colour="#555555"),
        ]
    )
