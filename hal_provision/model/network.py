"""Networks, per-node addressing and the InfiniBand fabric.

A fabric can be written one entry per switch and per link (a hand-drawn fabric), or compactly:
one switch entry naming many alike switches (`names: leaf[001-120]`) and one link entry cabling
many hosts over many switches (`switches:` with `hosts_per_switch:`). Both forms mean the same
cabling and render the same topology.conf; a 100,000-node fat tree takes a few hundred entries
instead of ten thousand. `Fabric.every_switch` and `FabricLink.segments` give the expanded
view, switch by switch, without one object per host.
"""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Literal

from ClusterShell.NodeSet import NodeSet
from pydantic import Field, model_validator

from ..hostlist import chunks, expand, fold, nodeset, union_shared
from .base import Hostlist, Name, Strict, _check_name
from .hardware import IbDevicePort


class Network(Strict):
    kind: Literal["ethernet", "bmc", "infiniband"] = Field(
        description="ethernet: management/access; bmc: out-of-band; infiniband: IPoIB on the fabric."
    )
    cidr: IPv4Network = Field(description="Subnet of the network, e.g. 172.22.0.0/16.")
    host_suffix: str = Field(
        "",
        description="Appended to a host's name for its address on this network in /etc/hosts "
        "(empty for the primary network), e.g. '-ib'.",
        pattern=r"^[a-z0-9\-]*$",
    )
    description: str = Field("", description="Free text.")


def _one_of(entry, one: str, many: str, what: str) -> None:
    given = [key for key in (one, many) if getattr(entry, key) is not None]
    if len(given) != 1:
        raise ValueError(
            f"give either `{one}` (one {what}) or `{many}` (several, as a hostlist expression)"
            + (", not both" if given else "")
        )


def _check_switch_names(expr: str) -> None:
    """Each switch a hostlist names must be a valid Name (hostlists also allow '.')."""
    for name in expand(expr):
        try:
            _check_name(name)
        except ValueError as exc:
            raise ValueError(f"{expr!r} names switch {exc}") from None


class Switch(Strict):
    name: Name | None = Field(
        None, description="Switch name as it appears in Slurm's topology.conf (one switch; or give `names`)."
    )
    names: Hostlist | None = Field(
        None,
        description="Several alike switches as a hostlist expression, e.g. leaf[001-120], instead of `name`: "
        "each has this entry's tier, ports, uplinks and model, and they come in hostlist order.",
    )
    tier: Literal["leaf", "spine", "core"] = Field(
        description="leaf switches connect nodes; spine/core switches connect switches."
    )
    ports: int = Field(gt=0, le=2048, description="Number of ports on the switch.")
    uplinks: list[Name] = Field(default_factory=list, description="Names of the switches this switch is cabled up to.")
    model: str = Field("", description="Vendor model, informational.")

    @model_validator(mode="after")
    def _named_once(self) -> "Switch":
        _one_of(self, "name", "names", "switch")
        if self.names is not None:
            _check_switch_names(self.names)
        return self

    @property
    def members(self) -> list[str]:
        """The names of the switches this entry describes, in order."""
        return [self.name] if self.name is not None else expand(self.names)


class FabricLink(Strict):
    hosts: Hostlist = Field(description="Nodes cabled by this entry, in hostlist order.")
    port: int = Field(
        1,
        ge=1,
        le=8,
        description="The node's InfiniBand port, 1-based, counted over the "
        "profile's ib_adapters in order (port 3 of a node with four single-port adapters is the third "
        "adapter's); or give `device`.",
    )
    device: IbDevicePort | None = Field(
        None,
        description="The port as the driver names it, DEVICE or DEVICE:PORT (mlx5_3, mlx5_0:2), instead of "
        "`port`: the port of that name in the hosts' hardware profile (ib_adapters[].devices, else the mlx5 "
        "naming). On a rail-optimised fabric, one link per rail: {hosts: gpu[01-48], device: mlx5_3, "
        "switch: rail4-leaf, ...}. With `port` too, both must name the same port.",
    )
    switch: Name | None = Field(
        None, description="Switch the nodes' port goes to (one switch; or give `switches` and `hosts_per_switch`)."
    )
    switches: Hostlist | None = Field(
        None,
        description="Several switches as a hostlist expression, instead of `switch`: the hosts, in hostlist "
        "order, go `hosts_per_switch` to each switch in turn, in hostlist order (the last may take fewer).",
    )
    hosts_per_switch: int | None = Field(
        None, ge=1, description="With `switches`: how many consecutive hosts each switch takes."
    )
    first_switch_port: int = Field(
        ge=1,
        description="Switch port of the first host (on each switch); the following hosts take consecutive ports.",
    )

    @model_validator(mode="after")
    def _one_switch_form(self) -> "FabricLink":
        _one_of(self, "switch", "switches", "switch")
        if self.switches is not None:
            _check_switch_names(self.switches)
            if self.hosts_per_switch is None:
                raise ValueError("`switches` needs `hosts_per_switch`: how many hosts each switch takes")
        elif self.hosts_per_switch is not None:
            raise ValueError("`hosts_per_switch` goes with `switches`; with one `switch` every host goes to it")
        return self

    @property
    def switch_names(self) -> list[str]:
        """The switches this entry names, in order (some may get no host: a check says so)."""
        return [self.switch] if self.switch is not None else expand(self.switches)

    @property
    def host_count(self) -> int:
        return len(nodeset(self.hosts))

    def segments(self) -> list[tuple[str, int, int]]:
        """(switch, index of its first host in `hosts`, number of hosts) for each switch that
        gets a host, in order; the first of them takes port `first_switch_port` on its switch."""
        total = self.host_count
        if self.switch is not None:
            return [(self.switch, 0, total)]
        per = self.hosts_per_switch
        return [(name, start, min(per, total - start)) for name, start in zip(self.switch_names, range(0, total, per))]

    def runs(self) -> list[tuple[str, str]]:
        """(switch, the hosts it takes as a folded hostlist) for each switch that gets a host,
        in order: the segments' hosts, made by arithmetic on the hostlist where it is one range."""
        if self.switch is not None:
            return [(self.switch, fold(nodeset(self.hosts)))]
        return list(zip(self.switch_names, chunks(self.hosts, self.hosts_per_switch)))


class Fabric(Strict):
    name: Name = Field(description="Fabric name.")
    kind: Literal["infiniband"] = Field("infiniband", description="Fabric technology.")
    rate_gbps: int = Field(gt=0, description="Link rate in Gb/s (EDR: 100).")
    switches: list[Switch] = Field(
        description="Every switch of the fabric (one entry per switch, or per alike switches)."
    )
    links: list[FabricLink] = Field(default_factory=list, description="Which node port goes to which switch port.")

    def every_switch(self) -> list[tuple[int, str, Switch]]:
        """(index of its entry in `switches`, name, entry) for every switch, in order."""
        return [(i, name, sw) for i, sw in enumerate(self.switches) for name in sw.members]

    def hosts_by_port(self) -> dict[int, NodeSet]:
        """Adapter port number -> the hosts cabled on it (a shared NodeSet: never change it), ports
        in first-use order."""
        by_port: dict[int, list[str]] = {}
        for link in self.links:
            by_port.setdefault(link.port, []).append(link.hosts)
        return {port: union_shared(exprs) for port, exprs in by_port.items()}
