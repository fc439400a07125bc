"""Monitoring with the Prometheus backend: the server's configuration, its alert rules,
Alertmanager's routing, and what each node's collectors runner does.

* ``files/etc/prometheus/prometheus.yml``: one scrape job `node` over the node exporter of every
  node whose group or role has inputs (monitoring.inputs), each target labelled with its `host`
  (the model's name) and `group`, so that dashboards and rules select hosts as the InfluxQL
  dashboards do; on Slurm 25.11 and later without PrivateData, slurmctld's own OpenMetrics
  endpoints; the rule file and Alertmanager on the loopback where there are alerts.
* ``files/etc/prometheus/rules/hal.rules.yml``: the alert rules of hal_provision.model.alerts.
* ``files/etc/prometheus/alertmanager.yml``: one route to the receivers monitoring.alerts names
  (webhooks, mail), resolved alerts sent too.
* ``files/etc/hal-provision/metrics/<group>.json``: for `hal-collect textfile` on the nodes of
  a group: the toolkit's collectors they run, each a command line printing line protocol, and
  the hosts that run more (the Slurm collector on the slurmctld host, the backup collector
  where backup jobs run). The runner writes each one's metrics into the node exporter's
  textfile directory (hal_provision.node.monitoring.openmetrics names them).
* ``files/etc/hal-provision/prometheus.json``: ports, retention, storage path, TLS for the
  prometheus and node_exporter roles; no password (the grafana user's is made on the server).
"""

from __future__ import annotations

import json

import yaml

from ..hostlist import expand, nodeset
from ..model import Cluster, NodeGroup, Role
from ..model.alerts import rules
from ..model.monitoring import INPUTS, SLURMCTLD_METRICS_FROM, backup_collector_hosts, group_inputs
from ..model.slurm import version_key
from .accounts import CA_CERT
from .backup import PROGRAM as BACKUP_PROGRAM
from .common import header, json_comment
from .monitoring import COLLECT

PROMETHEUS_YML = "files/etc/prometheus/prometheus.yml"
RULES_YML = "files/etc/prometheus/rules/hal.rules.yml"
ALERTMANAGER_YML = "files/etc/prometheus/alertmanager.yml"
FACTS = "files/etc/hal-provision/prometheus.json"
METRICS_DIR = "files/etc/hal-provision/metrics"
# Debian's node exporter reads this directory (its --collector.textfile.directory default).
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
RULES_DIR = "/etc/prometheus/rules"
# slurmctld's OpenMetrics endpoints (Slurm 25.11's metrics/openmetrics), on its own port.
SLURMCTLD_METRICS = ("jobs", "jobs-users-accts", "nodes", "partitions", "scheduler")
PROM_USER = "grafana"  # the one basic-auth user of Prometheus' web config (Grafana's datasource)


def prometheus_backend(cluster: Cluster) -> bool:
    m = cluster.monitoring
    return m is not None and m.backend == "prometheus" and cluster.services.monitoring_db is not None


def slurmctld_metrics(cluster: Cluster) -> bool:
    """Whether slurmctld serves its own metrics: Slurm 25.11 or later (MetricsType), no
    PrivateData in slurm.extra (slurmctld turns the endpoints off then), and no other
    MetricsType of the site's own there."""
    return (
        prometheus_backend(cluster)
        and bool(cluster.controllers)
        and version_key(cluster.slurm.version) >= version_key(SLURMCTLD_METRICS_FROM)
        and "PrivateData" not in cluster.slurm.extra
        and cluster.slurm.extra.get("MetricsType", "metrics/openmetrics") == "metrics/openmetrics"
    )


def exporter_groups(cluster: Cluster) -> list[NodeGroup]:
    """The node groups that run the node exporter: those with inputs (monitoring.group_inputs)."""
    return [g for g in cluster.nodes if group_inputs(cluster, g) is not None]


