"""The dashboards under the Prometheus backend: every panel's query in PromQL, rendered as
Prometheus targets with a Prometheus datasource, and run against a real Prometheus 2.42
(Debian's /usr/bin/prometheus).

The server starts on a free local port with nothing to scrape and a scratch TSDB into which
`promtool tsdb create-blocks-from openmetrics` has loaded synthetic samples: for every node
group of the model, what the node exporter and the toolkit's collectors would expose, under the
names of the contract (node exporter 1.5's metrics for Telegraf's built-in inputs; hal_<measurement>
_<field> for the collectors, tag `job` as label `job_name`), with the target labels every scrape
adds (job, instance, host, group), one sample each collection interval. Those names are written
here from the contract and the input catalogue (INPUTS), not taken from the queries, so a panel
that reads a metric or label nobody writes returns nothing and fails. Each query, with Grafana's
macros substituted (`concrete_promql`), must evaluate, as an instant query or over a range as
its target asks, and return data; the counts (Nodes down, Backups late or missing, GPUs in use)
and rates (CPU, network) come out as the samples say.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from hal_provision.cli.dashboards import panels as panels_command
from hal_provision.findings import has_errors
from hal_provision.hostlist import nodeset
from hal_provision.loader import REPO_DEFAULT, validate, validate_text
from hal_provision.model import Cluster, Role
from hal_provision.model.dashboards import (
    COLUMN,
    backup_late_hours,
    concrete_promql,
    dashboards,
    reporting_hosts,
)
from hal_provision.model.monitoring import INPUTS, group_inputs, producers
from hal_provision.node.monitoring.openmetrics import label_name, metric_name
from hal_provision.render import grafana

ROOT = Path(__file__).resolve().parents[3]
PROMETHEUS = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
PROMTOOL = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="needs Prometheus' prometheus and promtool (Debian package prometheus); not installed",
)


def prometheus_doc(tls: bool = True) -> dict:
    """The embedded HAL description with backend prometheus (its influxdb settings left out)."""
    doc = yaml.safe_load(REPO_DEFAULT.read_text(encoding="utf-8"))
    m = doc["monitoring"]
    m.pop("stack")
    m.pop("influxdb")
    m["backend"] = "prometheus"
    m["prometheus"] = {"tls": tls}
    return doc


def prometheus_model(tls: bool = True) -> Cluster:
    loaded = validate_text(yaml.safe_dump(prometheus_doc(tls)), "hal.yml")
    assert loaded.model is not None and not has_errors(loaded.findings), [f.format() for f in loaded.findings]
    return loaded.model


HAL = prometheus_model()
INTERVAL = HAL.monitoring.interval_seconds
QUERIES = [(b.uid, p, q) for b in dashboards(HAL) for p in b.panels for q in p.queries]
IDS = [f"{b}:{p.title}:{q.ref_id}" for b, p, q in QUERIES]
PANELS = {p.title: p for b in dashboards(HAL) for p in b.panels}
# The other descriptions of this repository with the Prometheus backend.
PROMETHEUS_CASES = [ROOT / "tests" / "data" / "clusters" / "fleet.yml", ROOT / "examples" / "ailab.yml"]


def _case(path: Path) -> Cluster:
    loaded = validate(path)
    assert loaded.model is not None and not has_errors(loaded.findings), [f.format() for f in loaded.findings]
    return loaded.model


# ---- the specs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PROMETHEUS_CASES, ids=lambda p: p.stem)
def test_the_prometheus_cases_have_that_backend(path):
    assert _case(path).monitoring.backend == "prometheus"


@pytest.mark.parametrize(
    "model", [HAL, *map(_case, PROMETHEUS_CASES)], ids=["hal", *(p.stem for p in PROMETHEUS_CASES)]
)
def test_every_query_of_every_panel_has_its_promql(model):
    boards = dashboards(model)
    assert boards
    for board in boards:
        for panel in board.panels:
            assert panel.queries, panel.title
            for q in panel.queries:
                where = f"{board.uid} / {panel.title} / {q.ref_id}"
                assert q.promql.strip() and q.influxql.strip(), where
                assert q.text("prometheus") == q.promql and q.text("influxdb") == q.influxql
                assert "$timeFilter" not in q.promql and "time > now()" not in q.promql, where
                macros = {m for m in ("$__interval", "$__rate_interval", "$__range") if m in q.promql}
                assert "$" not in q.promql.replace("$__rate_interval", "").replace("$__interval", "").replace(
                    "$__range", ""
                ).replace(')$"', ""), where  # only Grafana's macros (and a regex's end anchor)
                # an instant query asks for the values now: no step of the dashboard's range
                assert not (q.instant and macros), where


def _shape(model: Cluster) -> dict:
    return {b.uid: [(p.title, p.kind, p.unit, p.width, p.height) for p in b.panels] for b in dashboards(model)}


def test_the_same_panels_as_the_influxdb_backend(hal):
    """One list of panels, both queries in each: the heartbeat's descriptions differ (Prometheus'
    scrapes make it), and the backups' counts (Prometheus' samples are no backup job)."""
    assert len(PANELS) == len(QUERIES) - 1  # titles are unique (GPUs in use has two queries)
    assert _shape(HAL) == _shape(hal)
    differ = [p.title for b, c in zip(dashboards(hal), dashboards(HAL)) for p, o in zip(b.panels, c.panels) if p != o]
    assert differ == ["Nodes reporting", "Nodes down", "Backups late or missing"]
    assert len(hal.backup_jobs) == len(HAL.backup_jobs) + 1


def test_metric_names_follow_the_collectors_rule():
    names = {
        "slurm_node": ("up", "hal_slurm_node_up"),
        "hal_backup": ("age_s", "hal_backup_age_s"),
        "nvidia_smi": ("utilization_gpu", "hal_nvidia_smi_utilization_gpu"),
        "storage_responsiveness": ("list_home_ms", "hal_storage_responsiveness_list_home_ms"),
    }
    for measurement, (field, metric) in names.items():
        assert metric_name(measurement, field) == metric
    panel = PANELS["Backup age"]
    assert "hal_backup_age_s" in panel.queries[0].promql and "max by (job_name)" in panel.queries[0].promql
    assert panel.queries[0].legend == "{{job_name}}"


def test_collector_panels_read_the_metrics_and_labels_of_their_fields_and_tags():
    """The checks' metadata (measurement, fields, tags) says what the PromQL reads too: for the
    toolkit's collectors, exactly the metrics of those fields, grouped by labels of those tags."""
    for board, panel, q in QUERIES:
        if INPUTS[producers(q.measurement)[0]].kind != "exec" and q.measurement != "nvidia_smi":
            continue  # the node exporter's metrics: the contract's names (the server tests below)
        where = f"{board} / {panel.title}"
        assert set(re.findall(r"\bhal_\w+", q.promql)) == {metric_name(q.measurement, f) for f in q.fields}, where
        grouped = {label.strip() for by in re.findall(r"by \(([^)]*)\)", q.promql) for label in by.split(",")}
        assert grouped <= {"host", *map(label_name, q.tags)} - {None}, where


