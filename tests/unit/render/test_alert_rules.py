"""The alert rules the model makes, run by the real `promtool test rules`.

Every rule of every case with alerts gets two tests: series that make it fire (with the labels
and annotations Alertmanager will get, its `for` included) and series that keep it quiet. A rule
without a case here fails the test, so a new rule comes with its proof. The same rule files go
through `promtool check rules`, and Alertmanager's configuration through `amtool check-config`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hal_provision.loader import load
from hal_provision.model.alerts import GPU_CHECKS, rules
from hal_provision.render import prometheus

ROOT = Path(__file__).resolve().parents[3]
MODELS = {
    "fleet": ROOT / "tests/data/clusters/fleet.yml",
    "ailab": ROOT / "examples/ailab.yml",
}
PROMTOOL = shutil.which("promtool")
AMTOOL = shutil.which("amtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) is not installed")
TARGET = {"job": "node", "host": "n1", "group": "g1"}  # what every scrape of a node adds


def load_cluster(path):
    loaded = load(path)
    assert loaded.model is not None, loaded.findings
    return loaded.model


def _cluster(name):
    return load_cluster(MODELS[name])


def _threshold(expr: str) -> int:
    """The number a rule compares with (`... > N`)."""
    return int(re.search(r"> (\d+)$", expr).group(1))


def _series(metric: str, labels: dict, values: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def _cases(cluster, alert) -> tuple[list[dict], list[dict], list[dict]]:
    """(series that fire it, the alerts' labels expected, series that keep it quiet)."""
    n = 10 + (alert.for_seconds // cluster.monitoring.interval_seconds)
    ones, zeros = f"1x{n}", f"0x{n}"
    late_backup = next((a for a in rules(cluster) if a.name == "BackupLate"), None)
    if alert.name == "NodeUnreachable":
        return [_series("up", TARGET, zeros)], [TARGET], [_series("up", TARGET, ones)]
    if alert.name == "SlurmNodeDown":
        labels = {**TARGET, "node": "c07", "state": "down"}
        return (
            [_series("hal_slurm_node_down", labels, ones)],
            [{"node": "c07"}],
            [_series("hal_slurm_node_down", labels, zeros)],
        )
    if alert.name == "SlurmctldUnreachable":
        labels = {**TARGET, "collector": "slurm"}
        up = {**TARGET, "daemon": "slurmctld"}
        return (
            [_series("hal_collector_success", labels, zeros)],
            [labels],
            [_series("hal_collector_success", labels, ones), _series("hal_slurm_daemons_up", up, ones)],
        )
    if alert.name == "SlurmdbdUnreachable":
        labels = {**TARGET, "daemon": "slurmdbd"}
        return (
            [_series("hal_slurm_daemons_up", labels, zeros)],
            [labels],
            [_series("hal_slurm_daemons_up", labels, ones)],
        )
    if alert.name in ("NodeDrainedByHealthCheck", "GpuFault"):
        check = "mounts" if alert.name == "NodeDrainedByHealthCheck" else GPU_CHECKS[2]
        failed = {**TARGET, "check": check}
        fire = [_series("hal_healthcheck_failed", failed, ones)]
        quiet = [
            _series("hal_healthcheck_failed", failed, zeros),
            # A check that is not the GPUs' fails: no GPU fault.
            _series("hal_healthcheck_failed", {**TARGET, "check": "cpus"}, ones if alert.name == "GpuFault" else zeros),
        ]
        return fire, [failed], quiet
    if alert.name == "BackupLate":
        late = _threshold(alert.expr)
        labels = {**TARGET, "job_name": "accounting_db"}
        return (
            [_series("hal_backup_age_s", labels, f"{late + 60}x{n}")],
            [{"job_name": "accounting_db"}],
            [_series("hal_backup_age_s", labels, f"{late - 60}x{n}")],
        )
    if alert.name == "BackupMissing":
        jobs = re.findall(r'job_name="([^"]+)"', alert.expr)
        late = _threshold(late_backup.expr)
        ages = [_series("hal_backup_age_s", {**TARGET, "job_name": job}, f"{late // 2}x{n}") for job in jobs]
        # One job reported, the others not: those fire.
        return ages[:1], [{"job_name": job} for job in jobs[1:]], ages
    if alert.name == "PullConvergeFailed":
        labels = {**TARGET, "state": "failed"}
        return [_series("hal_converge_failed", labels, ones)], [labels], [_series("hal_converge_failed", labels, zeros)]
    if alert.name == "PullNodeDrift":
        labels = {**TARGET, "state": "changed"}
        return [_series("hal_converge_drift", labels, ones)], [labels], [_series("hal_converge_drift", labels, zeros)]
    if alert.name == "PullConvergeLate":
        late = _threshold(alert.expr)
        step = cluster.monitoring.interval_seconds
        labels = {**TARGET, "state": "current"}
        length = late // step + 10
        # Finished at time 0 and never since; against finishing at every sample's time.
        return (
            [_series("hal_converge_finished", labels, f"0x{length}")],
            [labels],
            [_series("hal_converge_finished", labels, f"0+{step}x{length}")],
        )
    if alert.name == "FilesystemNearlyFull":
        disk = {**TARGET, "mountpoint": "/scratch", "fstype": "ext4", "device": "/dev/sda1"}
        tmp = {**TARGET, "mountpoint": "/run", "fstype": "tmpfs", "device": "tmpfs"}
        full = 100 - cluster.monitoring.alerts.filesystem_full_percent
        size = [_series("node_filesystem_size_bytes", d, f"1000x{n}") for d in (disk, tmp)]
        return (
            [*size, _series("node_filesystem_avail_bytes", disk, f"{full * 10 - 5}x{n}")],
            [disk],
            [
                *size,
                _series("node_filesystem_avail_bytes", disk, f"{full * 10 + 5}x{n}"),
                _series("node_filesystem_avail_bytes", tmp, f"0x{n}"),
            ],
        )
    if alert.name == "CollectorFailing":
        bmc = {**TARGET, "collector": "bmc"}
        slurm = {**TARGET, "collector": "slurm"}
        return (
            [_series("hal_collector_success", bmc, zeros)],
            [bmc],
            [_series("hal_collector_success", bmc, ones), _series("hal_collector_success", slurm, zeros)],
        )
    raise AssertionError(f"alert {alert.name} has no case in {__file__}: add one")


def _expand(template: str, labels: dict) -> str:
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m.group(1), ""), template)


