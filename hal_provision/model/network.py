"""Networks, per-node addressing and the InfiniBand fabric."""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Literal

from pydantic import Field

from .base import Hostlist, Name, Strict


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


class Switch(Strict):
    name: Name = Field(description="Switch name as it appears in Slurm's topology.conf.")
    tier: Literal["leaf", "spine", "core"] = Field(
        description="leaf switches connect nodes; spine/core switches connect switches."
    )
    ports: int = Field(gt=0, le=2048, description="Number of ports on the switch.")
    uplinks: list[Name] = Field(
        default_factory=list, description="Names of the switches this switch is cabled up to."
    )
    model: str = Field("", description="Vendor model, informational.")


class FabricLink(Strict):
    hosts: Hostlist = Field(description="Nodes cabled by this entry, in hostlist order.")
    port: int = Field(1, ge=1, le=8, description="Adapter port on each node (1-based).")
    switch: Name = Field(description="Switch the nodes' port goes to.")
    first_switch_port: int = Field(
        ge=1,
        description="Switch port of the first host; the following hosts take consecutive ports.",
    )


class Fabric(Strict):
    name: Name = Field(description="Fabric name.")
    kind: Literal["infiniband"] = Field("infiniband", description="Fabric technology.")
    rate_gbps: int = Field(gt=0, description="Link rate in Gb/s (EDR: 100).")
    switches: list[Switch] = Field(description="Every switch of the fabric.")
    links: list[FabricLink] = Field(
        default_factory=list, description="Which node port goes to which switch port."
    )
