"""Where each cluster service runs."""

from __future__ import annotations

from pydantic import Field

from .base import Hostlist, Strict


class Services(Strict):
    slurmctld: Hostlist = Field(description="Slurm controller host(s); the first is primary.")
    slurmdbd: Hostlist = Field(description="Slurm accounting daemon host.")
    accounting_db: Hostlist = Field(description="MariaDB server holding Slurm accounting.")
    monitoring_db: Hostlist | None = Field(None, description="InfluxDB host for metrics.")
    portal: Hostlist | None = Field(None, description="Web portal host (JupyterHub, or Open OnDemand).")
    ldap: Hostlist | None = Field(None, description="LDAP directory server host.")