def _collector(cluster: Cluster, name: str) -> dict:
    args = [COLLECT, name]
    if name == "storage_responsiveness":
        args.append(cluster.monitoring.storage_probe_path)
    if name == "slurm" and cluster.services.slurmdbd:
        args.append("--slurmdbd")
    if name == "backup":  # the runner is root: the secret jobs' snapshots are root's alone
        args = [BACKUP_PROGRAM, "age", "--influx"]
    return {"name": name, "argv": args}


def group_collectors(cluster: Cluster, group: NodeGroup) -> list[str]:
    """The toolkit's collectors every node of the group runs: the exec inputs of its list and
    nvidia_smi (which the node exporter does not read), the health check's state on Slurm nodes
    that run the toolkit's check, the pull converge's record on pull nodes."""
    inputs = group_inputs(cluster, group) or []
    names = [
        n
        for n in inputs
        if n in INPUTS and (n == "nvidia_smi" or (INPUTS[n].kind == "exec" and INPUTS[n].needs != "slurm_controller"))
    ]
    if cluster.health is not None and cluster.health.program == "hal" and group.has(Role.compute):
        names.append("health")
    if cluster.deploy_pull and group.has(Role.compute):
        names.append("pull")
    return names


def host_collectors(cluster: Cluster) -> dict[str, list[str]]:
    """Host -> the collectors it runs beyond its group's: the Slurm collector on the (first)
    slurmctld host where an input list names it, the backup collector on each backup host."""
    out: dict[str, list[str]] = {}
    m = cluster.monitoring
    if cluster.controllers and any(INPUTS[n].needs == "slurm_controller" for n in m.all_inputs() if n in INPUTS):
        out.setdefault(cluster.controllers[0], []).append("slurm")
    for host in backup_collector_hosts(cluster):
        out.setdefault(host, []).append("backup")
    return out


def metrics_json(cluster: Cluster, group: NodeGroup) -> str:
    m = cluster.monitoring
    members = set(expand(group.hosts))
    hosts = {
        h: [_collector(cluster, n) for n in names] for h, names in host_collectors(cluster).items() if h in members
    }
    doc = {
        "_comment": json_comment(cluster),
        "interval_seconds": m.interval_seconds,
        "timeout_seconds": max(5, m.interval_seconds - 2),
        "textfile_dir": TEXTFILE_DIR,
        "collectors": [_collector(cluster, n) for n in group_collectors(cluster, group)],
        "hosts": dict(sorted(hosts.items())),
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _yaml(cluster: Cluster, what: str, doc: dict) -> str:
    return header(cluster) + f"# {what}\n" + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)


def _seconds(n: int) -> str:
    return f"{n}s"


def prometheus_yml(cluster: Cluster) -> str:
    m = cluster.monitoring
    interval = m.interval_seconds
    port = m.prometheus.node_exporter_port
    doc: dict = {
        "global": {
            "scrape_interval": _seconds(interval),
            "scrape_timeout": _seconds(min(10, interval)),
            "evaluation_interval": _seconds(interval),
            "external_labels": {"cluster": cluster.cluster.name},
        }
    }
    if m.alerts is not None:
        doc["rule_files"] = [f"{RULES_DIR}/*.yml"]
        doc["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{m.prometheus.alertmanager_port}"]}]}]
        }
    node = {
        "job_name": "node",
        "static_configs": [
            {"targets": [f"{h}:{port}" for h in expand(g.hosts)], "labels": {"group": g.name}}
            for g in exporter_groups(cluster)
        ],
        # The target's host name, without the port, is every series' `host` label.
        "relabel_configs": [
            {"source_labels": ["__address__"], "regex": "(.+):[0-9]+", "target_label": "host", "replacement": "$1"}
        ],
    }
    doc["scrape_configs"] = [node]
    if slurmctld_metrics(cluster):
        for endpoint in SLURMCTLD_METRICS:
            doc["scrape_configs"].append(
                {
                    "job_name": f"slurmctld-{endpoint}",
                    "metrics_path": f"/metrics/{endpoint}",
                    "static_configs": [
                        {
                            "targets": [f"{h}:{cluster.slurm.controller_port}" for h in cluster.controllers],
                            "labels": {"group": "slurmctld"},
                        }
                    ],
                    "relabel_configs": node["relabel_configs"],
                }
            )
    return _yaml(cluster, "Prometheus on services.monitoring_db: what it scrapes, its rules, its Alertmanager.", doc)