def test_slurm_sums_take_each_node_once():
    for title in ("Slurm nodes", "GPUs in use"):
        for q in PANELS[title].queries:
            assert "max by (node)" in q.promql, q.promql
    jobs = PANELS["Jobs by state"].queries[0].promql
    assert jobs.startswith("sum by (state) (max by (partition, user, account, state) (")


def test_heartbeat_counts_the_node_exporters_answering():
    n = len(reporting_hosts(HAL))
    [reporting] = PANELS["Nodes reporting"].queries
    [down] = PANELS["Nodes down"].queries
    assert reporting.promql.startswith('count(up{job="node", host=~"') and reporting.instant
    assert down.promql == f"{n} - ({reporting.promql} or vector(0))" and down.instant


def test_concrete_promql_substitutes_grafanas_macros():
    text = "rate(x[$__rate_interval]) / avg_over_time(y[$__interval]) + z[$__range]"
    assert concrete_promql(text, 600, interval_seconds=60) == "rate(x[240s]) / avg_over_time(y[60s]) + z[600s]"
    # a wider step keeps the rate window above it, and at least four scrapes
    assert concrete_promql(text, interval_seconds=300, scrape_seconds=60).startswith("rate(x[360s])")
    for _b, _p, q in QUERIES:
        assert "$__" not in concrete_promql(q.promql, interval_seconds=INTERVAL)


