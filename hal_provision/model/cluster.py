"""Cluster identity."""

from __future__ import annotations

from pydantic import Field

from .base import Name, Strict


class ClusterInfo(Strict):
    name: Name = Field(description="Short cluster name; also Slurm's ClusterName.")
    domain: str = Field(
        description="DNS domain of the cluster's hosts; /etc/hosts gets fully qualified names.",
        pattern=r"^[a-z0-9]([a-z0-9\-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9\-]*[a-z0-9])?)*$",
    )
    description: str = Field("", description="Free text shown by `hal-provision show`.")
    primary_network: str = Field(
        description="Network whose address a host's plain name resolves to (and Ansible reaches)."
    )
