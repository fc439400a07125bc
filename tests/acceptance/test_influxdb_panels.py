"""Every panel query of HAL's dashboards, run against a real InfluxDB 1.6 (Debian's influxd).

A scratch influxd holds synthetic points for every measurement, field and tag of the input
catalogue (INPUTS), written for the model's hosts at the model's interval over the last ten
intervals: what the configured inputs would have written. Each query, with Grafana's macros
substituted (`concrete`), must be accepted and return a value. The Nodes-down query says 0 with
every host reporting and 1 once a host's points stopped three intervals ago; sums over many
series count each series once when a bucket spans several collections. The backup collector's
points come from each host with backup jobs, one series per job and host, as `hal-backup age
--influx` prints them: Backups late or missing says 0 when every job is fresh, and counts a job
without a snapshot (bytes only), one past the threshold and one no longer reported.
"""

from __future__ import annotations

import itertools
import time

import pytest

from hal_provision.model.dashboards import backup_late_hours, concrete, dashboards, reporting_hosts
from hal_provision.hostlist import nodeset
from hal_provision.loader import REPO_DEFAULT, load_text
from hal_provision.model import Role
from hal_provision.model.monitoring import INPUTS, backup_collector_hosts

from .influx_harness import INFLUXD, Influxd

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.skipif(INFLUXD is None, reason="needs InfluxDB 1.x's influxd (Debian package influxdb); not installed"),
]

HAL = load_text(REPO_DEFAULT.read_text(encoding="utf-8"), "hal.yml").model
INTERVAL = HAL.monitoring.interval_seconds
POINTS = 10  # per series: one each interval, the newest now
STOPPED_AGO = 3  # intervals since the stopped host's last point
VICTIM = nodeset(HAL.groups_with_role(Role.compute)[0].hosts)[0]
QUERIES = [(b.uid, p.title, q.ref_id, q.influxql) for b in dashboards(HAL) for p in b.panels for q in p.queries]
COUNTERS = {"bytes_recv", "bytes_sent", "port_rcv_data", "port_xmit_data"}
GAUGE = 2.0  # every other field's value
# Tag values the panels select on; any other tag gets one made-up value.
TAG_VALUES = {
    ("cpu", "cpu"): ["cpu-total", "cpu0"],
    ("net", "interface"): ["eth0", "ib0"],
    ("bmc", "kind"): ["temperature", "power", "fan"],
    ("slurm_jobs", "state"): ["RUNNING", "PENDING"],
    ("slurm_jobs", "user"): ["alice", "bob"],
    ("slurm_job", "job_id"): ["1001", "1002"],
    ("hal_backup", "job"): [job.name for job in HAL.backup_jobs],
}
BACKUP_HOSTS = backup_collector_hosts(HAL)


# ---- what the inputs would have written -------------------------------------------------------------


def _tag_sets(host: str, measurement: str, tags: tuple[str, ...]) -> list[dict[str, str]]:
    choices = []
    for tag in tags:
        if tag == "index":  # one series per GPU of the host
            group = HAL.group_of(host)
            count = HAL.hardware[group.hardware].gpu_count if group else 0
            values = [str(i) for i in range(max(count, 1))]
        elif (measurement, tag) == ("slurm_node", "node"):
            values = list(HAL.slurm_nodes)
        else:
            values = TAG_VALUES.get((measurement, tag), [f"{tag}-a"])
        choices.append(values)
    return [{"host": host, **dict(zip(tags, combo))} for combo in itertools.product(*choices)]


def _line(measurement: str, tags: dict[str, str], fields: tuple[str, ...], step: int, at: int) -> str:
    tag_text = ",".join(f"{k}={v}" for k, v in sorted(tags.items()))
    values = ",".join(f"{f}={1_000_000 + step * 5_000 if f in COUNTERS else GAUGE}" for f in fields)
    return f"{measurement},{tag_text} {values} {at}"


def points(now: int, stopped: dict[str, int] | None = None) -> list[str]:
    """Every configured input's measurements for each host of its role: one point per series
    each interval for the last POINTS intervals; a host in `stopped` writes nothing in its last
    that many intervals."""
    stopped = stopped or {}
    lines = []
    runs = [
        (name, [h for g in HAL.groups_with_role(role) for h in nodeset(g.hosts)])
        for role, names in HAL.monitoring.inputs.items()
        for name in names
    ]
    runs.append(("backup", BACKUP_HOSTS))  # from the backup section, not listed
    for name, hosts in runs:
        spec = INPUTS[name]
        if spec.needs == "slurm_controller":  # the controller alone runs it
            hosts_here = [h for h in hosts if h == nodeset(HAL.services.slurmctld)[0]]
        else:
            hosts_here = hosts
        for host, (measurement, fields) in itertools.product(hosts_here, spec.measurements.items()):
            for tags in _tag_sets(host, measurement, spec.tags.get(measurement, ())):
                for ago in range(stopped.get(host, 0), POINTS):
                    lines.append(_line(measurement, tags, fields, POINTS - ago, now - ago * INTERVAL))
    return lines


