"""The Prometheus backend's rendered files: what Prometheus scrapes (from the model's groups),
what each node's collectors runner runs, and slurmctld's own metrics on the Slurm that has them.
The configurations also go through the real promtool and amtool (test_alert_rules.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from hal_provision.hostlist import expand
from hal_provision.loader import load
from hal_provision.render import prometheus, render_all
from hal_provision.render.slurm import slurm_conf

ROOT = Path(__file__).resolve().parents[3]


def _load(path: Path):
    loaded = load(path)
    assert loaded.model is not None, [f.format() for f in loaded.findings]
    return loaded.model


FLEET = _load(ROOT / "tests/data/clusters/fleet.yml")
AILAB = _load(ROOT / "examples/ailab.yml")


def test_every_node_with_inputs_is_a_target_labelled_with_its_group():
    for cluster in (FLEET, AILAB):
        doc = yaml.safe_load(prometheus.prometheus_yml(cluster))
        (node,) = [job for job in doc["scrape_configs"] if job["job_name"] == "node"]
        port = cluster.monitoring.prometheus.node_exporter_port
        got = {t: c["labels"]["group"] for c in node["static_configs"] for t in c["targets"]}
        want = {
            f"{h}:{port}": g.name for g in cluster.nodes if prometheus.group_inputs(cluster, g) for h in expand(g.hosts)
        }
        assert got == want
        assert doc["global"]["scrape_interval"] == f"{cluster.monitoring.interval_seconds}s"
        assert doc["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
            f"127.0.0.1:{cluster.monitoring.prometheus.alertmanager_port}"
        ]


def test_collectors_follow_the_model():
    files = prometheus.render(FLEET)
    compute = json.loads(files["files/etc/hal-provision/metrics/compute.json"])
    mgmt = json.loads(files["files/etc/hal-provision/metrics/mgmt.json"])
    # The listed collectors, then the health check's state and the pull record on the pull compute nodes.
    assert [c["name"] for c in compute["collectors"]] == ["storage_responsiveness", "bmc", "health", "pull"]
    assert compute["hosts"] == {}
    # The Slurm collector on the slurmctld host alone, asking slurmdbd too.
    assert mgmt["collectors"] == []
    assert mgmt["hosts"] == {
        "fl-mgmt": [{"name": "slurm", "argv": ["/usr/local/bin/hal-collect", "slurm", "--slurmdbd"]}]
    }
    assert compute["interval_seconds"] == 30 and compute["timeout_seconds"] == 28
    # The AI lab: the GPU collectors only where there are GPUs, the backup collector where jobs run.
    lab = prometheus.render(AILAB)
    names = {
        path.rsplit("/", 1)[1]: [c["name"] for c in json.loads(text)["collectors"]]
        for path, text in lab.items()
        if "/metrics/" in path
    }
    gpu_groups = [
        g.name
        for g in AILAB.nodes
        if prometheus.group_inputs(AILAB, g) and AILAB.profile_of(g) and AILAB.profile_of(g).gpu_count
    ]
    assert gpu_groups and all({"nvidia_smi", "gpu"} <= set(names[f"{g}.json"]) for g in gpu_groups)
    assert all("nvidia_smi" not in v for k, v in names.items() if k[:-5] not in gpu_groups)
    backup_hosts = {
        h
        for path, text in lab.items()
        if "/metrics/" in path
        for h, cs in json.loads(text)["hosts"].items()
        if any(c["name"] == "backup" for c in cs)
    }
    assert backup_hosts == {job.host for job in AILAB.backup_jobs}


def test_the_influxdb_backend_keeps_its_tree_and_prometheus_none():
    hal = _load(ROOT / "inventory/hal/cluster.yml")
    files = render_all(hal)
    assert not [p for p in files if "prometheus" in p or "/metrics/" in p]
    assert "files/etc/hal-provision/monitoring.json" in files
    fleet = render_all(FLEET)
    assert not [p for p in fleet if "telegraf" in p or p.endswith("monitoring.json")]


def _on_slurm_25_11(cluster, extra=None):
    slurm = cluster.slurm.model_copy(update={"version": "25.11", "build_own": True, "extra": extra or {}})
    return cluster.model_copy(update={"slurm": slurm})


def test_slurmctlds_own_metrics_from_25_11_unless_private_data():
    assert "MetricsType" not in slurm_conf(FLEET)  # Debian 12's 22.05 has none
    assert [j["job_name"] for j in yaml.safe_load(prometheus.prometheus_yml(FLEET))["scrape_configs"]] == ["node"]
    new = _on_slurm_25_11(FLEET)
    assert "MetricsType=metrics/openmetrics\n" in slurm_conf(new)
    jobs = {j["job_name"]: j for j in yaml.safe_load(prometheus.prometheus_yml(new))["scrape_configs"]}
    assert set(jobs) == {"node", *(f"slurmctld-{e}" for e in prometheus.SLURMCTLD_METRICS)}
    assert jobs["slurmctld-nodes"]["metrics_path"] == "/metrics/nodes"
    assert jobs["slurmctld-nodes"]["static_configs"][0]["targets"] == [f"fl-mgmt:{FLEET.slurm.controller_port}"]
    private = _on_slurm_25_11(FLEET, {"PrivateData": "jobs"})
    assert "MetricsType" not in slurm_conf(private)
    assert [j["job_name"] for j in yaml.safe_load(prometheus.prometheus_yml(private))["scrape_configs"]] == ["node"]
    # The site's own MetricsType wins: one line, the site's; scraped only where it is openmetrics.
    own = _on_slurm_25_11(FLEET, {"MetricsType": "metrics/openmetrics"})
    assert slurm_conf(own).count("MetricsType=") == 1
    assert len(yaml.safe_load(prometheus.prometheus_yml(own))["scrape_configs"]) == 1 + len(
        prometheus.SLURMCTLD_METRICS
    )
    other = _on_slurm_25_11(FLEET, {"MetricsType": "metrics/none"})
    assert slurm_conf(other).count("MetricsType=") == 1
    assert [j["job_name"] for j in yaml.safe_load(prometheus.prometheus_yml(other))["scrape_configs"]] == ["node"]


def test_the_roles_facts_hold_no_secret():
    facts = json.loads(prometheus.facts(AILAB))
    assert set(facts) == {
        "_comment",
        "port",
        "retention",
        "storage_path",
        "node_exporter_port",
        "alertmanager_port",
        "alerts",
        "webhooks",
        "tls",
        "user",
        "ca_file",
        "ca_host",
        "textfile_dir",
        "interval_seconds",
        "url",
    }
    assert facts["url"] == "https://ctl1:9090" and facts["ca_host"] == "ctl1" and facts["user"] == "grafana"
