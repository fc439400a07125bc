"""Cluster identity (the `cluster:` section): name, DNS domain, primary network, install prefix,
operating system."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .base import AbsolutePath, Name, Strict
from .slurm_versions import DEFAULT_OS, OPERATING_SYSTEMS, OS_NAMES


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
    prefix: AbsolutePath | None = Field(
        None,
        description="Directory everything the toolkit installs on the nodes lives under, unless a section "
        "names its own: the module tree (PREFIX/modulefiles), the portal (PREFIX/portal), the recipes "
        "(PREFIX/recipes). Default: /opt/NAME.",
    )
    os: Literal[OS_NAMES] = Field(  # type: ignore[valid-type]
        DEFAULT_OS,
        description="The Debian release every node runs: "
        + ", ".join(f"{o.name} ({o.title} {o.release}, Slurm {o.slurm})" for o in OPERATING_SYSTEMS)
        + ". Both are tested: the daemons of each one's Slurm load the rendered configs in tests/acceptance. It "
        "sets slurm.version's default to the major its archive ships, and the node image `hal-provision sandbox "
        "up` runs.",
    )

    @model_validator(mode="after")
    def _default_prefix(self) -> ClusterInfo:
        if self.prefix is None:
            self.prefix = f"/opt/{self.name}"
        return self

    def under_prefix(self, what: str) -> str:
        """A directory below the install prefix."""
        return f"{self.prefix.rstrip('/')}/{what}"
