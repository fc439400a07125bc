"""The Grafana dashboards: specs generated from the model (node lists, GPU counts, which panels
exist), every query reading only what the input catalogue says is written, the dashboard JSON
and provisioning rendered from the specs, and `hal-provision dashboards` printing them; all on
the influxdb backend (the PromQL of the prometheus backend: test_promql.py)."""

from __future__ import annotations

import ast
import datetime as dt
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from hal_provision.model import dashboards as dash
from hal_provision.model.dashboards import concrete, dashboards, host_regex
from hal_provision.cli.dashboards import panels as panels_command
from hal_provision.hostlist import nodeset
from hal_provision.model import Cluster, Role
from hal_provision.model.monitoring import INPUTS
from hal_provision.render import grafana

COMPUTE = [f"hal{i:02d}" for i in range(1, 17)]
HAL_GPUS = 16 * 4  # 16 AC922 compute nodes, 4 V100 each
HAL_NODES = 22  # 16 compute, login, two management, data, dtn, dev


def _edited(hal: Cluster, edit) -> Cluster:
    doc = hal.model_dump(mode="json", exclude_unset=True)
    edit(doc)
    return Cluster.model_validate(doc)


def _without_gpus(doc: dict) -> None:
    for profile in doc["hardware"].values():
        profile.pop("gpus", None)


def _without_infiniband_input(doc: dict) -> None:
    for names in doc["monitoring"]["inputs"].values():
        if "infiniband" in names:
            names.remove("infiniband")


def _board(cluster: Cluster, uid: str) -> dash.Dashboard:
    [board] = [b for b in dashboards(cluster) if b.uid == uid]
    return board


def _panel(cluster: Cluster, uid: str, title: str) -> dash.Panel:
    [panel] = [p for p in _board(cluster, uid).panels if p.title == title]
    return panel


def _all_queries(cluster: Cluster):
    return [(b, p, q) for b in dashboards(cluster) for p in b.panels for q in p.queries]


def _host_regex_of(influxql: str) -> str:
    [regex] = re.findall(r'"host" =~ /(.*?)/', influxql)
    return regex


# ---- the specs ----------------------------------------------------------------------------------


def test_the_model_asks_for_three_dashboards(hal):
    assert [b.uid for b in dashboards(hal)] == ["hal-status", "hal-nodes", "hal-admin"]
    for board in dashboards(hal):
        assert board.panels and len({p.title for p in board.panels}) == len(board.panels)


@pytest.mark.parametrize(
    "expr,outside",
    [
        ("hal[01-16]", ["hal00", "hal17", "hal1", "hal001", "hal-01"]),
        ("n[1-120]", ["n0", "n121", "n01", "n1200"]),
        ("hal[000001-100000]", ["hal000000", "hal100001", "hal1"]),
        ("a[8-12,15],b[007-213],login", ["a7", "a13", "a14", "b006", "b214", "b07", "login2"]),
        ("rack[1-2]n[1-3]", ["rack3n1", "rack1n4"]),
        ("hal-mgmt[1-2],hal.data", ["hal-mgmt3", "halxdata"]),
    ],
)
def test_host_regex_matches_exactly_the_hosts(expr, outside):
    regex = host_regex(nodeset(expr))
    assert all(re.fullmatch(regex, h) for h in nodeset(expr)), regex
    assert not [h for h in outside if re.fullmatch(regex, h)], regex


def test_host_regex_stays_short_for_large_ranges():
    assert len(host_regex(nodeset("hal[000001-100000]"))) < 120


def test_gpu_panels_read_every_compute_node(hal):
    gpu_queries = [q for _b, _p, q in _all_queries(hal) if q.measurement in ("nvidia_smi", "gpu_info")]
    assert gpu_queries
    for q in gpu_queries:
        regex = _host_regex_of(q.influxql)
        assert all(re.fullmatch(regex, h) for h in COMPUTE), q.influxql
        assert not re.fullmatch(regex, "hal-login"), "the login node has no GPUs"


def test_node_panels_read_every_node_of_the_model(hal):
    q = _panel(hal, "hal-nodes", "CPU usage per node").queries[0]
    regex = _host_regex_of(q.influxql)
    assert sorted(h for h in hal.all_hosts if re.fullmatch(regex, h)) == sorted(hal.all_hosts)
    assert len(hal.all_hosts) == HAL_NODES