# ---- the rendered files -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered():
    return grafana.render(HAL)


def test_targets_are_promql_on_the_prometheus_datasource(rendered):
    for board in dashboards(HAL):
        doc = json.loads(rendered[grafana.dashboard_path(board.uid)])
        panels = doc["panels"]
        assert [p["title"] for p in panels] == [p.title for p in board.panels]
        for panel, spec in zip(panels, board.panels):
            assert panel["datasource"] == {"type": "prometheus", "uid": grafana.PROM_DATASOURCE_UID}
            for target, q in zip(panel["targets"], spec.queries, strict=True):
                assert target == {
                    "refId": q.ref_id,
                    "datasource": {"type": "prometheus", "uid": "hal-prometheus"},
                    "expr": q.promql,
                    "editorMode": "code",
                    "legendFormat": q.legend or "__auto",
                    "instant": q.instant,
                    "range": not q.instant,
                    "format": "time_series",
                    "interval": "1m",
                }, spec.title
            joins = [t for t in panel.get("transformations", []) if t["id"] == "joinByLabels"]
            if spec.kind == "table":  # a row per set of the other labels, a column per field
                assert joins == [{"id": "joinByLabels", "options": {"value": COLUMN}}], spec.title
                assert panel["transformations"][0] == joins[0]
                fields = {f'"{COLUMN}", "{f}"' for f in spec.queries[0].fields}
                assert all(f in spec.queries[0].promql for f in fields), spec.title
            else:
                assert not joins
            if spec.kind == "stat":
                now = all(q.instant for q in spec.queries)
                assert (panel["options"]["graphMode"] == "none") == now, spec.title


@pytest.mark.parametrize("tls", [True, False], ids=["https", "http"])
def test_prometheus_datasource(tls):
    model = HAL if tls else prometheus_model(tls=False)
    text = grafana.render(model)[grafana.DATASOURCES]
    assert text.startswith("# Generated by hal-provision")
    [ds] = yaml.safe_load(text)["datasources"]
    port = model.monitoring.prometheus.port
    assert (ds["uid"], ds["type"], ds["access"]) == ("hal-prometheus", "prometheus", "proxy")
    assert ds["name"] == model.monitoring.grafana.datasource and ds["isDefault"] and not ds["editable"]
    assert ds["jsonData"]["timeInterval"] == "1m" and "password" not in ds and "user" not in ds
    if tls:
        assert ds["url"] == f"https://{model.services.monitoring_db}:{port}"
        assert (ds["basicAuth"], ds["basicAuthUser"]) == (True, "grafana")
        assert ds["jsonData"]["tlsAuthWithCACert"] is True and ds["jsonData"]["tlsSkipVerify"] is False
        assert ds["secureJsonData"] == {
            "basicAuthPassword": "$HAL_GRAFANA_PROM_PASSWORD",
            "tlsCACert": "$__file{/etc/ssl/hal-provision/cluster-ca.crt}",
        }
        assert grafana.PROM_PASSWORD_ENV == "HAL_GRAFANA_PROM_PASSWORD"
    else:  # plain HTTP: Prometheus asks for no login, and no password crosses the network
        assert ds["url"] == f"http://{model.services.monitoring_db}:{port}"
        assert ds["basicAuth"] is False and "secureJsonData" not in ds and "tlsAuthWithCACert" not in ds["jsonData"]


