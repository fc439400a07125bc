"""HAL's Grafana dashboards as data, generated from the model: status, nodes and admin.

Pure specs, no Grafana library: the semantic checks read them (every query names the
measurement, fields and tags it reads, to compare with the inputs the model configures), the
renderer (hal_provision.render.grafana) turns them into dashboard JSON, and
`hal-provision dashboards` prints them. One list of panels serves both monitoring backends:
every query is written twice, in InfluxQL (backend influxdb) and in PromQL (backend
prometheus), by the same builder, so the two dashboards cannot drift apart.

InfluxQL queries are raw InfluxQL for InfluxDB 1.6 with Grafana's macros `$timeFilter` (the
dashboard's time range) and `$__interval` (one bucket; every panel's minimum interval is the
collection interval, so a bucket holds at least one collection). `concrete` substitutes both, to
run a query by hand or in a test. Three shapes recur:

* per series: mean/max of a field per bucket and host (or GPU, sensor);
* sum of the latest: a sum over many series (nodes, users) is taken over each series' last()
  value per bucket in a subquery, so a bucket spanning several collections counts each series
  once, not once per collection (rates of counters likewise: per series, then summed);
* now: the latest value per series over the last two collection intervals, whatever the
  dashboard's range (nodes reporting, tables of running jobs): a bucket that has just begun
  would miss the hosts that have not reported in it yet.

PromQL queries read the node exporter's metrics where Telegraf's built-in inputs would run and
the toolkit's collectors under the names hal_provision.node.monitoring.openmetrics gives them
(hal_<measurement>_<field>; tag `job` as label `job_name`), selecting hosts by the `host` label
every scrape adds, with the same regular expressions (RE2 in both languages). Grafana's macros
`$__interval` (one step), `$__rate_interval` (a window rate() can rely on: at least four
scrapes) and `$__range` may appear; `concrete_promql` substitutes them as Grafana would. The
same three shapes: `avg`/`max_over_time` per step and series; sums over `max by` the series'
own labels (the Slurm collector's series may come from more than one host: each counts once),
rates likewise; now: an instant query (Query.instant) over `last_over_time` of the last two
collection intervals, or `up` for the heartbeat. Where one InfluxQL query selects several
fields (columns), its PromQL joins one expression per field with `or`, each series labelled
`column` with the field's name (COLUMN; InfluxQL's $col).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from ClusterShell.NodeSet import NodeSet

from ..hostlist import expand, fold, nodeset, pieces, union_shared
from ..node.monitoring.openmetrics import label_name, metric_name
from . import Cluster, NodeGroup, Role
from .monitoring import backup_collector_hosts, group_gpus, group_inputs
from .oncalendar import period_seconds

Kind = Literal["stat", "timeseries", "table", "bargauge", "gauge"]

# A backup is late past this, where the schedule's period is not simple to tell (36 h: a
# nightly run missed, or half a day late).
BACKUP_LATE_HOURS = 36.0
# A running job's state tag from the Slurm collector, in any case (squeue prints RUNNING).
RUNNING = "/^(?i)running$/"
NOT_LOOPBACK = "\"interface\" != 'lo'"
# The label naming the field of each series where one PromQL query returns several (InfluxQL's $col).
COLUMN = "column"


@dataclass(frozen=True)
class Query:
    ref_id: str
    influxql: str  # backend influxdb
    promql: str  # backend prometheus: the same question, of the same data
    measurement: str  # what the query reads, for the checks: one measurement,
    fields: tuple[str, ...]  # these of its fields,
    tags: tuple[str, ...]  # and these tags (filtered on or grouped by; "host" is every point's)
    alias: str = ""  # Grafana's series name pattern ($tag_host, $col)
    format: Literal["time_series", "table"] = "time_series"
    instant: bool = False  # the latest values now, whatever the dashboard's range (no time buckets)

    def text(self, backend: str) -> str:
        """The query in the language of a monitoring backend (monitoring.backend)."""
        return self.promql if backend == "prometheus" else self.influxql

    @property
    def legend(self) -> str:
        """The alias as Grafana's legendFormat of the PromQL query: $tag_X as {{label}} (the
        label the tag becomes: job -> job_name), $col as {{column}}."""
        legend = self.alias.replace("$col", "{{" + COLUMN + "}}")
        return re.sub(r"\$tag_(\w+)", lambda m: "{{" + _label(m.group(1)) + "}}", legend)


@dataclass(frozen=True)
class Panel:
    title: str
    kind: Kind
    unit: str  # Grafana unit id: percent, Bps, celsius, watt, ms, none, ...
    description: str
    queries: tuple[Query, ...]
    width: int = 12  # of Grafana's 24 grid columns; panels fill rows left to right
    height: int = 8
    max: float | None = None
    alert_at: float | None = None  # the value from which the panel shows red
    no_value: str | None = None  # shown when the query returns nothing
    sort_by: str = ""  # tables: the column shown largest first
    field_units: tuple[tuple[str, str], ...] = ()  # (column, unit) where a column's unit is not `unit`


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...]


# ---- the model's view ---------------------------------------------------------------------------


def gpu_groups(cluster: Cluster) -> list[NodeGroup]:
    """Node groups whose hardware profile has GPUs."""
    return [g for g in cluster.nodes if group_gpus(cluster, g)]


def gpu_hosts(cluster: Cluster) -> NodeSet:
    """The nodes with GPUs (a shared NodeSet: never change it)."""
    return union_shared(g.hosts for g in gpu_groups(cluster))


def slurm_gpus(cluster: Cluster) -> int:
    """GPUs of the Slurm nodes (every compute group): the most that jobs can hold."""
    total = 0
    for g in cluster.groups_with_role(Role.compute):
        total += group_gpus(cluster, g) * len(nodeset(g.hosts))
    return total


def groups_with_input(cluster: Cluster, name: str) -> list[NodeGroup]:
    """Node groups that run input `name` (monitoring.group_inputs: a group's own list or its
    roles', GPU inputs only where there are GPUs); every group when none does (the checks
    report the panel that reads it)."""
    return [g for g in cluster.nodes if name in (group_inputs(cluster, g) or ())] or list(cluster.nodes)


def backup_late_hours(cluster: Cluster) -> float:
    """The age (hours) from which a backup job's last good snapshot is late: one and a half
    periods of backup.schedule where that is a simple form (oncalendar.period_seconds), else
    BACKUP_LATE_HOURS."""
    period = period_seconds(cluster.backup.schedule) if cluster.backup is not None else None
    return 1.5 * period / 3600 if period else BACKUP_LATE_HOURS


def reporting_hosts(cluster: Cluster) -> NodeSet:
    """The nodes expected to report: those whose role runs the `system` input (each node's
    heartbeat). A shared NodeSet: never change it."""
    return union_shared(g.hosts for g in groups_with_input(cluster, "system"))


# ---- host regexes ---------------------------------------------------------------------------------


def host_regex(hosts: NodeSet | str) -> str:
    """An anchored regular expression matching exactly `hosts` (a NodeSet or a hostlist
    expression), in Go RE2 syntax (InfluxQL's), compact for ranges: hal[01-16] ->
    ^(?:hal(?:0[1-9]|1[0-6]))$."""
    return _expression_regex(hosts if isinstance(hosts, str) else fold(hosts))


def _groups_regex(groups: list[NodeGroup]) -> str:
    """host_regex of the groups' hosts, from their expressions: no folding of large sets."""
    return _expression_regex(",".join(g.hosts for g in groups))


@lru_cache(maxsize=64)
def _expression_regex(expr: str) -> str:
    parts = []
    for part in pieces(expr):
        if "[" not in part:  # one name
            parts.append(re.escape(part))
            continue
        m = re.fullmatch(r"([^\[\]]*)\[([0-9,\-]+)\]([^\[\]]*)", part)
        if m is None:  # several index dimensions (rack[1-2]n[1-4]): list the names
            parts.extend(re.escape(h) for h in expand(part))
            continue
        prefix, ranges, suffix = m.groups()
        alternatives = [alt for r in ranges.split(",") for alt in _range_regex(r)]
        parts.append(re.escape(prefix) + _alt(alternatives) + re.escape(suffix))
    return "^" + _alt(parts, group=True) + "$"


def _range_regex(text: str) -> list[str]:
    """Alternatives matching the indexes of one ClusterShell range, '07', '01-16' or '8-120'."""
    first, _, last = text.partition("-")
    last = last or first
    pad = len(first) if len(first) > 1 and first.startswith("0") else 0
    lo, hi = int(first), int(last)
    out = []
    for digits in range(len(str(lo)), len(str(hi)) + 1):  # numbers of one natural width at a time
        a, b = max(lo, 10 ** (digits - 1) if digits > 1 else 0), min(hi, 10**digits - 1)
        if a <= b:
            width = max(pad, digits)
            out.extend(_fixed_width(str(a).zfill(width), str(b).zfill(width)))
    return out


def _fixed_width(lo: str, hi: str) -> list[str]:
    """Alternatives matching every digit string of len(lo) from lo to hi."""
    if lo == hi:
        return [lo]
    if len(lo) == 1:
        return [f"[{lo}-{hi}]"]
    if lo[0] == hi[0]:
        return [lo[0] + _alt(_fixed_width(lo[1:], hi[1:]))]
    rest = len(lo) - 1
    any_rest = r"\d" if rest == 1 else rf"\d{{{rest}}}"
    out, start, end, tail = [], int(lo[0]), int(hi[0]), None
    if lo[1:] != "0" * rest:
        out.append(lo[0] + _alt(_fixed_width(lo[1:], "9" * rest)))
        start += 1
    if hi[1:] != "9" * rest:
        tail = hi[0] + _alt(_fixed_width("0" * rest, hi[1:]))
        end -= 1
    if start <= end:
        out.append((str(start) if start == end else f"[{start}-{end}]") + any_rest)
    if tail:
        out.append(tail)
    return out


def _alt(alternatives: list[str], group: bool = False) -> str:
    if len(alternatives) == 1 and not group:
        return alternatives[0]
    return "(?:" + "|".join(alternatives) + ")"


# ---- InfluxQL ------------------------------------------------------------------------------------


def concrete(influxql: str, window_seconds: int = 900, *, interval_seconds: int) -> str:
    """The query as Grafana sends it for the last `window_seconds`, buckets of the interval."""
    return influxql.replace("$timeFilter", f"time > now() - {window_seconds}s").replace(
        "$__interval", f"{interval_seconds}s"
    )


def _q(name: str) -> str:
    return f'"{name}"'


def _where(*conditions: str) -> str:
    return " AND ".join(c for c in conditions if c)


def _in_groups(groups: list[NodeGroup]) -> str:
    return f'"host" =~ /{_groups_regex(groups)}/'


def _per_series(selects: str, measurement: str, where: str, by: tuple[str, ...]) -> str:
    """Per bucket and per series of `by` (the first shape)."""
    group = ", ".join(["time($__interval)", *map(_q, by)])
    return f"SELECT {selects} FROM {_q(measurement)} WHERE {_where('$timeFilter', where)} GROUP BY {group} fill(none)"


def _sum_of_latest(
    fields: tuple[str, ...], measurement: str, where: str, per: tuple[str, ...], by: tuple[str, ...] = ()
) -> str:
    """Per bucket (and per series of `by`): the sum over the series of `per` of each one's
    last value in the bucket (the second shape)."""
    inner = ", ".join(f"last({_q(f)}) AS {_q(f)}" for f in fields)
    return _sum_per_bucket(fields, inner, measurement, where, per, by)


def _sum_of_rates(counters: dict[str, str], measurement: str, where: str, per: tuple[str, ...], scale: int = 1) -> str:
    """Per bucket and host: the sum over the series of `per` of each counter's rate per second
    (`counters`: name shown -> field; `scale`: units of the counter in bytes)."""
    factor = f"{scale} * " if scale != 1 else ""
    inner = ", ".join(
        f"{factor}non_negative_derivative(max({_q(field)}), 1s) AS {_q(name)}" for name, field in counters.items()
    )
    return _sum_per_bucket(tuple(counters), inner, measurement, where, per, ("host",))


def _sum_per_bucket(
    columns: tuple[str, ...], inner: str, measurement: str, where: str, per: tuple[str, ...], by: tuple[str, ...]
) -> str:
    """Per bucket and series of `by`: the sums of the `columns` the subquery `inner` selects per
    bucket and series of `per`."""
    outer = ", ".join(f"sum({_q(column)}) AS {_q(column)}" for column in columns)
    inner_group = ", ".join(["time($__interval)", *map(_q, per)])
    outer_group = ", ".join(["time($__interval)", *map(_q, by)])
    return (
        f"SELECT {outer} FROM (SELECT {inner} FROM {_q(measurement)} WHERE {_where('$timeFilter', where)} "
        f"GROUP BY {inner_group}) WHERE $timeFilter GROUP BY {outer_group} fill(none)"
    )


def _now(interval: int) -> str:
    return f"time > now() - {2 * interval}s"


def _latest_now(fields: tuple[str, ...], measurement: str, where: str, per: tuple[str, ...], interval: int) -> str:
    """The latest value of each series of `per` over the last two intervals (the third shape)."""
    selects = ", ".join(f"last({_q(f)}) AS {_q(f)}" for f in fields)
    return (
        f"SELECT {selects} FROM {_q(measurement)} WHERE {_where(_now(interval), where)} "
        f"GROUP BY {', '.join(map(_q, per))}"
    )


# ---- PromQL --------------------------------------------------------------------------------------


def concrete_promql(
    promql: str, window_seconds: int = 900, *, interval_seconds: int, scrape_seconds: int | None = None
) -> str:
    """The query as Grafana sends it for the last `window_seconds` in steps of the interval:
    $__interval the step, $__range the window, $__rate_interval Grafana's max($__interval +
    scrape interval, 4 scrape intervals) (the scrape interval: the datasource's timeInterval, the
    collection interval; by default the step's)."""
    scrape = scrape_seconds or interval_seconds
    rate = max(interval_seconds + scrape, 4 * scrape)
    return (
        promql.replace("$__rate_interval", f"{rate}s")
        .replace("$__interval", f"{interval_seconds}s")
        .replace("$__range", f"{window_seconds}s")
    )


def _label(tag: str) -> str:
    """The Prometheus label of a collector's tag; `host` is the scrape's target label."""
    return label_name(tag) or tag


def _string(text: str) -> str:
    """A PromQL string literal (its escapes are Go's: a regex's backslash doubled)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _selector(metric: str, *matchers: str) -> str:
    inner = ", ".join(m for m in matchers if m)
    return f"{metric}{{{inner}}}" if inner else metric


def _hosts(groups: list[NodeGroup]) -> str:
    """The matcher of the groups' hosts (PromQL anchors regexes itself; the anchors do no harm)."""
    return f"host=~{_string(_groups_regex(groups))}"


def _by(labels: tuple[str, ...]) -> str:
    return f"by ({', '.join(labels)})"


def _prom_per_series(aggregate: str, metric: str, matchers: tuple[str, ...], by: tuple[str, ...]) -> str:
    """Per step and series of `by`: the mean (avg) or max of a gauge over each step."""
    return f"{aggregate} {_by(by)} ({aggregate}_over_time({_selector(metric, *matchers)}[$__interval]))"


def _prom_sum_of_latest(metric: str, per: tuple[str, ...], by: tuple[str, ...] = ()) -> str:
    """Per step (and series of `by`): the sum over the series of `per` of each one's latest
    value, each series once however many hosts report it."""
    outer = f"sum {_by(by)}" if by else "sum"
    return f"{outer} (max {_by(per)} ({metric}))"


def _prom_sum_of_rates(metric: str, *matchers: str) -> str:
    """Per step and host: the sum of the counter's rates per second over its series."""
    return f"sum by (host) (rate({_selector(metric, *matchers)}[$__rate_interval]))"


def _prom_latest_now(metric: str, matchers: tuple[str, ...], per: tuple[str, ...], interval: int) -> str:
    """The latest value of each series of `per` over the last two intervals (an instant query)."""
    return f"max {_by(per)} (last_over_time({_selector(metric, *matchers)}[{2 * interval}s]))"


def _columns(exprs: dict[str, str]) -> str:
    """Several expressions as one, each series labelled COLUMN with its name (InfluxQL's $col)."""
    return " or ".join(f'label_replace({expr}, "{COLUMN}", {_string(name)}, "", "")' for name, expr in exprs.items())


def _heartbeat(groups: list[NodeGroup]) -> str:
    """The nodes of the groups whose node exporter answered the last scrape."""
    return f'count(up{{job="node", {_hosts(groups)}}} == 1)'


def _query(
    ref: str, influxql: str, promql: str, measurement: str, fields, tags=(), alias="", fmt="time_series", instant=False
) -> Query:
    return Query(ref, influxql, promql, measurement, tuple(fields), tuple(tags), alias, fmt, instant)


# ---- the dashboards -------------------------------------------------------------------------------


def dashboards(cluster: Cluster) -> list[Dashboard]:
    """The dashboards `monitoring.grafana.dashboards` asks for, in its order."""
    m = cluster.monitoring
    if m is None or m.grafana is None:
        return []
    build = {"status": status, "nodes": nodes, "admin": admin}
    return [build[name](cluster) for name in m.grafana.dashboards]


def status(cluster: Cluster) -> Dashboard:
    """At a glance, on a phone too: stat panels first, then who uses what and whether the
    shared file systems answer."""
    interval = cluster.monitoring.interval_seconds
    prometheus = cluster.monitoring.backend == "prometheus"
    n = len(reporting_hosts(cluster))
    gpus = slurm_gpus(cluster)
    all_hosts = _in_groups(cluster.nodes)
    reporters = groups_with_input(cluster, "system")
    heartbeat = _latest_now(("load1",), "system", _in_groups(reporters), ("host",), interval)
    if prometheus:
        arrived = f"whose node exporter answered Prometheus' last scrape (every {interval} s)"
        stops = f"within a scrape or two ({interval} s each)"
    else:
        arrived = f"whose system metrics arrived in the last two collection intervals ({2 * interval} s)"
        stops = f"within two collection intervals ({2 * interval} s)"
    panels = [
        Panel(
            "Nodes reporting",
            "stat",
            "none",
            f"Nodes of the {n} expected {arrived}.",
            (
                _query(
                    "A",
                    f'SELECT count("load1") AS "reporting" FROM ({heartbeat})',
                    _heartbeat(reporters),
                    "system",
                    ("load1",),
                    ("host",),
                    instant=True,
                ),
            ),
            width=6,
            height=4,
            max=n,
            no_value="0",
        ),
        Panel(
            "Nodes down",
            "stat",
            "none",
            f"The {n} nodes of the model that run the system input, less those reporting: a node that "
            f"stops shows here {stops}.",
            (
                _query(
                    "A",
                    f'SELECT {n} - count("load1") AS "down" FROM ({heartbeat})',
                    f"{n} - ({_heartbeat(reporters)} or vector(0))",
                    "system",
                    ("load1",),
                    ("host",),
                    instant=True,
                ),
            ),
            width=6,
            height=4,
            alert_at=1,
            no_value=str(n),
        ),
        Panel(
            "Slurm nodes",
            "stat",
            "none",
            "Slurm's view of its nodes: up, down and drained (the latest state of each node).",
            (
                _query(
                    "A",
                    _sum_of_latest(("up", "down", "drained"), "slurm_node", "", ("node",)),
                    _columns(
                        {
                            f: _prom_sum_of_latest(metric_name("slurm_node", f), ("node",))
                            for f in ("up", "down", "drained")
                        }
                    ),
                    "slurm_node",
                    ("up", "down", "drained"),
                    ("node",),
                    "$col",
                ),
            ),
            width=12,
            height=4,
        ),
    ]
    if gpus:
        panels.append(
            Panel(
                "GPUs in use",
                "gauge",
                "none",
                f"GPUs allocated to jobs, of the {gpus} GPUs of the Slurm nodes; and how many of them Slurm "
                "offers now (nodes down or drained offer none).",
                (
                    _query(
                        "A",
                        _sum_of_latest(("gpus_alloc",), "slurm_node", "", ("node",)),
                        _prom_sum_of_latest(metric_name("slurm_node", "gpus_alloc"), ("node",)),
                        "slurm_node",
                        ("gpus_alloc",),
                        ("node",),
                        "in use",
                    ),
                    _query(
                        "B",
                        _sum_of_latest(("gpus_total",), "slurm_node", "", ("node",)),
                        _prom_sum_of_latest(metric_name("slurm_node", "gpus_total"), ("node",)),
                        "slurm_node",
                        ("gpus_total",),
                        ("node",),
                        "offered",
                    ),
                ),
                width=12,
                height=6,
                max=gpus,
                alert_at=gpus,
            )
        )
    job_tags = ("partition", "user", "account", "state")
    jobs_by_state = _sum_of_latest(("jobs",), "slurm_jobs", "", job_tags, by=("state",))
    panels.append(
        Panel(
            "Jobs by state",
            "stat",
            "none",
            "Jobs running, pending and in any other state Slurm reports.",
            (
                _query(
                    "A",
                    jobs_by_state,
                    _prom_sum_of_latest(metric_name("slurm_jobs", "jobs"), job_tags, by=("state",)),
                    "slurm_jobs",
                    ("jobs",),
                    job_tags,
                    "$tag_state",
                ),
            ),
            width=12 if gpus else 24,
            height=6,
        )
    )
    used, label = ("gpus", "GPUs") if gpus else ("cpus", "CPUs")
    latest = _latest_now(
        (used, "jobs"), "slurm_jobs", f'"state" =~ {RUNNING}', ("partition", "user", "account"), interval
    )
    per_user = f'SELECT sum("{used}") AS "{used}", sum("jobs") AS "jobs" FROM ({latest}) GROUP BY "user"'
    running_state = f"{_label('state')}=~{_string('(?i)running')}"
    per_user_prom = _columns(
        {
            f: "sum by (user) ("
            + _prom_latest_now(
                metric_name("slurm_jobs", f), (running_state,), ("partition", "user", "account"), interval
            )
            + ")"
            for f in (used, "jobs")
        }
    )
    panels.append(
        Panel(
            f"Top users by {label} in use",
            "table",
            "none",
            f"{label} held by each user's running jobs now (the last two collection intervals), most first.",
            (_query("A", per_user, per_user_prom, "slurm_jobs", (used, "jobs"), job_tags, fmt="table", instant=True),),
            width=24,
            height=8,
            sort_by=used,
        )
    )
    job_fields = ("gpus", "cpus", "nodes", "run_seconds")
    job_labels = ("job_id", "user", "partition", "account")
    running = _latest_now(job_fields, "slurm_job", "", job_labels, interval)
    running_prom = _columns(
        {f: _prom_latest_now(metric_name("slurm_job", f), (), job_labels, interval) for f in job_fields}
    )
    panels.append(
        Panel(
            "Running jobs",
            "table",
            "none",
            "Every running job now: its user, partition, GPUs and run time.",
            (_query("A", running, running_prom, "slurm_job", job_fields, job_labels, fmt="table", instant=True),),
            width=24,
            height=10,
            sort_by="run_seconds",
            field_units=(("run_seconds", "s"),),
        )
    )
    probes = {"list home": "list_home_ms", "stat": "stat_ms"}
    panels.append(
        Panel(
            "Storage responsiveness",
            "timeseries",
            "ms",
            f"Time to list the home directories ({cluster.monitoring.storage_probe_path}) and to stat a file, "
            "per probing host: the slowest probe of each bucket.",
            (
                _query(
                    "A",
                    _per_series(
                        'max("list_home_ms") AS "list home", max("stat_ms") AS "stat"',
                        "storage_responsiveness",
                        all_hosts,
                        ("host",),
                    ),
                    _columns(
                        {
                            name: _prom_per_series(
                                "max",
                                metric_name("storage_responsiveness", field),
                                (_hosts(cluster.nodes),),
                                ("host",),
                            )
                            for name, field in probes.items()
                        }
                    ),
                    "storage_responsiveness",
                    tuple(probes.values()),
                    ("host",),
                    "$tag_host $col",
                ),
            ),
            width=24,
            height=8,
        )
    )
    return Dashboard(
        "hal-status",
        f"{cluster.cluster.name.upper()} status",
        "Nodes up and down, GPUs and jobs, top users, storage responsiveness.",
        tuple(panels),
    )


# The node exporter's metrics for the fields of Telegraf's inputs the panels read.
NODE_CPU = "node_cpu_seconds_total"  # {cpu, mode}, seconds
NODE_MEMORY = ("node_memory_MemAvailable_bytes", "node_memory_MemTotal_bytes")
NODE_NETWORK = {"in": "node_network_receive_bytes_total", "out": "node_network_transmit_bytes_total"}  # {device}
NODE_INFINIBAND = {  # {device, port}, bytes (the exporter multiplies the 4-byte words)
    "in": "node_infiniband_port_data_received_bytes_total",
    "out": "node_infiniband_port_data_transmitted_bytes_total",
}


def nodes(cluster: Cluster) -> Dashboard:
    """Per node: CPU, memory, GPUs, network and InfiniBand."""
    every = _in_groups(cluster.nodes)
    on_every = _hosts(cluster.nodes)
    idle = _selector(NODE_CPU, 'mode="idle"', on_every)
    available, total = (f"avg_over_time({_selector(m, on_every)}[$__interval])" for m in NODE_MEMORY)
    panels = [
        Panel(
            "CPU usage per node",
            "timeseries",
            "percent",
            "Share of CPU time not idle, all CPUs of the node.",
            (
                _query(
                    "A",
                    _per_series(
                        '100 - mean("usage_idle") AS "busy"', "cpu", _where("\"cpu\" = 'cpu-total'", every), ("host",)
                    ),
                    f"100 * (1 - avg by (host) (rate({idle}[$__rate_interval])))",
                    "cpu",
                    ("usage_idle",),
                    ("cpu", "host"),
                    "$tag_host",
                ),
            ),
            max=100,
        ),
        Panel(
            "Memory used per node",
            "timeseries",
            "percent",
            "Memory in use, of the node's total.",
            (
                _query(
                    "A",
                    _per_series('mean("used_percent") AS "used"', "mem", every, ("host",)),
                    f"avg by (host) (100 * (1 - {available} / {total}))",
                    "mem",
                    ("used_percent",),
                    ("host",),
                    "$tag_host",
                ),
            ),
            max=100,
        ),
    ]
    gpu = gpu_groups(cluster)
    if gpu:
        panels += [
            Panel(
                "GPU utilization per node and GPU",
                "timeseries",
                "percent",
                f"Share of time a kernel ran, per GPU of the {len(gpu_hosts(cluster))} nodes with GPUs.",
                (_per_gpu("mean", "utilization_gpu", "utilization", gpu),),
                max=100,
            ),
            Panel(
                "GPU memory used per node and GPU",
                "timeseries",
                "mbytes",
                "Memory in use on each GPU (MiB); the top of the axis is a GPU's memory.",
                (_per_gpu("max", "memory_used", "used", gpu),),
                max=_gpu_memory_mib(cluster),
            ),
        ]
    net = _sum_of_rates(
        {"in": "bytes_recv", "out": "bytes_sent"}, "net", _where(every, NOT_LOOPBACK), ("host", "interface")
    )
    net_prom = _columns({name: _prom_sum_of_rates(m, 'device!="lo"', on_every) for name, m in NODE_NETWORK.items()})
    panels.append(
        Panel(
            "Network traffic per node",
            "timeseries",
            "Bps",
            "Bytes per second received (in) and sent (out), all Ethernet and IPoIB interfaces "
            "of the node but loopback.",
            (_query("A", net, net_prom, "net", ("bytes_recv", "bytes_sent"), ("host", "interface"), "$tag_host $col"),),
            width=24,
        )
    )
    if "infiniband" in cluster.monitoring.all_inputs():
        ib_groups = groups_with_input(cluster, "infiniband")
        # The port counters count 4-byte words (InfiniBand's PortRcvData/PortXmitData).
        ib = _sum_of_rates(
            {"in": "port_rcv_data", "out": "port_xmit_data"},
            "infiniband",
            _in_groups(ib_groups),
            ("host", "device", "port"),
            scale=4,
        )
        ib_prom = _columns({name: _prom_sum_of_rates(m, _hosts(ib_groups)) for name, m in NODE_INFINIBAND.items()})
        panels.append(
            Panel(
                "InfiniBand traffic per node",
                "timeseries",
                "Bps",
                "Bytes per second received (in) and sent (out) over all InfiniBand ports of the node.",
                (
                    _query(
                        "A",
                        ib,
                        ib_prom,
                        "infiniband",
                        ("port_rcv_data", "port_xmit_data"),
                        ("host", "device", "port"),
                        "$tag_host $col",
                    ),
                ),
                width=24,
            )
        )
    return Dashboard(
        "hal-nodes",
        f"{cluster.cluster.name.upper()} nodes",
        "Per node: CPU, memory, GPUs, network and InfiniBand.",
        tuple(panels),
    )


# InfluxQL's aggregates by their PromQL names.
_PROM_AGGREGATE = {"mean": "avg", "max": "max"}


def _per_gpu(aggregate: str, field: str, name: str, groups: list[NodeGroup]) -> Query:
    """One nvidia_smi field per bucket and GPU of the groups' hosts."""
    return _query(
        "A",
        _per_series(f'{aggregate}("{field}") AS "{name}"', "nvidia_smi", _in_groups(groups), ("host", "index")),
        _prom_per_series(
            _PROM_AGGREGATE[aggregate], metric_name("nvidia_smi", field), (_hosts(groups),), ("host", "index")
        ),
        "nvidia_smi",
        (field,),
        ("host", "index"),
        "$tag_host GPU $tag_index",
    )


def _gpu_memory_mib(cluster: Cluster) -> float | None:
    sizes = {p.gpus.memory_gib for p in cluster.hardware.values() if p.gpus}
    return max(sizes) * 1024 if sizes else None


def admin(cluster: Cluster) -> Dashboard:
    """Thermal load and power, for the administrators; the GPU inventory."""
    every = _in_groups(cluster.nodes)
    interval = cluster.monitoring.interval_seconds

    def bmc(kind: str, aggregate: str, name: str, by: tuple[str, ...]) -> Query:
        alias = "$tag_host" if by == ("host",) else "$tag_host $tag_sensor"
        return _query(
            "A",
            _per_series(f'{aggregate}("value") AS "{name}"', "bmc", _where(f"\"kind\" = '{kind}'", every), by),
            _prom_per_series(
                _PROM_AGGREGATE[aggregate],
                metric_name("bmc", "value"),
                (f"{_label('kind')}={_string(kind)}", _hosts(cluster.nodes)),
                tuple(map(_label, by)),
            ),
            "bmc",
            ("value",),
            ("kind", *by),
            alias,
        )

    gpu = gpu_groups(cluster)
    panels = [
        Panel(
            "Hottest BMC temperature per node",
            "timeseries",
            "celsius",
            "The highest temperature sensor the BMC reports, per node.",
            (bmc("temperature", "max", "temperature", ("host",)),),
        )
    ]
    if gpu:
        panels.append(
            Panel(
                "GPU temperature",
                "timeseries",
                "celsius",
                "Core temperature of every GPU.",
                (_per_gpu("max", "temperature_gpu", "temperature", gpu),),
            )
        )
    panels.append(
        Panel(
            "Power per node",
            "timeseries",
            "watt",
            "Power readings of each node's BMC, per sensor.",
            (bmc("power", "mean", "power", ("host", "sensor")),),
        )
    )
    if gpu:
        panels.append(
            Panel(
                "GPU power",
                "timeseries",
                "watt",
                "Power drawn by every GPU.",
                (_per_gpu("mean", "power_draw", "power", gpu),),
            )
        )
    panels.append(
        Panel(
            "Fans",
            "timeseries",
            "rotrpm",
            "Fan speeds the BMCs report, per node and fan.",
            (bmc("fan", "mean", "speed", ("host", "sensor")),),
            width=24,
        )
    )
    if gpu and "gpu" in cluster.monitoring.all_inputs():
        gpu_fields = ("memory_total_mib", "ecc_enabled")
        gpu_tags = ("host", "index", "name", "pci_bus_id", "driver_version")
        inventory = _latest_now(gpu_fields, "gpu_info", _in_groups(gpu), gpu_tags, interval)
        inventory_prom = _columns(
            {
                f: _prom_latest_now(metric_name("gpu_info", f), (_hosts(gpu),), tuple(map(_label, gpu_tags)), interval)
                for f in gpu_fields
            }
        )
        panels.append(
            Panel(
                "GPU inventory",
                "table",
                "none",
                "Every GPU now: model, PCI bus, driver, memory (MiB) and whether ECC is on.",
                (_query("A", inventory, inventory_prom, "gpu_info", gpu_fields, gpu_tags, fmt="table", instant=True),),
                width=24,
                height=10,
                field_units=(("memory_total_mib", "mbytes"),),
            )
        )
    backups = backup_panels(cluster)
    return Dashboard(
        "hal-admin",
        f"{cluster.cluster.name.upper()} admin",
        "Thermal load and power: BMC and GPU temperatures, power, fans; the GPU inventory"
        + ("; the backups' age." if backups else "."),
        tuple(panels + backups),
    )


def backup_panels(cluster: Cluster) -> list[Panel]:
    """Where the backup collector runs (model.monitoring.backup_collector_hosts): how many jobs
    are late or have no good snapshot now, and each job's age over time. Each host with jobs
    reports its own (hal-backup age, from its own destination): per job, the oldest age reported
    counts, and a job whose host stops reporting counts as missing."""
    hosts = backup_collector_hosts(cluster)
    if not hosts:
        return []
    jobs = len(cluster.backup_jobs)
    late = backup_late_hours(cluster)
    interval = cluster.monitoring.interval_seconds
    regex = host_regex(",".join(hosts))
    on_hosts = f'"host" =~ /{regex}/'
    age = metric_name("hal_backup", "age_s")
    job = _label("job")
    on_hosts_prom = f"host=~{_string(regex)}"
    # Each job's oldest age reported now; a job without a good snapshot prints no age_s, so it
    # has no row here and counts as missing, as does one whose hosts stopped reporting.
    now = f'SELECT max("age_s") AS "age_s" FROM "hal_backup" WHERE {_where(_now(interval), on_hosts)} GROUP BY "job"'
    count = f'SELECT {jobs} - count("age_s") AS "late or missing" FROM ({now}) WHERE "age_s" < {late * 3600:.0f}'
    fresh = f"count({_prom_latest_now(age, (on_hosts_prom,), (job,), interval)} < {late * 3600:.0f})"
    schedule = cluster.backup.schedule
    return [
        Panel(
            "Backups late or missing",
            "stat",
            "none",
            f"Of the {jobs} backup jobs, those whose last good snapshot is older than {late:g} h, that have none, "
            f"or whose age was not reported in the last two collection intervals (schedule {schedule}).",
            (
                _query(
                    "A",
                    count,
                    f"{jobs} - ({fresh} or vector(0))",
                    "hal_backup",
                    ("age_s",),
                    ("host", "job"),
                    instant=True,
                ),
            ),
            width=6,
            height=8,
            alert_at=1,
            no_value=str(jobs),
        ),
        Panel(
            "Backup age",
            "timeseries",
            "h",
            f"Hours since each backup job's last good snapshot (hal-backup age: complete, every file there at its "
            f"size); red from {late:g} h (schedule {schedule}). A job without a good snapshot has no line: "
            "Backups late or missing counts it.",
            (
                _query(
                    "A",
                    _per_series('max("age_s") / 3600 AS "age"', "hal_backup", on_hosts, ("job",)),
                    _prom_per_series("max", age, (on_hosts_prom,), (job,)) + " / 3600",
                    "hal_backup",
                    ("age_s",),
                    ("host", "job"),
                    "$tag_job",
                ),
            ),
            width=18,
            height=8,
            alert_at=late,
        ),
    ]
