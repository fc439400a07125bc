"""Checks: monitoring (which Telegraf inputs run where, how often, and whether the dashboards
read only what the configured inputs write)."""

from __future__ import annotations

from ..findings import error, warning
from ..hostlist import nodeset
from ..model import Cluster, Role
from ..model.monitoring import INPUTS, producers
from . import check
from .common import did_you_mean, duplicates, nearest_host

MON = ("monitoring",)


def _gpu_groups(c: Cluster, role: Role) -> tuple[list[str], list[str]]:
    """Names of the role's node groups with GPUs, and without."""
    with_gpus, without = [], []
    for g in c.groups_with_role(role):
        profile = c.hardware.get(g.hardware)
        if profile is not None:
            (with_gpus if profile.gpu_count else without).append(g.name)
    return with_gpus, without


@check
def monitoring_inputs_known(c: Cluster):
    """Every input is Telegraf's or one of HAL's collectors, named once per role, on a role
    that has nodes."""
    m = c.monitoring
    if m is None:
        return
    for role, names in m.inputs.items():
        path = (*MON, "inputs", role.value)
        for i, name in enumerate(names):
            if name not in INPUTS:
                yield error((*path, i), f"unknown input {name!r}{did_you_mean(name, INPUTS)}; known: "
                            + ", ".join(sorted(INPUTS)))
        for again, first in duplicates(names):
            yield error((*path, again), f"input {names[again]!r} is listed twice (first at [{first}])")
        if not c.groups_with_role(role):
            yield warning(path, f"no node group has role {role.value}: these inputs run nowhere")


@check
def monitoring_inputs_fit_hardware(c: Cluster):
    """GPU inputs only where there are GPUs, InfiniBand counters only with a fabric, the Slurm
    collector exactly once: on the slurmctld host."""
    m = c.monitoring
    if m is None:
        return
    ctld = nodeset(c.services.slurmctld)[0] if c.services.slurmctld else None
    for role, names in m.inputs.items():
        path = (*MON, "inputs", role.value)
        for i, name in enumerate(names):
            spec = INPUTS.get(name)
            if spec is None:
                continue
            if spec.needs == "gpus":
                with_gpus, without = _gpu_groups(c, role)
                if not with_gpus and without:
                    yield error((*path, i), f"{name} reads GPUs, but no {role.value} node has any (groups "
                                + ", ".join(without) + "): remove it from this role")
                elif without:
                    yield warning((*path, i), f"{name} reads GPUs, but node groups " + ", ".join(without)
                                  + f" of role {role.value} have none: it will fail there every interval")
            elif spec.needs == "fabric" and c.fabric is None:
                yield error((*path, i), f"{name} reads InfiniBand port counters, but the description has no "
                            "fabric: remove it or describe the fabric")
            elif spec.needs == "slurm_controller":
                group = c.group_of(ctld) if ctld else None
                if ctld and group is None:
                    continue  # an unknown slurmctld host: services.slurmctld says so, once
                if group is None or not group.has(role):
                    yield error((*path, i), f"the {name} collector runs on the slurmctld host "
                                f"({ctld or 'none'}), which is not a {role.value} node: list it under the role "
                                "of that host")


@check
def monitoring_interval_fits_inputs(c: Cluster):
    """The interval is no shorter than any configured input needs for one run."""
    m = c.monitoring
    if m is None:
        return
    slow = sorted({(INPUTS[n].min_interval_seconds, n) for n in m.all_inputs() if n in INPUTS
                   and INPUTS[n].min_interval_seconds > m.interval_seconds})
    for seconds, name in slow:
        yield error((*MON, "interval_seconds"), f"interval {m.interval_seconds} s is shorter than the {name} input "
                    f"needs for one run ({seconds} s): raise interval_seconds to at least {seconds}")


@check
def monitoring_grafana_host(c: Cluster):
    """Grafana runs on one management node and reads the database on services.monitoring_db."""
    m = c.monitoring
    if m is None or m.grafana is None:
        return
    hosts = nodeset(m.grafana.host)
    path = (*MON, "grafana", "host")
    if len(hosts) != 1:
        yield error(path, f"Grafana runs on one node, not {len(hosts)} ({hosts})")
        return
    group = c.group_of(hosts[0])
    if group is None:
        yield error(path, f"{hosts[0]} is in no node group" + nearest_host(c, hosts))
    elif not group.has(Role.management):
        yield warning(path, f"{hosts[0]} is a {group.role.value} node; Grafana usually runs on a management node")
    if c.services.monitoring_db is None:
        yield error(("services", "monitoring_db"), "Grafana reads InfluxDB, but services.monitoring_db names no host")


@check
def monitoring_panels_have_inputs(c: Cluster):
    """Every dashboard panel reads a measurement and fields that a configured input writes."""
    m = c.monitoring
    if m is None or m.grafana is None:
        return
    from ..dashboards import dashboards

    written = m.measurements()
    for board in dashboards(c):
        name = board.uid.removeprefix("hal-")
        path = (*MON, "grafana", "dashboards", m.grafana.dashboards.index(name)) \
            if name in m.grafana.dashboards else (*MON, "grafana", "dashboards")
        for panel in board.panels:
            for q in panel.queries:
                missing = [f for f in q.fields if f not in written.get(q.measurement, ())]
                if not missing:
                    continue
                makers = producers(q.measurement)
                yield error(path, f"dashboard {name}, panel {panel.title!r} reads {q.measurement}."
                            + ",".join(missing) + ", which no configured input writes: add "
                            + (" or ".join(makers) if makers else "an input that writes it")
                            + " to monitoring.inputs of the role whose nodes it describes")