def backup_trouble(now: int) -> list[str]:
    """hal-backup age's points from every backup host: the first job without a good snapshot
    (`bytes=0i`, no age_s), the second a minute past the threshold, the third last reported
    three intervals ago, the others fresh."""
    late = backup_late_hours(HAL) * 3600 + 60
    jobs = TAG_VALUES[("hal_backup", "job")]
    lines = []
    for host, (i, job), ago in itertools.product(BACKUP_HOSTS, enumerate(jobs), range(POINTS)):
        if i == 2 and ago < STOPPED_AGO:
            continue
        fields = {0: "bytes=0i", 1: f"age_s={late + ago * INTERVAL},bytes=5i"}.get(i, "age_s=600,bytes=5i")
        lines.append(f"hal_backup,host={host},job={job} {fields} {now - ago * INTERVAL}")
    return lines


@pytest.fixture(scope="module")
def influx(tmp_path_factory):
    server = Influxd(tmp_path_factory.mktemp("influxd"))
    try:
        now = int(time.time())
        for db, stopped in (("running", None), ("stopped", {VICTIM: STOPPED_AGO})):
            server.create(db)
            server.write(db, points(now, stopped))
        server.create("backup_trouble")
        server.write("backup_trouble", backup_trouble(now))
        yield server
    finally:
        server.close()


def _values(series: list[dict]) -> list:
    return [v for s in series for row in s["values"] for v in row[1:] if v is not None]


def _panel_query(title: str, ref: str = "A") -> str:
    [q] = [q for _b, t, r, q in QUERIES if (t, r) == (title, ref)]
    return q


# ---- the tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("board,title,ref,q", QUERIES, ids=[f"{b}:{t}:{r}" for b, t, r, _ in QUERIES])
def test_every_panel_query_returns_data(influx, board, title, ref, q):
    text = concrete(q, interval_seconds=INTERVAL)
    assert _values(influx.query("running", text)), (
        f"dashboard {board}, panel {title!r} ({ref}) returned nothing:\n{text}"
    )


def test_nodes_down_is_zero_with_every_node_reporting(influx):
    expected = len(reporting_hosts(HAL))
    assert _values(influx.query("running", concrete(_panel_query("Nodes down"), interval_seconds=INTERVAL))) == [0]
    assert _values(influx.query("running", concrete(_panel_query("Nodes reporting"), interval_seconds=INTERVAL))) == [
        expected
    ]


def test_a_node_silent_for_three_intervals_is_down(influx):
    expected = len(reporting_hosts(HAL))
    assert _values(influx.query("stopped", concrete(_panel_query("Nodes down"), interval_seconds=INTERVAL))) == [1]
    assert _values(influx.query("stopped", concrete(_panel_query("Nodes reporting"), interval_seconds=INTERVAL))) == [
        expected - 1
    ]


@pytest.mark.parametrize("collections_per_bucket", [1, 5])
def test_sums_count_each_series_once_however_wide_the_bucket(influx, collections_per_bucket):
    """GPUs in use is the sum of each node's latest gpus_alloc, also when a bucket ($__interval)
    holds several collections of every node."""
    q = concrete(
        _panel_query("GPUs in use"),
        window_seconds=POINTS * INTERVAL,
        interval_seconds=collections_per_bucket * INTERVAL,
    )
    got = _values(influx.query("running", q))
    assert got and set(got) == {GAUGE * len(HAL.slurm_nodes)}, q


def test_no_backup_is_late_or_missing_when_every_job_is_fresh(influx):
    q = concrete(_panel_query("Backups late or missing"), interval_seconds=INTERVAL)
    assert _values(influx.query("running", q)) == [0]


def test_a_job_without_a_snapshot_one_late_and_one_silent_are_counted(influx):
    q = concrete(_panel_query("Backups late or missing"), interval_seconds=INTERVAL)
    assert _values(influx.query("backup_trouble", q)) == [3], q


def test_backup_age_is_hours_per_job_and_has_no_line_for_a_job_without_a_snapshot(influx):
    q = concrete(_panel_query("Backup age"), interval_seconds=INTERVAL)
    series = influx.query("backup_trouble", q)
    by_job = {s["tags"]["job"]: [row[1] for row in s["values"]] for s in series}
    jobs = TAG_VALUES[("hal_backup", "job")]
    assert set(by_job) == set(jobs[1:])  # the first has only bytes: no age to draw
    assert max(by_job[jobs[1]]) > backup_late_hours(HAL)
    assert set(by_job[jobs[3]]) == {600 / 3600}
