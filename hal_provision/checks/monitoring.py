"""Checks: monitoring (which Telegraf inputs run where, how often, and whether the dashboards
read only what the inputs that run somewhere write)."""

from __future__ import annotations

from ..findings import error, warning
from ..hostlist import nodeset
from ..model import Cluster, Role
from ..model.slurm import version_key
from ..model.monitoring import (
    INPUTS,
    SLURMCTLD_METRICS_FROM,
    group_gpus,
    listable,
    measurements,
    producers,
    running_inputs,
)
from . import check
from .common import did_you_mean, duplicates, nearest_host

MON = ("monitoring",)


def _lists(m) -> list[tuple[tuple, list[str]]]:
    """Every input list with its dotted path: per role, then per group."""
    return [((*MON, "inputs", role.value), names) for role, names in m.inputs.items()] + [
        ((*MON, "inputs_by_group", group), names) for group, names in m.inputs_by_group.items()
    ]


@check
def monitoring_inputs_known(c: Cluster):
    """Every input is Telegraf's or one of the toolkit's collectors that may be listed, named
    once per list, on a role that has nodes or a node group that exists."""
    m = c.monitoring
    if m is None:
        return
    known = sorted(name for name in INPUTS if listable(name))
    for path, names in _lists(m):
        for i, name in enumerate(names):
            if name not in INPUTS:
                yield error(
                    (*path, i), f"unknown input {name!r}{did_you_mean(name, known)}; known: " + ", ".join(known)
                )
            elif not listable(name):
                yield error(
                    (*path, i),
                    f"the {name} collector is not listed: it runs on every host with backup "
                    "jobs whenever the description has a backup section; remove it from this list",
                )
        for again, first in duplicates(names):
            yield error((*path, again), f"input {names[again]!r} is listed twice (first at [{first}])")
    for role in m.inputs:
        if not c.groups_with_role(role):
            yield warning(
                (*MON, "inputs", role.value), f"no node group has role {role.value}: these inputs run nowhere"
            )
    groups = [g.name for g in c.nodes]
    for group in m.inputs_by_group:
        if group not in groups:
            yield error(
                (*MON, "inputs_by_group", group),
                f"no node group is named {group!r}{did_you_mean(group, groups)}; groups: " + ", ".join(groups),
            )


@check
def monitoring_inputs_fit_hardware(c: Cluster):
    """InfiniBand counters only with a fabric, the Slurm collector exactly once: on the slurmctld
    host, and a group's own list names GPU inputs only where the group has GPUs. (A role's GPU
    inputs run only on its groups with GPUs: nothing to report there.)"""
    m = c.monitoring
    if m is None:
        return
    ctld = c.controllers[0] if c.services.slurmctld else None
    ctld_group = c.group_of(ctld) if ctld else None
    by_name = {g.name: g for g in c.nodes}
    for path, names in _lists(m):
        group = by_name.get(path[-1]) if path[1] == "inputs_by_group" else None
        for i, name in enumerate(names):
            spec = INPUTS.get(name)
            if spec is None:
                continue
            if spec.needs == "gpus" and group is not None and not group_gpus(c, group):
                yield error(
                    (*path, i),
                    f"{name} reads GPUs, but the nodes of group {group.name} have none: "
                    "remove it from the group's list",
                )
            elif spec.needs == "fabric" and c.fabric is None:
                yield error(
                    (*path, i),
                    f"{name} reads InfiniBand port counters, but the description has no "
                    "fabric: remove it or describe the fabric",
                )
            elif spec.needs == "slurm_controller" and ctld and ctld_group is None:
                continue  # an unknown slurmctld host: services.slurmctld says so, once
            elif spec.needs == "slurm_controller" and path[1] == "inputs":
                role = path[-1]
                if ctld_group is None or not ctld_group.has(Role(role)):
                    yield error(
                        (*path, i),
                        f"the {name} collector runs on the slurmctld host "
                        f"({ctld or 'none'}), which is not a {role} node: list it under the role "
                        "of that host",
                    )
            elif spec.needs == "slurm_controller" and group is not None and group is not ctld_group:
                yield error(
                    (*path, i),
                    f"the {name} collector runs on the slurmctld host ({ctld or 'none'}), "
                    f"which is not in group {group.name}: list it for the group of that host",
                )