def test_nodes_down_is_the_model_node_count_less_those_reporting(hal):
    panel = _panel(hal, "hal-status", "Nodes down")
    [q] = panel.queries
    assert q.influxql.startswith(f'SELECT {HAL_NODES} - count("load1")')
    window = 2 * hal.monitoring.interval_seconds
    assert f"time > now() - {window}s" in q.influxql and (q.measurement, q.fields) == ("system", ("load1",))
    assert panel.no_value == str(HAL_NODES)  # nothing reported: every node is down
    regex = _host_regex_of(q.influxql)
    assert all(re.fullmatch(regex, h) for h in hal.all_hosts)


def test_nodes_down_follows_the_model(hal):
    def one_compute_node_less(doc):
        [group] = [g for g in doc["nodes"] if g["role"] == "compute"]
        group["hosts"], group["count"] = "hal[01-15]", 15

    smaller = _edited(hal, one_compute_node_less)
    assert (
        _panel(smaller, "hal-status", "Nodes down")
        .queries[0]
        .influxql.startswith(f'SELECT {HAL_NODES - 1} - count("load1")')
    )


def test_gpus_in_use_has_the_model_gpu_total(hal):
    panel = _panel(hal, "hal-status", "GPUs in use")
    assert panel.max == panel.alert_at == HAL_GPUS == dash.slurm_gpus(hal)
    assert {q.fields for q in panel.queries} == {("gpus_alloc",), ("gpus_total",)}


def test_a_model_without_gpus_has_no_gpu_panels(hal):
    cpu_only = _edited(hal, _without_gpus)
    reads = {q.measurement for _b, _p, q in _all_queries(cpu_only)}
    assert not reads & {"nvidia_smi", "gpu_info"}
    titles = [p.title for b in dashboards(cpu_only) for p in b.panels]
    assert "GPUs in use" not in titles and not [t for t in titles if "GPU" in t]
    top = _panel(cpu_only, "hal-status", "Top users by CPUs in use")
    assert top.queries[0].fields == ("cpus", "jobs")


def test_infiniband_panel_only_with_the_infiniband_input(hal):
    titles = [p.title for p in _board(hal, "hal-nodes").panels]
    assert "InfiniBand traffic per node" in titles
    without = _edited(hal, _without_infiniband_input)
    assert "InfiniBand traffic per node" not in [p.title for p in _board(without, "hal-nodes").panels]


def test_panels_name_their_metrics_without_an_input(hal):
    """A panel whose input is not configured stays (the checks report it), except InfiniBand."""

    def no_bmc(doc):
        for names in doc["monitoring"]["inputs"].values():
            if "bmc" in names:
                names.remove("bmc")

    admin = _board(_edited(hal, no_bmc), "hal-admin")
    assert "Fans" in [p.title for p in admin.panels]


def test_only_the_dashboards_asked_for(hal):
    def status_only(doc):
        doc["monitoring"]["grafana"]["dashboards"] = ["status"]

    assert [b.uid for b in dashboards(_edited(hal, status_only))] == ["hal-status"]


@pytest.mark.parametrize("edit", ["no-monitoring", "no-grafana"])
def test_no_grafana_no_dashboards_no_files(hal, edit):
    def drop(doc):
        if edit == "no-monitoring":
            doc.pop("monitoring")
        else:
            doc["monitoring"].pop("grafana")

    model = _edited(hal, drop)
    assert dashboards(model) == [] and grafana.render(model) == {}


def test_every_query_reads_what_the_catalogue_says_is_written(hal):
    for board, panel, q in _all_queries(hal):
        where = f"{board.uid} / {panel.title} / {q.ref_id}"
        [spec] = [s for s in INPUTS.values() if q.measurement in s.measurements]
        assert set(q.fields) <= set(spec.measurements[q.measurement]), where
        assert set(q.tags) <= {"host", *spec.tags[q.measurement]}, where
        # ... and the query text reads exactly those
        assert f'FROM "{q.measurement}"' in q.influxql, where
        quoted = set(re.findall(r'"([^"]+)"', q.influxql))
        assert {*q.fields, *q.tags} <= quoted, where
        aliases = set(re.findall(r'AS "([^"]+)"', q.influxql))
        assert quoted - aliases - {q.measurement} <= {*q.fields, *q.tags}, where


def test_every_query_uses_grafanas_macros_or_a_window_of_two_intervals(hal):
    window = f"time > now() - {2 * hal.monitoring.interval_seconds}s"
    for _b, panel, q in _all_queries(hal):
        assert ("$timeFilter" in q.influxql) != (window in q.influxql), panel.title
        if "GROUP BY time(" in q.influxql:
            assert "GROUP BY time($__interval)" in q.influxql and "fill(none)" in q.influxql, panel.title


