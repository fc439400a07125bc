"""Monitoring: metrics from every node into one database, Grafana dashboards over it, and alerts.

Two backends (monitoring.backend). `influxdb`, HAL's own: Telegraf on every node feeding one
InfluxDB. `prometheus`: the Prometheus node exporter on every node, the toolkit's collectors
writing its textfile directory (hal-collect textfile), one Prometheus server on
services.monitoring_db scraping them, and Alertmanager beside it sending the alert rules the model
makes (model.alerts) to the receivers monitoring.alerts names.

Which inputs run on which node role or group, how often, where the database and Grafana live, and
which dashboards are wanted. INPUTS is the catalogue every part agrees on: for each input,
the measurements and fields it writes. Telegraf's own inputs are listed with the fields of
their documented schema that the dashboards use; the custom collectors (hal_provision.node.monitoring,
run by Telegraf's exec input) with what they print. The checks compare dashboard panels with
this catalogue; the collectors' tests compare their output with it.

One collector is not listed in monitoring.inputs: `backup` (the age of each backup job's last
good snapshot, `hal-backup age --influx`) runs on every host with backup jobs whenever the
description has a backup section and monitoring (backup_collector_hosts): the backup section
already says where the jobs run, and a backup nobody watches is the one found broken on the
day it is needed.

No secret lives here: the InfluxDB passwords are generated on the database node (or come from
Ansible Vault).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, field_validator, model_validator

from .base import Name, Strict, absolute_path
from .nodes import NodeGroup, Role
from .placement import PLACED, Placement

if TYPE_CHECKING:
    from . import Cluster


# The directory the storage responsiveness collector lists.
ProbePath = absolute_path(r"^/")
StoragePath = absolute_path()


@dataclass(frozen=True)
class InputSpec:
    """One Telegraf input: built into Telegraf, or one of our collectors run by inputs.exec."""

    kind: Literal["builtin", "exec"]
    measurements: dict[str, tuple[str, ...]]  # measurement -> fields the dashboards may use
    tags: dict[str, tuple[str, ...]]  # measurement -> tags it carries (besides host)
    min_interval_seconds: int  # one run takes up to this long on a busy node
    needs: Literal["", "gpus", "fabric", "slurm_controller", "backup_jobs", "health", "pull"] = ""
    description: str = ""


INPUTS: dict[str, InputSpec] = {
    # ---- Telegraf's own inputs (documented schemas; the fields the dashboards use) ----
    "cpu": InputSpec(
        "builtin",
        {"cpu": ("usage_user", "usage_system", "usage_idle", "usage_iowait")},
        {"cpu": ("cpu",)},
        1,
        description="CPU time shares, per CPU and cpu-total",
    ),
    "mem": InputSpec(
        "builtin", {"mem": ("total", "used", "available", "used_percent")}, {"mem": ()}, 1, description="memory"
    ),
    "system": InputSpec(
        "builtin",
        {"system": ("load1", "load5", "load15", "n_cpus", "uptime")},
        {"system": ()},
        1,
        description="load and uptime; its points are each node's heartbeat",
    ),
    "disk": InputSpec(
        "builtin",
        {"disk": ("total", "used", "free", "used_percent")},
        {"disk": ("path", "fstype")},
        1,
        description="file system usage",
    ),
    "net": InputSpec(
        "builtin",
        {"net": ("bytes_recv", "bytes_sent")},
        {"net": ("interface",)},
        1,
        description="network interface counters",
    ),
    "processes": InputSpec(
        "builtin",
        {"processes": ("total", "running", "sleeping", "zombies")},
        {"processes": ()},
        1,
        description="process counts",
    ),
    "nvidia_smi": InputSpec(
        "builtin",
        {
            "nvidia_smi": (
                "utilization_gpu",
                "utilization_memory",
                "memory_used",
                "memory_total",
                "temperature_gpu",
                "power_draw",
            )
        },
        {"nvidia_smi": ("index", "name", "uuid", "pstate")},
        5,
        needs="gpus",
        description="per-GPU utilization, memory, temperature and power (nvidia-smi -q -x)",
    ),
    "infiniband": InputSpec(
        "builtin",
        {"infiniband": ("port_rcv_data", "port_xmit_data")},
        {"infiniband": ("device", "port")},
        1,
        needs="fabric",
        description="InfiniBand port counters (/sys/class/infiniband)",
    ),
    # ---- HAL's collectors (hal_provision.node.monitoring), run by inputs.exec ----
    "slurm": InputSpec(
        "exec",
        {
            "slurm_jobs": ("jobs", "gpus", "cpus", "nodes"),
            "slurm_job": ("gpus", "cpus", "nodes", "run_seconds"),
            "slurm_node": ("up", "down", "drained", "gpus_total", "gpus_alloc", "cpus_total", "cpus_alloc"),
            "slurm_daemons": ("up",),
        },
        {
            "slurm_jobs": ("partition", "user", "account", "state"),
            "slurm_job": ("job_id", "partition", "user", "account"),
            "slurm_node": ("node", "state"),
            "slurm_daemons": ("daemon",),
        },
        10,
        needs="slurm_controller",
        description="jobs per partition/user/account, running jobs, node states (squeue, sacct, sinfo -p/-P output); "
        "whether slurmctld answered, and slurmdbd where the Prometheus backend asks (sacctmgr)",
    ),
    "bmc": InputSpec(
        "exec",
        {"bmc": ("value", "ok")},
        {"bmc": ("sensor", "kind", "unit")},
        30,
        description="BMC temperatures, fans and power (ipmitool sdr; crassd on HAL's AC922s)",
    ),
    "gpu": InputSpec(
        "exec",
        {"gpu_info": ("memory_total_mib", "ecc_enabled")},
        {"gpu_info": ("index", "name", "uuid", "pci_bus_id", "driver_version")},
        5,
        needs="gpus",
        description="GPU inventory facts nvidia_smi lacks (nvidia-smi --query-gpu CSV)",
    ),
    "storage_responsiveness": InputSpec(
        "exec",
        {"storage_responsiveness": ("list_home_ms", "stat_ms", "entries")},
        {"storage_responsiveness": ("path",)},
        5,
        description="time to list the home directories and stat a file",
    ),
    # Not listed in monitoring.inputs: it follows from the backup section (module text).
    "backup": InputSpec(
        "exec",
        {"hal_backup": ("age_s", "bytes")},
        {"hal_backup": ("job",)},
        10,
        needs="backup_jobs",
        description="per backup job, seconds since its newest good snapshot and that snapshot's "
        "size (hal-backup age --influx, run as root: the secret jobs' snapshots are root's); a job "
        "without one has bytes=0 and no age_s",
    ),
    # The Prometheus backend's alerts read these two; they follow from the health and deploy
    # sections (not listed in monitoring.inputs either), and only that backend runs them.
    "health": InputSpec(
        "exec",
        {"hal_healthcheck": ("failed",), "hal_healthcheck_run": ("time", "drain")},
        {"hal_healthcheck": ("check",), "hal_healthcheck_run": ()},
        5,
        needs="health",
        description="the health check's last result on each Slurm node: per check whether it failed, when it "
        "ran and whether it drained the node (/run/hal-healthcheck/last.json)",
    ),
    "pull": InputSpec(
        "exec",
        {"hal_converge": ("finished", "seconds", "failed", "changed", "drift")},
        {"hal_converge": ("state",)},
        5,
        needs="pull",
        description="each pull node's last converge: when it finished, whether it failed, changed the node, or "
        "found the node changed by hand (a change without a new release)",
    ),
}
# Inputs that run on chosen hosts only, in a file of their own (files/etc/telegraf/hosts/<host>/).
HOST_ONLY = ("slurm_controller", "backup_jobs")

DASHBOARDS = ("status", "nodes", "admin")
# slurmctld serves OpenMetrics itself from this Slurm (MetricsType=metrics/openmetrics), unless
# PrivateData is set.
SLURMCTLD_METRICS_FROM = "25.11"
DURATION = re.compile(r"^(INF|\d+[hdw])$")


def listable(name: str) -> bool:
    """Whether monitoring.inputs may name the input (the backup, health and pull collectors
    follow from the backup, health and deploy sections instead)."""
    return INPUTS[name].needs not in ("backup_jobs", "health", "pull")


def producers(measurement: str) -> list[str]:
    """The inputs that write a measurement."""
    return [name for name, spec in INPUTS.items() if measurement in spec.measurements]


class InfluxDb(Strict):
    database: Name = Field("telegraf", description="Database Telegraf writes into.")
    retention: str = Field(
        "90d",
        description="Retention policy duration (InfluxDB syntax: 12h, 90d, 52w, INF); the database's default "
        "policy, named after it.",
    )
    port: int = Field(8086, ge=1, le=65535, description="InfluxDB HTTP API port on services.monitoring_db.")
    tls: bool = Field(
        True,
        description="HTTPS on that port, with a certificate the cluster CA (on services.ldap, the directory "
        "host) signs: Telegraf and Grafana verify it and send their passwords only inside TLS. false: plain HTTP, "
        "the agents' and Grafana's basic authentication readable on the cluster network.",
    )

    @field_validator("retention")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not DURATION.match(value):
            raise ValueError(f"{value!r} is not an InfluxDB duration such as 12h, 90d, 52w or INF")
        return value


class Grafana(Strict):
    host: Placement = Field(description="The one node Grafana runs on (management role)." + PLACED)
    port: int = Field(3000, ge=1, le=65535, description="Grafana's HTTP port.")
    datasource: str | None = Field(
        None,
        min_length=1,
        description="Name of the provisioned datasource. Default: NAME InfluxDB (or NAME Prometheus with "
        "backend prometheus), NAME the cluster's name in capitals.",
    )
    dashboards: list[Literal["status", "nodes", "admin"]] = Field(
        default_factory=lambda: list(DASHBOARDS),
        description="Dashboards provisioned: status (nodes up/down/drained, GPUs in use, jobs, top users, storage "
        "responsiveness), nodes (per-node CPU, memory, GPU, network), admin (thermal load and power; the age of "
        "each backup job's last good snapshot where there is a backup section).",
    )


PROM_DURATION = re.compile(r"^\d+[mhdwy]$")


class Prometheus(Strict):
    port: int = Field(9090, ge=1, le=65535, description="Prometheus' HTTP port on services.monitoring_db.")
    retention: str = Field(
        "90d", description="How long Prometheus keeps samples (its duration syntax: 12h, 90d, 52w, 1y)."
    )
    storage_path: StoragePath = Field(
        "/var/lib/prometheus/metrics2", description="Prometheus' time series database directory."
    )
    node_exporter_port: int = Field(
        9100, ge=1, le=65535, description="Port of the node exporter on every node (its cluster address only)."
    )
    alertmanager_port: int = Field(
        9093, ge=1, le=65535, description="Alertmanager's port, on the loopback of services.monitoring_db only."
    )
    tls: bool = Field(
        True,
        description="HTTPS and basic authentication on Prometheus' port, with a certificate the cluster CA (on "
        "services.ldap) signs; Grafana verifies it and logs in as user grafana, whose password is made on the "
        "server. false: plain HTTP, no login (anyone on the cluster network reads every metric).",
    )

    @field_validator("retention")
    @classmethod
    def _duration(cls, value: str) -> str:
        if not PROM_DURATION.match(value):
            raise ValueError(f"{value!r} is not a Prometheus duration such as 12h, 90d, 52w or 1y")
        return value


class Alerts(Strict):
    webhooks: list[Annotated[str, Field(pattern=r"^https?://[^\s/]+(/\S*)?$")]] = Field(
        default_factory=list,
        description="URLs Alertmanager posts every alert to (its webhook JSON), when it fires and when it resolves.",
    )
    email: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+$")]] = Field(
        default_factory=list, description="Addresses Alertmanager mails every alert to, when it fires and resolves."
    )
    smarthost: str | None = Field(
        None,
        pattern=r"^[^\s:]+:\d+$",
        description="HOST:PORT of the mail relay for `email` (STARTTLS when it offers it, no login).",
    )
    sender: str | None = Field(
        None,
        pattern=r"^[^@\s]+@[^@\s]+$",
        description="From: address of the alert mails. Default: alertmanager@ the cluster's domain.",
    )
    filesystem_full_percent: int = Field(
        90, ge=50, le=99, description="A file system used beyond this share of its size raises FilesystemNearlyFull."
    )
    group_wait_seconds: int = Field(
        30, ge=0, description="How long Alertmanager waits for more alerts of a group before its first message."
    )
    group_interval_seconds: int = Field(
        300,
        ge=1,
        description="How long Alertmanager waits before it tells a group's changes (new alerts, resolved ones).",
    )
    repeat_interval_hours: int = Field(4, ge=1, description="How often an alert still firing is sent again.")


class Monitoring(Strict):
    backend: Literal["influxdb", "prometheus"] = Field(
        "influxdb",
        description="influxdb: Telegraf on every node into InfluxDB (HAL's). prometheus: the node exporter on "
        "every node, the toolkit's collectors through its textfile directory, Prometheus and Alertmanager on "
        "services.monitoring_db, and the alert rules of monitoring.alerts.",
    )
    stack: Literal["telegraf-influxdb-grafana"] = Field(
        "telegraf-influxdb-grafana",
        description="Metrics pipeline of the influxdb backend (ignored with backend prometheus).",
    )
    interval_seconds: int = Field(
        60, gt=0, description="Collection interval of every input (Telegraf's agent interval)."
    )
    influxdb: InfluxDb = Field(default_factory=InfluxDb, description="The database on services.monitoring_db.")
    inputs: dict[Role, list[Name]] = Field(
        default_factory=dict,
        description="Telegraf inputs per node role: Telegraf's own (cpu, mem, system, disk, net, processes, "
        "nvidia_smi, infiniband) and the toolkit's collectors (slurm, bmc, gpu, storage_responsiveness). A node "
        "group runs the lists of all its roles (role, then `also`), each input once, unless inputs_by_group "
        "names it. Inputs that read GPUs (nvidia_smi, gpu) run only on groups whose hardware profile has GPUs: "
        "a CPU-only compute group takes the compute list without them. Not listed: the backup collector (the "
        "age of each backup job's last good snapshot), which runs on every host with backup jobs whenever "
        "there is a backup section.",
    )
    inputs_by_group: dict[Name, Annotated[list[Name], Field(min_length=1)]] = Field(
        default_factory=dict,
        description="Telegraf inputs of one node group, by the group's name: the group's whole list, in place "
        "of its roles' lists (more specific, so it wins; nothing is merged). For a group that differs from the "
        "rest of its role, e.g. compute nodes without a BMC the bmc collector could read.",
    )
    storage_probe_path: ProbePath = Field(
        "/home", description="Directory the storage_responsiveness collector lists (the users' homes)."
    )
    grafana: Grafana | None = Field(None, description="Grafana and its dashboards; None: no Grafana.")
    prometheus: Prometheus = Field(
        default_factory=Prometheus, description="The Prometheus server on services.monitoring_db (backend prometheus)."
    )
    alerts: Alerts | None = Field(
        None,
        description="Alert rules and where Alertmanager sends them (backend prometheus): node down or drained by "
        "the health check, a GPU fault, slurmctld or slurmdbd unreachable, a backup late, a pull node failed, late "
        "or changed by hand, a file system nearly full. None: no Alertmanager.",
    )

    @model_validator(mode="after")
    def _one_backend(self) -> "Monitoring":
        # The other backend's section is refused where it says something: a derived model
        # (the sandbox's model.json) writes every section out with its defaults, and loads again.
        if self.backend == "prometheus" and "influxdb" in self.model_fields_set and self.influxdb != InfluxDb():
            raise ValueError(
                "monitoring.influxdb configures the influxdb backend: leave it out with backend prometheus"
            )
        changed_prometheus = "prometheus" in self.model_fields_set and self.prometheus != Prometheus()
        if self.backend == "influxdb" and (changed_prometheus or self.alerts is not None):
            raise ValueError("monitoring.prometheus and monitoring.alerts need backend: prometheus")
        return self

    def listed_for(self, group: NodeGroup) -> list[str] | None:
        """The inputs listed for a node group, before its hardware is considered: its own list
        in inputs_by_group, else the lists of its roles (role first, then `also`), each input
        once; None where neither names it (no agent there)."""
        if group.name in self.inputs_by_group:
            return list(self.inputs_by_group[group.name])
        lists = [self.inputs[role] for role in group.roles if role in self.inputs]
        return list(dict.fromkeys(name for names in lists for name in names)) if lists else None

    def inputs_for(self, group: NodeGroup, gpus: int) -> list[str] | None:
        """The inputs Telegraf runs on a node group with `gpus` GPUs per node: those listed
        for it, less the ones that read GPUs where there are none; None: no agent there."""
        listed = self.listed_for(group)
        if listed is None:
            return None
        return [name for name in listed if gpus or name not in INPUTS or INPUTS[name].needs != "gpus"]

    def all_inputs(self) -> set[str]:
        """Every input named anywhere, by role or by group."""
        return {name for lists in (self.inputs, self.inputs_by_group) for names in lists.values() for name in names}


def measurements(inputs) -> dict[str, set[str]]:
    """measurement -> fields, over the inputs named (unknown names are skipped: a check reports them)."""
    out: dict[str, set[str]] = {}
    for name in inputs:
        spec = INPUTS.get(name)
        for meas, fields in spec.measurements.items() if spec else ():
            out.setdefault(meas, set()).update(fields)
    return out


def group_gpus(cluster: Cluster, group: NodeGroup) -> int:
    """GPUs per node of a group; a group without a hardware profile has none."""
    profile = cluster.profile_of(group)
    return profile.gpu_count if profile is not None else 0


def group_inputs(cluster: Cluster, group: NodeGroup) -> list[str] | None:
    """The inputs Telegraf runs on a node group (see Monitoring.inputs_for); None: no agent."""
    if cluster.monitoring is None:
        return None
    return cluster.monitoring.inputs_for(group, group_gpus(cluster, group))


def backup_collector_hosts(cluster: Cluster) -> list[str]:
    """The hosts that run the backup collector: each host of a backup job (backup.json's
    "host"), once, in the jobs' order. None without monitoring, and none where the backup's
    destination is not resolved (no backup.json is rendered; a check says why)."""
    if cluster.monitoring is None or not cluster.backup_destinations:
        return []
    return list(dict.fromkeys(job.host for job in cluster.backup_jobs))


def running_inputs(cluster: Cluster) -> set[str]:
    """Every input that runs on some node group (what the database will hold), and the backup
    collector where it runs."""
    names = {name for g in cluster.nodes for name in group_inputs(cluster, g) or ()}
    return names | ({"backup"} if backup_collector_hosts(cluster) else set())
