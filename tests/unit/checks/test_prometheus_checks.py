"""Monitoring with the Prometheus backend: its checks, one row per mistake (an edit of the embedded
HAL description switched to the Prometheus backend, with alerts), and what the model refuses."""

from __future__ import annotations

import pytest

from hal_provision.findings import Level, has_errors
from hal_provision.loader import validate_text

from tests.conftest import HAL_TEXT, _apply

E, W = Level.error, Level.warning

INFLUX = (
    "  stack: telegraf-influxdb-grafana\n"
    "  interval_seconds: 60                        # [paper] HAL's collectors ran every minute\n"
    "  influxdb: {database: telegraf, retention: 90d, port: 8086}   # [assumed] retention\n"
)
PROMETHEUS = (
    "  backend: prometheus\n"
    "  interval_seconds: 60\n"
    "  alerts: {webhooks: [https://chat.example.org/hooks/hal]}\n"
    "  prometheus: {retention: 30d}\n"
)
ROWS_START = [(INFLUX, PROMETHEUS)]

ROWS = [
    (
        "prometheus-tls-without-a-ca",
        [("  ldap: hal-mgmt1", "  ldap: null")],
        E,
        "monitoring.prometheus.tls",
        "Prometheus over HTTPS needs the cluster CA",
    ),
    (
        "alerts-going-nowhere",
        [("  alerts: {webhooks: [https://chat.example.org/hooks/hal]}\n", "  alerts: {}\n")],
        W,
        "monitoring.alerts",
        "Alertmanager keeps them and tells nobody",
    ),
    (
        "mail-without-a-relay",
        [("  alerts: {webhooks: [https://chat.example.org/hooks/hal]}\n", "  alerts: {email: [ops@example.org]}\n")],
        E,
        "monitoring.alerts.smarthost",
        "alerts.email needs the mail relay",
    ),
    (
        "slurmctld-metrics-off-with-private-data",
        [
            (
                "  memory_reserve_mib: 8192 ",
                '  version: "25.11"\n  build_own: true\n  extra: {PrivateData: jobs}\n  memory_reserve_mib: 8192 ',
            )
        ],
        W,
        "slurm.extra.PrivateData",
        "slurmctld serves no metrics while PrivateData is set",
    ),
    (
        "alerts-without-the-slurm-collector",
        [(", processes, slurm, bmc]", ", processes, bmc]")],
        W,
        "monitoring.inputs",
        "no input list names the slurm collector",
    ),
    (
        "no-server-host",
        [("  monitoring_db: hal-mgmt1", "  monitoring_db: null")],
        E,
        "services.monitoring_db",
        "monitoring.backend prometheus runs Prometheus on services.monitoring_db",
    ),
    (
        "influxdb-section-with-prometheus",
        [("  backend: prometheus\n", "  backend: prometheus\n  influxdb: {retention: 52w}\n")],
        E,
        "monitoring",
        "monitoring.influxdb configures the influxdb backend",
    ),
    (
        "alerts-with-influxdb",
        [("  backend: prometheus\n", "  backend: influxdb\n")],
        E,
        "monitoring",
        "monitoring.prometheus and monitoring.alerts need backend: prometheus",
    ),
    (
        "retention-not-a-duration",
        [("{retention: 30d}", "{retention: 30 days}")],
        E,
        "monitoring.prometheus.retention",
        "is not a Prometheus duration",
    ),
]


@pytest.mark.parametrize(("steps", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_is_found(finds, steps, level, path, message):
    finds([*ROWS_START, *steps], level, path, message)


def test_hal_on_prometheus_is_valid_and_keeps_no_influxdb_backup():
    loaded = validate_text(_apply(HAL_TEXT, ROWS_START), "c.yml")
    assert not has_errors(loaded.findings), [f.format() for f in loaded.findings]
    c = loaded.model
    assert c.monitoring.backend == "prometheus"
    assert "monitoring" not in c.backup_sources  # Prometheus' samples are not backed up