def test_now_queries_are_instant_and_the_others_in_time_buckets(hal):
    """Query.instant (a PromQL instant query; a stat without sparkline) is exactly the InfluxQL
    queries without time buckets: the now-window's."""
    for _b, panel, q in _all_queries(hal):
        assert q.instant == ("$__interval" not in q.influxql), panel.title
        assert q.format == "time_series" or q.instant, panel.title  # tables are now


@pytest.mark.parametrize(
    "alias,legend",
    [
        ("$tag_host $col", "{{host}} {{column}}"),
        ("$tag_job", "{{job_name}}"),  # the tag job is the label job_name
        ("$tag_host GPU $tag_index", "{{host}} GPU {{index}}"),
        ("in use", "in use"),
        ("", ""),
    ],
)
def test_the_promql_legend_is_the_alias_in_labels(alias, legend):
    q = dash.Query("A", "SELECT 1", "vector(1)", "m", (), (), alias)
    assert q.legend == legend
    assert (q.text("influxdb"), q.text("prometheus")) == ("SELECT 1", "vector(1)")


def test_concrete_substitutes_the_macros(hal):
    for _b, _p, q in _all_queries(hal):
        text = concrete(q.influxql, 600, interval_seconds=120)
        assert "$" not in text.replace("$/", "/"), text  # a regex's end anchor stays
    assert (
        concrete("WHERE $timeFilter GROUP BY time($__interval)", interval_seconds=60)
        == "WHERE time > now() - 900s GROUP BY time(60s)"
    )


def test_specs_need_no_grafana_library_and_no_renderer():
    tree = ast.parse(Path(dash.__file__).read_text())
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not [m for m in imported if "grafana" in m or m.startswith("render") or ".render" in m], imported


# ---- the backups' panels --------------------------------------------------------------------------

HAL_BACKUP_JOBS = 6  # accounting_db, directory, monitoring, slurmctld_state, secrets-hal-mgmt1, secrets-hal-mgmt2
BACKUP_PANELS = ["Backups late or missing", "Backup age"]


def _with_schedule(schedule: str):
    def edit(doc):
        doc["backup"]["schedule"] = schedule

    return edit


def test_backup_panels_come_last_on_the_admin_dashboard(hal):
    assert [p.title for p in _board(hal, "hal-admin").panels][-2:] == BACKUP_PANELS
    assert len(hal.backup_jobs) == HAL_BACKUP_JOBS


@pytest.mark.parametrize("drop", ["backup", "monitoring-of-the-destination"])
def test_no_backup_panels_without_a_backup_section(hal, drop):
    def edit(doc):
        if drop == "backup":
            doc.pop("backup")
        else:  # the destination is no file system of the model: no backup.json, no collector, no panel
            doc["backup"]["destination"]["filesystem"] = "nowhere"

    titles = [p.title for b in dashboards(_edited(hal, edit)) for p in b.panels]
    assert not set(BACKUP_PANELS) & set(titles)


def test_backup_age_reads_hal_backup_age_s_per_job_on_the_hosts_of_backup_jobs(hal):
    panel = _panel(hal, "hal-admin", "Backup age")
    assert (panel.kind, panel.unit, panel.alert_at) == ("timeseries", "h", 36.0)  # HAL: nightly, 1.5 days
    [q] = panel.queries
    assert (q.measurement, q.fields, q.tags, q.alias) == ("hal_backup", ("age_s",), ("host", "job"), "$tag_job")
    assert q.influxql.startswith('SELECT max("age_s") / 3600 AS "age" FROM "hal_backup" WHERE $timeFilter AND ')
    assert q.influxql.endswith('GROUP BY time($__interval), "job" fill(none)')
    regex = _host_regex_of(q.influxql)
    assert sorted(h for h in hal.all_hosts if re.fullmatch(regex, h)) == ["hal-mgmt1", "hal-mgmt2"]
    assert "36 h" in panel.description and "*-*-* 02:30:00" in panel.description


def test_backups_late_or_missing_counts_the_models_jobs(hal):
    panel = _panel(hal, "hal-admin", "Backups late or missing")
    assert (panel.kind, panel.alert_at, panel.no_value) == ("stat", 1, str(HAL_BACKUP_JOBS))
    [q] = panel.queries
    window = 2 * hal.monitoring.interval_seconds
    assert q.influxql.startswith(f'SELECT {HAL_BACKUP_JOBS} - count("age_s") AS "late or missing" FROM (')
    assert f"time > now() - {window}s" in q.influxql and 'GROUP BY "job")' in q.influxql
    assert q.influxql.endswith(f'WHERE "age_s" < {36 * 3600}')