def rules_yml(cluster: Cluster) -> str:
    group = {
        "name": f"{cluster.cluster.name}-hal",
        "rules": [
            {
                "alert": a.name,
                "expr": a.expr,
                **({"for": _seconds(a.for_seconds)} if a.for_seconds else {}),
                "labels": {"severity": a.severity, "cluster": cluster.cluster.name},
                "annotations": {"summary": a.summary, "description": a.description},
            }
            for a in rules(cluster)
        ],
    }
    return _yaml(cluster, "Alert rules from the model (hal_provision.model.alerts).", {"groups": [group]})


def alertmanager_yml(cluster: Cluster) -> str:
    a = cluster.monitoring.alerts
    doc: dict = {}
    if a.email:
        doc["global"] = {
            "smtp_smarthost": a.smarthost,
            "smtp_from": a.sender or f"alertmanager@{cluster.cluster.domain}",
            "smtp_require_tls": False,
        }
    receiver: dict = {"name": "hal"}
    if a.webhooks:
        receiver["webhook_configs"] = [{"url": url, "send_resolved": True} for url in a.webhooks]
    if a.email:
        receiver["email_configs"] = [{"to": to, "send_resolved": True} for to in a.email]
    doc["route"] = {
        "receiver": "hal",
        "group_by": ["alertname", "host"],
        "group_wait": _seconds(a.group_wait_seconds),
        "group_interval": _seconds(a.group_interval_seconds),
        "repeat_interval": f"{a.repeat_interval_hours}h",
    }
    doc["receivers"] = [receiver]
    return _yaml(cluster, "Alertmanager beside Prometheus: every alert to the receivers of monitoring.alerts.", doc)


def facts(cluster: Cluster) -> str:
    m = cluster.monitoring
    p = m.prometheus
    doc = {
        "_comment": json_comment(cluster),
        "port": p.port,
        "retention": p.retention,
        "storage_path": p.storage_path,
        "node_exporter_port": p.node_exporter_port,
        "alertmanager_port": p.alertmanager_port,
        "alerts": m.alerts is not None,
        "webhooks": list(m.alerts.webhooks) if m.alerts is not None else [],
        "tls": p.tls,
        "user": PROM_USER,
        "ca_file": CA_CERT,
        "ca_host": nodeset(cluster.services.ldap)[0] if cluster.services.ldap else None,
        "textfile_dir": TEXTFILE_DIR,
        "interval_seconds": m.interval_seconds,
        "url": prometheus_url(cluster),
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def prometheus_url(cluster: Cluster) -> str:
    """Prometheus' HTTP API as Grafana and the tests reach it: https (monitoring.prometheus.tls)
    by the server's name, which its certificate names."""
    p = cluster.monitoring.prometheus
    host = nodeset(cluster.services.monitoring_db)[0]
    return f"{'https' if p.tls else 'http'}://{host}:{p.port}"


def render(cluster: Cluster) -> dict[str, str]:
    if not prometheus_backend(cluster):
        return {}
    files = {PROMETHEUS_YML: prometheus_yml(cluster), FACTS: facts(cluster)}
    if cluster.monitoring.alerts is not None:
        files[RULES_YML] = rules_yml(cluster)
        files[ALERTMANAGER_YML] = alertmanager_yml(cluster)
    for group in exporter_groups(cluster):
        files[f"{METRICS_DIR}/{group.name}.json"] = metrics_json(cluster, group)
    return files