def test_no_password_anywhere(rendered):
    for path, text in rendered.items():
        for line in text.splitlines():
            if "password" in line.lower() and ":" in line and not line.lstrip().startswith("#"):
                assert line.split(":", 1)[1].strip() == "$HAL_GRAFANA_PROM_PASSWORD", f"{path}: {line}"


def test_rendering_is_deterministic(rendered):
    assert grafana.render(prometheus_model()) == rendered


def test_command_prints_the_promql(tmp_path):
    (tmp_path / "cluster.yml").write_text(yaml.safe_dump(prometheus_doc()))
    app = typer.Typer()
    app.command()(panels_command)
    result = CliRunner().invoke(app, [str(tmp_path / "cluster.yml")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for _b, panel, q in QUERIES:
        assert f"    {q.ref_id}: {q.promql}" in lines, panel.title
    assert not [line for line in lines if "SELECT" in line]


# ---- what the exporters would have exposed -------------------------------------------------------------

POINTS = 10  # per series: one each interval, the newest at END
STOPPED_AGO = 3  # intervals since the stopped host's last scrape
END = (int(time.time()) // INTERVAL) * INTERVAL - 2 * INTERVAL
START = END - (POINTS - 1) * INTERVAL
MID = END - (STOPPED_AGO + 1) * INTERVAL  # before the stopped host stopped
VICTIM = nodeset(HAL.groups_with_role(Role.compute)[0].hosts)[0]
CTLD = HAL.controllers[0]
# A second host that reports the Slurm collector's series too (a controller taking over): the
# sums must count each node once all the same.
ALSO_SLURM = next(h for h in HAL.all_hosts if h not in (CTLD, VICTIM))
EXPORTER_PORT = HAL.monitoring.prometheus.node_exporter_port
GAUGE = 2.0
CPU_IDLE_SHARE = 0.75  # each CPU's idle seconds per second: CPU usage is 25 %
MEMORY = {"node_memory_MemTotal_bytes": 100.0, "node_memory_MemAvailable_bytes": 40.0}  # 60 % used
ETH_BYTES_PER_INTERVAL = 6000.0  # per device; loopback counts far more, and no panel may show it
# Telegraf's built-in inputs: the node exporter 1.5 metrics of the contract -> their label sets.
NODE_EXPORTER = {
    "cpu": {"node_cpu_seconds_total": [{"cpu": c, "mode": m} for c in "01" for m in ("idle", "user", "system")]},
    "mem": {name: [{}] for name in MEMORY},
    "system": {"node_load1": [{}]},
    "disk": {
        name: [{"mountpoint": "/", "fstype": "ext4", "device": "/dev/sda1"}]
        for name in ("node_filesystem_size_bytes", "node_filesystem_avail_bytes")
    },
    "net": {
        name: [{"device": d} for d in ("lo", "eth0")]
        for name in ("node_network_receive_bytes_total", "node_network_transmit_bytes_total")
    },
    "processes": {"node_procs_running": [{}]},
    "infiniband": {
        name: [{"device": "mlx5_0", "port": "1"}]
        for name in (
            "node_infiniband_port_data_received_bytes_total",
            "node_infiniband_port_data_transmitted_bytes_total",
        )
    },
}
# Tag values the panels select on; any other tag gets one made-up value.
TAG_VALUES = {
    ("bmc", "kind"): ["temperature", "power", "fan"],
    ("slurm_jobs", "state"): ["RUNNING", "PENDING"],
    ("slurm_jobs", "user"): ["alice", "bob"],
    ("slurm_job", "job_id"): ["1001", "1002"],
    ("slurm_node", "state"): ["idle", "mixed"],  # a node that changed state: two series, one node
}
BACKUP_JOBS = [job.name for job in HAL.backup_jobs]
LATE = backup_late_hours(HAL) * 3600


def _tag_sets(host: str, measurement: str, tags: tuple[str, ...]) -> list[dict[str, str]]:
    choices = []
    for tag in tags:
        if tag == "index":  # one series per GPU of the host
            group = HAL.group_of(host)
            values = [str(i) for i in range(max(HAL.hardware[group.hardware].gpu_count, 1))]
        elif (measurement, tag) == ("slurm_node", "node"):
            values = list(HAL.slurm_nodes)
        else:
            values = TAG_VALUES.get((measurement, tag), [f"{tag}-a"])
        choices.append(values)
    return [{label_name(t): v for t, v in zip(tags, combo)} for combo in itertools.product(*choices)]


def _collector_series(name: str, host: str):
    """(metric, labels) of a toolkit collector's series on a host."""
    spec = INPUTS[name]
    for measurement, fields in spec.measurements.items():
        for labels in _tag_sets(host, measurement, spec.tags.get(measurement, ())):
            for field in fields:
                yield metric_name(measurement, field), labels


def _counter(metric: str, labels: dict[str, str]) -> float | None:
    """What a counter grows by each interval; None for a gauge."""
    if metric == "node_cpu_seconds_total":
        share = CPU_IDLE_SHARE if labels["mode"] == "idle" else (1 - CPU_IDLE_SHARE) / 2
        return share * INTERVAL
    if metric.endswith("_total") and metric.startswith("node_"):
        return 1_000_000.0 if labels.get("device") == "lo" else ETH_BYTES_PER_INTERVAL
    return None


def series() -> dict[tuple[str, tuple], list[tuple[int, float]]]:
    """(metric, sorted labels) -> [(time, value)] for everything the exporters of the model's
    node groups expose, the Slurm collector on the controller (and ALSO_SLURM), each backup job
    from its own host: the first without a good snapshot (bytes only), the second past the
    threshold, the third last reported STOPPED_AGO intervals ago. VICTIM stops answering
    STOPPED_AGO intervals before END: `up` 0, nothing else."""
    out: dict[tuple[str, tuple], list[tuple[int, float]]] = {}

    def add(metric: str, host: str, labels: dict[str, str], values) -> None:
        group = HAL.group_of(host)
        target = {"job": "node", "instance": f"{host}:{EXPORTER_PORT}", "host": host, "group": group.name}
        out[(metric, tuple(sorted({**labels, **target}.items())))] = values

    def steady(metric: str, labels: dict[str, str], host: str, value: float = GAUGE):
        step = _counter(metric, labels)
        stop = STOPPED_AGO if host == VICTIM else 0
        return [
            (START + k * INTERVAL, MEMORY.get(metric, value) if step is None else 1_000_000.0 + k * step)
            for k in range(POINTS - stop)
        ]

    for group in HAL.nodes:
        inputs = group_inputs(HAL, group)
        if inputs is None:
            continue
        for host in nodeset(group.hosts):
            add(
                "up",
                host,
                {},
                [(START + k * INTERVAL, float(host != VICTIM or k < POINTS - STOPPED_AGO)) for k in range(POINTS)],
            )
            for name in inputs:
                if name in NODE_EXPORTER:
                    for metric, label_sets in NODE_EXPORTER[name].items():
                        for labels in label_sets:
                            add(metric, host, labels, steady(metric, labels, host))
                elif INPUTS[name].needs != "slurm_controller":  # the toolkit's collectors (nvidia_smi too)
                    for metric, labels in _collector_series(name, host):
                        add(metric, host, labels, steady(metric, labels, host))
    for host in (CTLD, ALSO_SLURM):
        for metric, labels in _collector_series("slurm", host):
            add(metric, host, labels, steady(metric, labels, host))
    for i, job in enumerate(HAL.backup_jobs):
        labels = {"job_name": job.name}
        add("hal_backup_bytes", job.host, labels, steady("hal_backup_bytes", labels, job.host, 0.0 if i == 0 else 5.0))
        if i == 0:
            continue  # no good snapshot: no age
        age = LATE + 60 if i == 1 else 600.0
        shown = POINTS - STOPPED_AGO if i == 2 else POINTS
        add("hal_backup_age_s", job.host, labels, [(START + k * INTERVAL, age) for k in range(shown)])
    return out


def openmetrics(data: dict) -> str:
    lines = []
    for (metric, labels), values in sorted(data.items()):
        text = ",".join(f'{k}="{v}"' for k, v in labels)
        lines.extend(f"{metric}{{{text}}} {value} {at}" for at, value in values)
    return "\n".join(lines) + "\n# EOF\n"


# ---- a real Prometheus --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """A scratch Prometheus on a free local port over a TSDB backfilled from OpenMetrics text."""

    def __init__(self, root: Path, samples: str):
        tsdb = root / "tsdb"
        (root / "samples.om").write_text(samples)
        done = subprocess.run(
            [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(root / "samples.om"), str(tsdb)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        (root / "prometheus.yml").write_text("global:\n  scrape_interval: 1m\nscrape_configs: []\n")
        self.port = _free_port()
        self.log = root / "prometheus.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={root / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tsdb}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise AssertionError(f"prometheus did not get ready on {self.port}:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as resp:
                return resp.status == 200
        except OSError:
            return False

    def api(self, endpoint: str, **params) -> list[dict]:
        """POST to /api/v1/<endpoint> as Grafana does; the result, after HTTP 200 and success."""
        body = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/api/v1/{endpoint}", data=body)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, doc = resp.status, json.load(resp)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"HTTP {e.code}: {e.read().decode()}\n{params.get('query')}") from None
        assert status == 200 and doc["status"] == "success", doc
        return doc["data"]["result"]

    def instant(self, query: str, at: int = END) -> list[dict]:
        return self.api("query", query=query, time=at)

    def range(self, query: str, step: int = INTERVAL) -> list[dict]:
        return self.api("query_range", query=query, start=START, end=END, step=step)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    server = Prometheus(tmp_path_factory.mktemp("prometheus"), openmetrics(series()))
    try:
        yield server
    finally:
        server.close()


def _run(server: Prometheus, q, window: int = (POINTS - 1) * INTERVAL, step: int = INTERVAL) -> list[dict]:
    """The query as its target asks: instant at END, else over the samples' range."""
    text = concrete_promql(q.promql, window, interval_seconds=step, scrape_seconds=INTERVAL)
    return server.instant(text) if q.instant else server.range(text, step)


def _values(result: list[dict], since: int = 0) -> list[float]:
    return [float(v) for s in result for t, v in ([s["value"]] if "value" in s else s["values"]) if t >= since]


def _only(server: Prometheus, title: str, at: int = END) -> float:
    [q] = PANELS[title].queries
    [value] = _values(server.instant(concrete_promql(q.promql, interval_seconds=INTERVAL), at))
    return value


# ---- the tests against it -------------------------------------------------------------------------------


@needs_prometheus
@pytest.mark.parametrize("board,panel,q", QUERIES, ids=IDS)
def test_every_panel_query_returns_data(prometheus, board, panel, q):
    result = _run(prometheus, q)
    assert result and _values(result), (
        f"dashboard {board}, panel {panel.title!r} ({q.ref_id}) returned nothing:\n{q.promql}"
    )
    columns = re.findall(rf'"{COLUMN}", "([^"]+)"', q.promql)
    if columns:  # every field of the panel has its series
        assert {s["metric"][COLUMN] for s in result} == set(columns), panel.title


@needs_prometheus
@pytest.mark.parametrize("path", PROMETHEUS_CASES, ids=lambda p: p.stem)
def test_every_query_of_the_other_cases_evaluates(prometheus, path):
    """fleet and ailab's queries: each parses and evaluates (their hosts hold no samples here)."""
    model = _case(path)
    for board in dashboards(model):
        for panel in board.panels:
            for q in panel.queries:
                interval = model.monitoring.interval_seconds
                text = concrete_promql(q.promql, interval_seconds=interval)
                prometheus.instant(text) if q.instant else prometheus.range(text, interval)


@needs_prometheus
def test_nodes_down_is_zero_with_every_node_reporting_and_counts_a_silent_one(prometheus):
    n = len(reporting_hosts(HAL))
    assert (_only(prometheus, "Nodes reporting", MID), _only(prometheus, "Nodes down", MID)) == (n, 0)
    assert (_only(prometheus, "Nodes reporting"), _only(prometheus, "Nodes down")) == (n - 1, 1)
    # no sample at all (before the first): every node is down
    assert _only(prometheus, "Nodes down", START - 3600) == n


@needs_prometheus
@pytest.mark.parametrize("collections_per_step", [1, 5])
def test_gpus_in_use_counts_each_node_once(prometheus, collections_per_step):
    """Two hosts report the Slurm collector's series, each node in two states: the sum is still
    one value per node, however wide the step."""
    for q in PANELS["GPUs in use"].queries:
        values = _values(_run(prometheus, q, step=collections_per_step * INTERVAL))
        assert values and set(values) == {GAUGE * len(HAL.slurm_nodes)}, q.promql


@needs_prometheus
def test_backups_late_or_missing_counts_the_job_without_a_snapshot_the_late_and_the_silent(prometheus):
    assert _only(prometheus, "Backups late or missing", MID) == 2  # no snapshot, late
    assert _only(prometheus, "Backups late or missing") == 3  # ... and one not reported for three intervals
    assert _only(prometheus, "Backups late or missing", START - 3600) == len(BACKUP_JOBS)


@needs_prometheus
def test_backup_age_is_hours_per_job_and_has_no_line_for_a_job_without_a_snapshot(prometheus):
    [q] = PANELS["Backup age"].queries
    by_job = {s["metric"]["job_name"]: [float(v) for _t, v in s["values"]] for s in _run(prometheus, q)}
    assert set(by_job) == set(BACKUP_JOBS[1:])
    assert max(by_job[BACKUP_JOBS[1]]) > backup_late_hours(HAL)
    assert set(by_job[BACKUP_JOBS[3]]) == {600 / 3600}


@needs_prometheus
def test_rates_and_shares_are_what_the_counters_say(prometheus):
    """CPU busy 25 % (idle grows 0.75 s a second), memory 60 % used, the network's bytes per
    second of eth0 alone (loopback left out), InfiniBand's bytes as the exporter counts them."""
    checks = {
        "CPU usage per node": 100 * (1 - CPU_IDLE_SHARE),
        "Memory used per node": 60.0,
        "Network traffic per node": ETH_BYTES_PER_INTERVAL / INTERVAL,
        "InfiniBand traffic per node": ETH_BYTES_PER_INTERVAL / INTERVAL,
    }
    for title, want in checks.items():
        [q] = PANELS[title].queries
        # from the first step whose rate window holds samples only (no extrapolation to its start)
        rate_window = int(re.search(r"\[(\d+)s\]", concrete_promql(q.promql, interval_seconds=INTERVAL)).group(1))
        got = _values([s for s in _run(prometheus, q) if s["metric"]["host"] != VICTIM], START + rate_window)
        assert got and all(abs(v - want) < 1e-6 * want for v in got), (title, got[:4])


@needs_prometheus
def test_tables_have_a_row_per_job_and_a_column_per_field(prometheus):
    [q] = PANELS["Running jobs"].queries
    result = _run(prometheus, q)
    rows = {(s["metric"]["job_id"], s["metric"][COLUMN]) for s in result}
    assert rows == {(j, f) for j in TAG_VALUES[("slurm_job", "job_id")] for f in q.fields}
    assert {k for s in result for k in s["metric"]} == {COLUMN, "job_id", "user", "partition", "account"}
    [users] = PANELS["Top users by GPUs in use"].queries
    per_user = {(s["metric"]["user"], s["metric"][COLUMN]): float(s["value"][1]) for s in _run(prometheus, users)}
    # RUNNING only, each user's series of the two reporting hosts once
    assert per_user == {(u, f): GAUGE for u in TAG_VALUES[("slurm_jobs", "user")] for f in ("gpus", "jobs")}