@pytest.mark.parametrize(
    "schedule,hours",
    [
        ("daily", 36.0),
        ("*-*-* 02:30:00", 36.0),
        ("02:30 UTC", 36.0),
        ("hourly", 1.5),
        ("*:15", 1.5),
        ("weekly", 252.0),
        ("Mon..Fri 02:30", 36.0),
        ("*-*-* 02,14:30", 36.0),
        ("*:0/15", 36.0),
    ],
)
def test_the_backup_threshold_is_one_and_a_half_periods_where_simple_else_36_hours(hal, schedule, hours):
    model = _edited(hal, _with_schedule(schedule))
    assert dash.backup_late_hours(model) == hours
    assert _panel(model, "hal-admin", "Backup age").alert_at == hours
    assert (
        _panel(model, "hal-admin", "Backups late or missing")
        .queries[0]
        .influxql.endswith(f'"age_s" < {hours * 3600:.0f}')
    )


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="needs systemd-analyze")
@pytest.mark.parametrize(
    "schedule", ["hourly", "daily", "weekly", "*-*-* 02:30:00", "02:30 UTC", "*:15", "*-*-* *:15:00", "minutely"]
)
def test_periods_are_systemds_gaps_between_elapses(schedule):
    """period_seconds is the time between consecutive elapses systemd computes (for these forms
    every gap is the same; a month's or a year's are not, and are not compared)."""
    from hal_provision.model.oncalendar import period_seconds

    done = subprocess.run(
        [SYSTEMD_ANALYZE, "calendar", "--iterations=4", schedule],
        capture_output=True,
        text=True,
        env={"TZ": "UTC", "PATH": os.environ.get("PATH", "")},
    )
    assert done.returncode == 0, done.stderr
    stamps = re.findall(r"(?:Next elapse|Iter\. #\d+): \w+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", done.stdout)
    times = [dt.datetime.strptime(t, "%Y-%m-%d %H:%M:%S") for t in stamps]
    assert len(times) == 4, done.stdout
    gaps = {(b - a).total_seconds() for a, b in zip(times, times[1:])}
    assert gaps == {period_seconds(schedule)}, (schedule, gaps)


# ---- the rendered files ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rendered(hal):
    return grafana.render(hal)


def test_one_json_file_per_dashboard_and_two_provisioning_files(hal, rendered):
    assert sorted(rendered) == sorted(
        [
            grafana.DATASOURCES,
            grafana.PROVIDERS,
            *(f"files/var/lib/grafana/dashboards/hal/{uid}.json" for uid in ("hal-status", "hal-nodes", "hal-admin")),
        ]
    )


def _json_panels(doc: dict) -> list[dict]:
    out, stack = [], list(doc["panels"])
    while stack:
        panel = stack.pop(0)
        stack.extend(panel.get("panels", []))
        out.append(panel)
    return out


def test_dashboard_json_holds_the_specs(hal, rendered):
    for spec in dashboards(hal):
        doc = json.loads(rendered[grafana.dashboard_path(spec.uid)])
        assert (doc["uid"], doc["title"], doc["editable"]) == (spec.uid, spec.title, False)
        assert doc["_comment"].startswith("Generated by hal-provision")
        panels = _json_panels(doc)
        assert [p["title"] for p in panels] == [p.title for p in spec.panels]
        assert len({p["id"] for p in panels}) == len(panels)
        for panel, want in zip(panels, spec.panels):
            assert panel["type"] == want.kind and panel["datasource"]["uid"] == grafana.DATASOURCE_UID
            assert panel["interval"] == "1m"  # a bucket is never shorter than the collection interval
            got = [(t["refId"], t["query"], t["rawQuery"], t["datasource"]["uid"]) for t in panel["targets"]]
            assert got == [(q.ref_id, q.influxql, True, grafana.DATASOURCE_UID) for q in want.queries]


def test_panels_fit_the_grid(hal, rendered):
    for spec in dashboards(hal):
        for panel in _json_panels(json.loads(rendered[grafana.dashboard_path(spec.uid)])):
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24 and pos["h"] > 0


def test_status_puts_stat_panels_first(hal):
    kinds = [p.kind for p in _board(hal, "hal-status").panels]
    first_other = next(i for i, k in enumerate(kinds) if k not in ("stat", "gauge"))
    assert kinds[:2] == ["stat", "stat"] and all(k not in ("stat", "gauge") for k in kinds[first_other:])


