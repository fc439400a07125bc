"""Which jobs a change would lose or strand, and which only see a daemon restart.

Blocking (the plan exits 1): a running job on a node that leaves slurm.conf, or on a node whose
definition (CPUs, memory, GRES, ...) changes while its slurmd restarts; a pending job whose
partition or QOS leaves the model, or that asks for more than a lowered limit grants: time
(partition MaxTime, QOS MaxWall), memory or GPUs per node, nodes in the partition, GPUs per
user of its QOS. Only limits the change lowers count: a job that already could not run is not
this change's doing. A running job on a node whose slurmd merely restarts is a note: Slurm
keeps running jobs across a slurmd restart.
"""

from __future__ import annotations

from dataclasses import dataclass

from .accounting import QosLimits, qos_limits
from .effects import SlurmEffect
from ..hostlist import fold_or_dash
from .jobs import Job
from .slurm import SlurmConf, clock, megabytes

SLURM_CONF = "files/etc/slurm/slurm.conf"
ACCOUNTING = "files/etc/hal-provision/slurm-accounting.json"


@dataclass(frozen=True)
class Impact:
    job: Job
    blocking: bool
    why: str
    kind: str  # removed-node, redefined-node, restart, partition, qos, time, memory, gpus, nodes
    hosts: tuple[str, ...] = ()  # the nodes to drain for it (running jobs)
    limit: str = ""  # the new limit a pending job exceeds, in Slurm's format


def assess(jobs: list[Job], old: dict[str, str], new: dict[str, str], slurm: SlurmEffect | None) -> list[Impact]:
    old_conf = slurm.old if slurm else SlurmConf.parse(old.get(SLURM_CONF, ""))
    new_conf = slurm.new if slurm else SlurmConf.parse(new.get(SLURM_CONF, ""))
    limits = _Limits(old_conf, new_conf, qos_limits(old.get(ACCOUNTING)), qos_limits(new.get(ACCOUNTING)))
    out: list[Impact] = []
    for job in sorted(jobs, key=lambda j: j.job_id):
        if job.active and slurm is not None:
            found = _running(job, slurm)
        elif job.pending:
            found = limits.pending(job)
        else:
            found = None
        if found is not None:
            out.append(found)
    return out


def _running(job: Job, s: SlurmEffect) -> Impact | None:
    hosts = job.hosts()
    removed = sorted(set(hosts) & s.removed)
    if removed:
        return Impact(
            job,
            True,
            f"runs on {fold_or_dash(removed)}, which leaves the cluster: the job would be lost",
            "removed-node",
            tuple(removed),
        )
    redefined = sorted(h for h in hosts if h in s.redefined)
    if redefined and s.restart:
        change = ", ".join(s.redefined[redefined[0]])
        return Impact(
            job,
            True,
            f"runs on {fold_or_dash(redefined)}, whose slurmd restarts with a new definition ({change})",
            "redefined-node",
            tuple(redefined),
        )
    restarting = sorted(set(hosts) & s.restarting)
    if restarting:
        return Impact(job, False, f"slurmd restarts on {fold_or_dash(restarting)}; the job keeps running", "restart")
    return None


class _Limits:
    """A pending job against OLD's and NEW's limits."""

    def __init__(self, old: SlurmConf, new: SlurmConf, old_qos: dict[str, QosLimits], new_qos: dict[str, QosLimits]):
        self.old, self.new, self.old_qos, self.new_qos = old, new, old_qos, new_qos

    def pending(self, job: Job) -> Impact | None:
        if job.qos and job.qos in self.old_qos and job.qos not in self.new_qos:
            return Impact(job, True, f"QOS {job.qos} leaves the model: its associations no longer allow it", "qos")
        partitions = [p for p in job.partition.split(",") if p]
        kept = [p for p in partitions if p in self.new.partitions]
        if partitions and not kept:
            if any(p in self.old.partitions for p in partitions):
                return Impact(job, True, f"partition {job.partition} leaves the cluster", "partition")
            return None
        problems = [self._problem(job, p) for p in kept]
        if problems and all(problems):
            return problems[0]  # stranded only if no partition it may run in still fits it
        return None

    def _problem(self, job: Job, partition: str) -> Impact | None:
        def lowered(new, old) -> bool:  # a limit that exists now and is below what was there
            return new is not None and (old is None or new < old)

        tl = job.time_limit
        max_time, was = self.new.max_time(partition), self.old.max_time(partition)
        if tl is not None and lowered(max_time, was) and tl > max_time:
            return Impact(
                job,
                True,
                f"asks for {clock(tl)}; partition {partition}'s MaxTime drops to {clock(max_time)} (was {clock(was)})",
                "time",
                limit=clock(max_time),
            )
        for name in filter(None, [job.qos, self.new.partition_qos(partition)]):
            q, q_was = self.new_qos.get(name), self.old_qos.get(name)
            if q is None:
                continue
            wall_was = q_was.max_wall if q_was else None
            if tl is not None and lowered(q.max_wall, wall_was) and tl > q.max_wall:
                return Impact(
                    job,
                    True,
                    f"asks for {clock(tl)}; QOS {name}'s MaxWall drops to {clock(q.max_wall)} (was {clock(wall_was)})",
                    "time",
                    limit=clock(q.max_wall),
                )
            gpus_was = q_was.max_gpus_per_user if q_was else None
            if job.total_gpus() and lowered(q.max_gpus_per_user, gpus_was) and job.total_gpus() > q.max_gpus_per_user:
                return Impact(
                    job,
                    True,
                    f"asks for {job.total_gpus()} GPUs; QOS {name} allows {q.max_gpus_per_user} "
                    f"per user (was {gpus_was if gpus_was is not None else 'no limit'})",
                    "gpus",
                )
        memory = job.memory_mb_per_node()
        cap, cap_was = self.new.memory_cap(partition), self.old.memory_cap(partition)
        if memory and lowered(cap, cap_was) and memory > cap:
            return Impact(
                job,
                True,
                f"asks for {megabytes(memory)} per node; partition {partition}'s nodes offer "
                f"{megabytes(cap)} (was {megabytes(cap_was) if cap_was else 'more'})",
                "memory",
            )
        gpus, gpus_was = self.new.gpu_cap(partition), self.old.gpu_cap(partition)
        if job.gpus_per_node and gpus < gpus_was and job.gpus_per_node > gpus:
            return Impact(
                job,
                True,
                f"asks for {job.gpus_per_node} GPUs per node; partition {partition}'s nodes "
                f"have {gpus} (was {gpus_was})",
                "gpus",
            )
        count, count_was = len(self.new.partition_hosts(partition)), len(self.old.partition_hosts(partition))
        if count < count_was and job.node_count > count:
            return Impact(
                job,
                True,
                f"asks for {job.node_count} nodes; partition {partition} has {count} (was {count_was})",
                "nodes",
            )
        return None
