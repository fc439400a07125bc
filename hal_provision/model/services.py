"""Where each cluster service runs."""

from __future__ import annotations

from pydantic import Field

from .base import Strict
from .placement import PLACED, Placement


class Services(Strict):
    slurmctld: Placement = Field(
        description="Slurm controller host(s): one, or two for a backup controller, the first named the primary and "
        "the second its backup (slurm.conf's SlurmctldHost lines in that order). Two controllers share "
        "slurm.state_save_location, which must then lie on a shared file system both mount." + PLACED
    )
    slurmdbd: Placement = Field(description="Slurm accounting daemon host." + PLACED)
    accounting_db: Placement = Field(description="MariaDB server holding Slurm accounting." + PLACED)
    monitoring_db: Placement | None = Field(None, description="InfluxDB host for metrics." + PLACED)
    portal: Placement | None = Field(None, description="Web portal host (JupyterHub, or Open OnDemand)." + PLACED)
    ldap: Placement | None = Field(None, description="LDAP directory server host." + PLACED)