def test_datasource_provisioning(hal, rendered):
    text = rendered[grafana.DATASOURCES]
    assert text.startswith("# Generated by hal-provision")
    [ds] = yaml.safe_load(text)["datasources"]
    assert ds["uid"] == "hal-influxdb" and ds["type"] == "influxdb" and ds["name"] == hal.monitoring.grafana.datasource
    assert ds["url"] == f"https://{hal.services.monitoring_db}:{hal.monitoring.influxdb.port}"
    assert ds["user"] == "grafana" and ds["jsonData"]["dbName"] == hal.monitoring.influxdb.database
    assert ds["secureJsonData"] == {
        "password": "$HAL_GRAFANA_INFLUX_PASSWORD",
        "tlsCACert": "$__file{/etc/ssl/hal-provision/cluster-ca.crt}",
    }
    assert "password" not in ds and "basicAuthPassword" not in ds


def test_dashboard_provider_provisioning(rendered):
    text = rendered[grafana.PROVIDERS]
    assert text.startswith("# Generated by hal-provision")
    [provider] = yaml.safe_load(text)["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards/hal"
    assert provider["folder"] == "HAL" and provider["allowUiUpdates"] is False and provider["type"] == "file"


def test_nothing_of_prometheus_in_the_influxdb_backends_files(rendered):
    for path, text in rendered.items():
        assert "prometheus" not in text.lower() and '"expr"' not in text, path


def test_no_password_anywhere(rendered):
    for path, text in rendered.items():
        for line in text.splitlines():
            if "password" in line.lower() and ":" in line and not line.lstrip().startswith("#"):
                assert line.split(":", 1)[1].strip() == "$HAL_GRAFANA_INFLUX_PASSWORD", f"{path}: {line}"


def test_rendering_is_deterministic(hal, rendered):
    again = grafana.render(_edited(hal, lambda doc: None))
    assert again == rendered
    for path, text in rendered.items():
        if path.endswith(".json"):
            assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n", path
            assert '"version"' not in text and '"iteration"' not in text, path


# ---- the command -----------------------------------------------------------------------------------


def test_command_prints_every_panel_and_query(hal):
    app = typer.Typer()
    app.command()(panels_command)
    result = CliRunner().invoke(app, [])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for board in dashboards(hal):
        assert any(line.startswith(f"{board.uid}: ") for line in lines)
        for panel in board.panels:
            assert f"  {panel.title} [{panel.kind}, {panel.unit}]" in lines
            for q in panel.queries:
                assert f"    {q.ref_id}: {q.influxql}" in lines


def test_command_without_grafana(tmp_path, hal_text):
    doc = yaml.safe_load(hal_text)
    del doc["monitoring"]["grafana"]
    (tmp_path / "cluster.yml").write_text(yaml.safe_dump(doc))
    app = typer.Typer()
    app.command()(panels_command)
    result = CliRunner().invoke(app, [str(tmp_path / "cluster.yml")])
    assert result.exit_code == 0 and "has no Grafana dashboards" in result.output, result.output


def test_gpu_hosts_are_the_groups_with_gpu_hardware(hal):
    want = {h for g in hal.nodes if hal.hardware[g.hardware].gpu_count for h in nodeset(g.hosts)}
    assert set(dash.gpu_hosts(hal)) == want == {*COMPUTE, "hal-dev"}
    assert set(dash.reporting_hosts(hal)) == set(hal.all_hosts)
    assert {g.role for g in hal.nodes} >= {Role.compute, Role.login, Role.management}


def test_expected_reporters_and_gpu_hosts_follow_each_groups_own_inputs():
    """A group's own input list (monitoring.inputs_by_group) and the GPU filter decide who is
    expected to report, not its role's list alone."""
    from hal_provision.loader import validate_text

    text = (Path(__file__).resolve().parents[2] / "data" / "clusters" / "x86-twogen.yml").read_text()
    text = text.replace(
        "    storage: [cpu, mem, system, net]\n",
        "    storage: [cpu, mem, system, net]\n  inputs_by_group:\n    login: [cpu, mem, net]\n",
    )
    model = validate_text(text, "x86-twogen.yml").model
    assert model is not None and model.monitoring.inputs_by_group == {"login": ["cpu", "mem", "net"]}
    reporting = set(dash.reporting_hosts(model))
    assert "tg-login" not in reporting and {"tg-mgmt", "tg-nfs", "tg01", "tg08"} <= reporting
    assert set(dash.gpu_hosts(model)) == {f"tg0{i}" for i in range(1, 9)}