@check
def monitoring_interval_fits_inputs(c: Cluster):
    """The interval is no shorter than any configured input needs for one run (the backup
    collector's included)."""
    m = c.monitoring
    if m is None:
        return
    slow = sorted(
        {
            (INPUTS[n].min_interval_seconds, n)
            for n in m.all_inputs() | running_inputs(c)
            if n in INPUTS and INPUTS[n].min_interval_seconds > m.interval_seconds
        }
    )
    for seconds, name in slow:
        yield error(
            (*MON, "interval_seconds"),
            f"interval {m.interval_seconds} s is shorter than the {name} input "
            f"needs for one run ({seconds} s): raise interval_seconds to at least {seconds}",
        )


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
def monitoring_tls_has_a_ca(c: Cluster):
    """The database's certificate (InfluxDB's or Prometheus') is signed by the cluster CA, which
    the directory host keeps."""
    m = c.monitoring
    if m is None or c.services.monitoring_db is None or c.services.ldap is not None:
        return
    if m.backend == "influxdb" and m.influxdb.tls:
        yield error(
            (*MON, "influxdb", "tls"),
            "InfluxDB over HTTPS needs the cluster CA, which lives on the "
            "directory host, but services.ldap names no host: place the directory (services.ldap) or set "
            "monitoring.influxdb.tls: false (the agents' passwords then cross the network in clear text)",
        )
    if m.backend == "prometheus" and m.prometheus.tls:
        yield error(
            (*MON, "prometheus", "tls"),
            "Prometheus over HTTPS needs the cluster CA, which lives on the directory host, but services.ldap names "
            "no host: place the directory (services.ldap) or set monitoring.prometheus.tls: false (then anyone on "
            "the cluster network reads the metrics, without a login)",
        )


@check
def monitoring_prometheus_needs(c: Cluster):
    """The Prometheus backend has its server's host; its alerts go somewhere, mail through a
    relay; slurmctld's own metrics are not turned off by PrivateData unawares."""
    m = c.monitoring
    if m is None or m.backend != "prometheus":
        return
    if c.services.monitoring_db is None:
        yield error(
            ("services", "monitoring_db"),
            "monitoring.backend prometheus runs Prometheus on services.monitoring_db, which names no host",
        )
    a = m.alerts
    if a is not None and not a.webhooks and not a.email:
        yield warning(
            (*MON, "alerts"), "alerts with neither webhooks nor email: Alertmanager keeps them and tells nobody"
        )
    if a is not None and a.email and a.smarthost is None:
        yield error(
            (*MON, "alerts", "smarthost"), "alerts.email needs the mail relay that sends it: smarthost: HOST:PORT"
        )
    if "PrivateData" in c.slurm.extra and version_key(c.slurm.version) >= version_key(SLURMCTLD_METRICS_FROM):
        yield warning(
            ("slurm", "extra", "PrivateData"),
            f"slurmctld serves no metrics while PrivateData is set (Slurm {SLURMCTLD_METRICS_FROM} and later): "
            "Prometheus scrapes only the toolkit's Slurm collector, whose view PrivateData limits too",
        )
    if a is not None and c.controllers and "slurm" not in m.all_inputs():
        yield warning(
            (*MON, "inputs"),
            "no input list names the slurm collector: the alerts for down Slurm nodes, slurmctld and slurmdbd "
            "read it and stay silent; list it for the slurmctld host's role",
        )


@check
def monitoring_panels_have_inputs(c: Cluster):
    """Every dashboard panel reads a measurement and fields that a configured input writes."""
    m = c.monitoring
    if m is None or m.grafana is None:
        return
    from ..model.dashboards import dashboards

    written = measurements(running_inputs(c))
    for board in dashboards(c):
        name = board.uid.removeprefix("hal-")
        path = (
            (*MON, "grafana", "dashboards", m.grafana.dashboards.index(name))
            if name in m.grafana.dashboards
            else (*MON, "grafana", "dashboards")
        )
        for panel in board.panels:
            for q in panel.queries:
                missing = [f for f in q.fields if f not in written.get(q.measurement, ())]
                if not missing:
                    continue
                makers = producers(q.measurement)
                yield error(
                    path,
                    f"dashboard {name}, panel {panel.title!r} reads {q.measurement}."
                    + ",".join(missing)
                    + ", which no configured input writes: add "
                    + (" or ".join(makers) if makers else "an input that writes it")
                    + " to monitoring.inputs of the role whose nodes it describes",
                )