def _unit_tests(cluster) -> list[dict]:
    interval = cluster.monitoring.interval_seconds
    tests = []
    for alert in rules(cluster):
        fire, expected, quiet = _cases(cluster, alert)
        at = f"{alert.for_seconds + 5 * interval}s"
        if alert.name == "PullConvergeLate":
            at = f"{_threshold(alert.expr) + 5 * interval}s"
        exp = []
        for labels in expected:
            all_labels = {
                **labels,
                "alertname": alert.name,
                "severity": alert.severity,
                "cluster": cluster.cluster.name,
            }
            exp.append(
                {
                    "exp_labels": {k: v for k, v in all_labels.items() if k != "alertname"},
                    "exp_annotations": {
                        "summary": _expand(alert.summary, labels),
                        "description": _expand(alert.description, labels),
                    },
                }
            )
        tests.append(
            {
                "name": f"{alert.name} fires",
                "interval": f"{interval}s",
                "input_series": fire,
                "alert_rule_test": [{"eval_time": at, "alertname": alert.name, "exp_alerts": exp}],
            }
        )
        tests.append(
            {
                "name": f"{alert.name} stays quiet",
                "interval": f"{interval}s",
                "input_series": quiet,
                "alert_rule_test": [{"eval_time": at, "alertname": alert.name, "exp_alerts": []}],
            }
        )
        if alert.for_seconds:  # and not before its `for`
            tests.append(
                {
                    "name": f"{alert.name} waits {alert.for_seconds} s",
                    "interval": f"{interval}s",
                    "input_series": fire,
                    "alert_rule_test": [
                        {
                            "eval_time": f"{max(0, alert.for_seconds - interval)}s",
                            "alertname": alert.name,
                            "exp_alerts": [],
                        }
                    ],
                }
            )
    return tests


@pytest.fixture(params=sorted(MODELS))
def rendered(request, tmp_path):
    cluster = _cluster(request.param)
    files = prometheus.render(cluster)
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return cluster, tmp_path / "files/etc/prometheus"


@needs_promtool
def test_every_rule_fires_and_stays_quiet_under_promtool(rendered):
    cluster, etc = rendered
    assert rules(cluster), "the case has no alert rules"
    doc = {
        "rule_files": ["rules/hal.rules.yml"],
        "evaluation_interval": f"{cluster.monitoring.interval_seconds}s",
        "tests": _unit_tests(cluster),
    }
    (etc / "tests.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
    done = subprocess.run([PROMTOOL, "test", "rules", "tests.yml"], cwd=etc, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@needs_promtool
def test_configs_pass_promtool_and_amtool(rendered):
    cluster, etc = rendered
    for argv in (
        [PROMTOOL, "check", "rules", "rules/hal.rules.yml"],
        [PROMTOOL, "check", "config", "--syntax-only", "prometheus.yml"],
    ):
        done = subprocess.run(argv, cwd=etc, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    if AMTOOL:
        done = subprocess.run([AMTOOL, "check-config", "alertmanager.yml"], cwd=etc, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_rules_read_the_models_thresholds():
    cluster = _cluster("ailab")
    by_name = {a.name: a for a in rules(cluster)}
    assert by_name["FilesystemNearlyFull"].expr.endswith(f"> {cluster.monitoring.alerts.filesystem_full_percent}")
    changed = cluster.model_copy(
        update={
            "monitoring": cluster.monitoring.model_copy(
                update={"alerts": cluster.monitoring.alerts.model_copy(update={"filesystem_full_percent": 75})}
            )
        }
    )
    assert dict((a.name, a) for a in rules(changed))["FilesystemNearlyFull"].expr.endswith("> 75")
    jobs = {j.name for j in cluster.backup_jobs}
    assert set(re.findall(r'job_name="([^"]+)"', by_name["BackupMissing"].expr)) == jobs


def test_alertmanager_routes_to_the_models_receivers():
    cluster = _cluster("ailab")
    doc = yaml.safe_load(prometheus.alertmanager_yml(cluster))
    a = cluster.monitoring.alerts
    (receiver,) = doc["receivers"]
    assert [w["url"] for w in receiver["webhook_configs"]] == a.webhooks
    assert [e["to"] for e in receiver["email_configs"]] == a.email
    assert all(c["send_resolved"] for c in receiver["webhook_configs"] + receiver["email_configs"])
    assert doc["global"]["smtp_smarthost"] == a.smarthost
    assert doc["route"]["receiver"] == "hal"


def test_the_influxdb_backend_renders_no_prometheus():
    hal = load_cluster(ROOT / "inventory/hal/cluster.yml")
    assert prometheus.render(hal) == {}
    assert rules(hal) == []
