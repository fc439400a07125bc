"""Where each cluster service runs."""

from __future__ import annotations

from pydantic import Field

from .base import Strict
from .placement import PLACED, Placement


class Services(Strict):
    slurmctld: Placement = Field(description="Slurm controller host(s); the first is primary." + PLACED)
    slurmdbd: Placement = Field(description="Slurm accounting daemon host." + PLACED)
    accounting_db: Placement = Field(description="MariaDB server holding Slurm accounting." + PLACED)
    monitoring_db: Placement | None = Field(None, description="InfluxDB host for metrics." + PLACED)
    portal: Placement | None = Field(None, description="Web portal host (JupyterHub, or Open OnDemand)." + PLACED)
    ldap: Placement | None = Field(None, description="LDAP directory server host." + PLACED)
