"""The alert rules the model makes for the Prometheus backend (monitoring.alerts).

Each rule is data: its name, PromQL, how long it must hold, its severity and what it tells a
person. The renderer (hal_provision.render.prometheus) writes them as a Prometheus rule file, and
tests/unit/render/test_alert_rules.py runs `promtool test rules` on every one of them: each rule
has a case that makes it fire and one that keeps it quiet.

The metrics they read are the node exporter's and the toolkit's collectors' (their names follow
from INPUTS in hal_provision.model.monitoring: hal_<measurement>_<field>, the tag `job` as label
`job_name`), with the target labels every scrape adds: `host` (the node's name) and `group`.
The thresholds come from the model: the backup schedule (late after one and a half periods, as
the admin dashboard's panel), the deploy schedule (a pull node late after three periods), the
collection interval (how long a failure must last before it is a fact, not a missed scrape).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .dashboards import backup_late_hours
from .oncalendar import period_seconds

if TYPE_CHECKING:
    from . import Cluster

# The health check's checks that speak of GPUs (hal_provision/node/health/healthcheck.py).
GPU_CHECKS = ("gpus", "gpu_model", "gpu_faults", "dcgm")
# File systems that are not the nodes' disks (the disk input's ignore_fs, as Telegraf's).
NOT_DISKS = "tmpfs|devtmpfs|devfs|iso9660|overlay|aufs|squashfs|nsfs|ramfs|fuse.lxcfs"
# A pull node is late after this many periods of deploy.schedule; after this many hours where
# the schedule's period is not simple to tell.
PULL_LATE_PERIODS = 3
PULL_LATE_HOURS = 6


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_seconds: int
    severity: Literal["critical", "warning"]
    summary: str  # one line, with Prometheus' template {{ $labels.x }}
    description: str
    needs: str = ""  # what of the model it needs, for the tests' cases: "", gpus, accounting, backup, pull, health


def _for(cluster: Cluster, intervals: int) -> int:
    """`intervals` collection intervals, at least a minute: a fact, not one missed scrape."""
    return max(60, intervals * cluster.monitoring.interval_seconds)


def rules(cluster: Cluster) -> list[Alert]:
    """The alert rules of the cluster, in a fixed order; none without monitoring.alerts."""
    m = cluster.monitoring
    if m is None or m.backend != "prometheus" or m.alerts is None:
        return []
    a = m.alerts
    out = [
        Alert(
            "NodeUnreachable",
            'up{job="node"} == 0',
            _for(cluster, 2),
            "critical",
            "{{ $labels.host }} does not answer (node exporter)",
            "Prometheus could not scrape the node exporter of {{ $labels.host }} (group {{ $labels.group }}) for "
            "two collection intervals: the node is down, off the network, or its exporter stopped.",
        ),
    ]
    if cluster.controllers:
        out += [
            Alert(
                "SlurmNodeDown",
                "max by (node) (hal_slurm_node_down) == 1",
                _for(cluster, 2),
                "critical",
                "Slurm node {{ $labels.node }} is down",
                "slurmctld reports {{ $labels.node }} down (not responding, or set down): its jobs were requeued "
                "or lost and it takes none.",
            ),
            Alert(
                "SlurmctldUnreachable",
                'hal_collector_success{collector="slurm"} == 0 or hal_slurm_daemons_up{daemon="slurmctld"} == 0',
                _for(cluster, 2),
                "critical",
                "slurmctld does not answer on {{ $labels.host }}",
                "squeue and scontrol failed on the controller host for two collection intervals: no job can be "
                "submitted or scheduled.",
            ),
        ]
    if cluster.controllers and cluster.services.slurmdbd:
        out.append(
            Alert(
                "SlurmdbdUnreachable",
                'hal_slurm_daemons_up{daemon="slurmdbd"} == 0',
                _for(cluster, 2),
                "critical",
                "slurmdbd does not answer (asked from {{ $labels.host }})",
                "sacctmgr could not reach slurmdbd for two collection intervals: accounting records queue up in "
                "slurmctld, and limits and fair share stop being updated.",
                needs="accounting",
            )
        )
    if cluster.health is not None and cluster.health.program == "hal":
        out += [
            Alert(
                "NodeDrainedByHealthCheck",
                "hal_healthcheck_failed == 1",
                0,
                "critical",
                "{{ $labels.host }} drained by the health check: {{ $labels.check }} failed",
                "The health check found {{ $labels.host }} unlike the model ({{ $labels.check }}) and drained it in "
                "Slurm; it resumes the node itself once every check passes (hal-healthcheck --no-slurm on the node "
                "says what is wrong).",
                needs="health",
            ),
            Alert(
                "GpuFault",
                f'hal_healthcheck_failed{{check=~"{"|".join(GPU_CHECKS)}"}} == 1',
                0,
                "critical",
                "GPU fault on {{ $labels.host }} ({{ $labels.check }})",
                "The health check's {{ $labels.check }} check failed on {{ $labels.host }}: a GPU is missing, "
                "unlike the model, or reports faults (ECC, row remapping, XID, NVLink, PCIe).",
                needs="health",
            ),
        ]
    if cluster.backup_jobs and cluster.backup_destinations:
        late = round(backup_late_hours(cluster) * 3600)
        out.append(
            Alert(
                "BackupLate",
                f"max by (job_name) (hal_backup_age_s) > {late}",
                0,
                "warning",
                "Backup {{ $labels.job_name }} is late",
                f"The last good snapshot of backup job {{{{ $labels.job_name }}}} is older than {late / 3600:g} h "
                f"(one and a half periods of the schedule {cluster.backup.schedule}).",
                needs="backup",
            )
        )
        jobs = list(dict.fromkeys(j.name for j in cluster.backup_jobs))
        out.append(
            Alert(
                "BackupMissing",
                " or ".join(f'absent(hal_backup_age_s{{job_name="{job}"}})' for job in jobs),
                late,
                "warning",
                "Backup {{ $labels.job_name }} has no good snapshot",
                f"No good snapshot of backup job {{{{ $labels.job_name }}}} has been reported for {late / 3600:g} h: "
                "the job never succeeded, or its host stopped reporting.",
                needs="backup",
            )
        )
    if cluster.deploy_pull:
        period = period_seconds(cluster.deploy.schedule) if cluster.deploy.schedule else None
        late = PULL_LATE_PERIODS * period if period else PULL_LATE_HOURS * 3600
        out += [
            Alert(
                "PullConvergeFailed",
                "hal_converge_failed == 1",
                0,
                "critical",
                "{{ $labels.host }}'s pull converge failed ({{ $labels.state }})",
                "The node's last converge from its release did not succeed; it stays drained until a converge "
                "does (hal-provision fleet shows the failed task).",
                needs="pull",
            ),
            Alert(
                "PullConvergeLate",
                f"time() - hal_converge_finished > {late}",
                0,
                "warning",
                "{{ $labels.host }} has not converged for a while",
                f"The node's last converge finished more than {late / 3600:g} h ago: its timer stopped or its "
                "runs hang.",
                needs="pull",
            ),
            Alert(
                "PullNodeDrift",
                "hal_converge_drift == 1",
                0,
                "warning",
                "{{ $labels.host }} was changed by hand",
                "The node's last converge changed it without a new release: something or somebody had changed "
                "the node since its previous converge, which put it back.",
                needs="pull",
            ),
        ]
    out += [
        Alert(
            "FilesystemNearlyFull",
            f'100 * (1 - node_filesystem_avail_bytes{{fstype!~"{NOT_DISKS}"}} '
            f'/ node_filesystem_size_bytes{{fstype!~"{NOT_DISKS}"}}) > {a.filesystem_full_percent}',
            _for(cluster, 5),
            "warning",
            "{{ $labels.mountpoint }} on {{ $labels.host }} is nearly full",
            f"More than {a.filesystem_full_percent} % of {{{{ $labels.mountpoint }}}} on {{{{ $labels.host }}}} is "
            "used.",
        ),
        Alert(
            "CollectorFailing",
            'hal_collector_success{collector!="slurm"} == 0',
            _for(cluster, 3),
            "warning",
            "The {{ $labels.collector }} collector fails on {{ $labels.host }}",
            "One of the toolkit's collectors has failed for three collection intervals: its metrics are missing "
            "(journalctl -u hal-metrics on the node says why).",
        ),
    ]
    return out
