"""Grafana: the cluster's dashboards (hal_provision.model.dashboards) as dashboard JSON, and the provisioning
that loads them and the datasource they read: InfluxDB or Prometheus, as monitoring.backend says.

* ``files/var/lib/grafana/dashboards/hal/<uid>.json``: one dashboard per entry of
  monitoring.grafana.dashboards, built with grafana-foundation-sdk (Grafana's own builders);
  every panel and target names the datasource by uid. Read-only in Grafana: change the model.
* ``files/etc/grafana/provisioning/datasources/hal.yaml``: the datasource on
  services.monitoring_db. Backend influxdb: InfluxDB (InfluxQL), as the read-only ``grafana``
  user; its password is not here: Grafana expands ``$HAL_GRAFANA_INFLUX_PASSWORD`` from its
  environment when it reads the file, and the grafana role puts the variable in
  /etc/default/grafana-server. Backend prometheus: Prometheus, logging in as ``grafana`` with
  ``$HAL_GRAFANA_PROM_PASSWORD`` the same way where it serves HTTPS (monitoring.prometheus.tls;
  over plain HTTP it asks for no login).
* ``files/etc/grafana/provisioning/dashboards/hal.yaml``: the file provider for the dashboards'
  directory, in a folder named after the cluster (HAL on HAL), no edits saved from the UI.

The SDK has no InfluxDB query type, so the InfluxQL target is a small Dataquery of its own
(the SDK's extension point for data sources it does not ship); PromQL targets are the SDK's
Prometheus Dataquery. A table's PromQL returns one series per row and column (the label
``column`` names the column): the target asks for time series, and Grafana's "Join by labels"
transformation makes them the table's rows, one column per field, as InfluxQL's table format
gives them.
"""

from __future__ import annotations

import json

import yaml
from grafana_foundation_sdk.builders import bargauge, common as common_builders, dashboard as board, gauge, prometheus
from grafana_foundation_sdk.builders import stat, table, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from ..model.dashboards import COLUMN, Dashboard, Panel, Query, dashboards
from ..model import Cluster
from .accounts import CA_CERT
from .common import header, json_comment
from .monitoring import influx_url
from .prometheus import PROM_USER, prometheus_url

DATASOURCE_UID = "hal-influxdb"
DATASOURCE_USER = "grafana"
PASSWORD_ENV = "HAL_GRAFANA_INFLUX_PASSWORD"  # the grafana role's __grafana_password_env
PROM_DATASOURCE_UID = "hal-prometheus"
PROM_PASSWORD_ENV = "HAL_GRAFANA_PROM_PASSWORD"  # Prometheus' basic-auth password of user grafana
DASHBOARD_DIR = "/var/lib/grafana/dashboards/hal"
DATASOURCES = "files/etc/grafana/provisioning/datasources/hal.yaml"
PROVIDERS = "files/etc/grafana/provisioning/dashboards/hal.yaml"

_DATASOURCE = dm.DataSourceRef(type_val="influxdb", uid=DATASOURCE_UID)
_PROM_DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid=PROM_DATASOURCE_UID)
_BUILDERS = {
    "stat": stat.Panel,
    "timeseries": timeseries.Panel,
    "table": table.Panel,
    "bargauge": bargauge.Panel,
    "gauge": gauge.Panel,
}


def dashboard_path(uid: str) -> str:
    return f"files{DASHBOARD_DIR}/{uid}.json"


def render(cluster: Cluster) -> dict[str, str]:
    m = cluster.monitoring
    if m is None or m.grafana is None:
        return {}
    files = {DATASOURCES: datasources_yaml(cluster), PROVIDERS: providers_yaml(cluster)}
    for spec in dashboards(cluster):
        doc = {"_comment": json_comment(cluster), **dashboard_json(spec, m.interval_seconds, m.backend)}
        files[dashboard_path(spec.uid)] = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    return files


# ---- dashboards ----------------------------------------------------------------------------------


class InfluxQLQuery(cogvariants.Dataquery):
    """A raw InfluxQL target of Grafana's InfluxDB data source."""

    def __init__(self, query: Query) -> None:
        self.query = query

    def to_json(self) -> dict[str, object]:
        q = self.query
        out: dict[str, object] = {
            "refId": q.ref_id,
            "datasource": _DATASOURCE.to_json(),
            "rawQuery": True,
            "query": q.influxql,
            "resultFormat": q.format,
        }
        if q.alias:
            out["alias"] = q.alias
        return out


class InfluxQLTarget(cogbuilder.Builder[cogvariants.Dataquery]):
    def __init__(self, query: Query) -> None:
        self._query = query

    def build(self) -> InfluxQLQuery:
        return InfluxQLQuery(self._query)


def _promql_target(q: Query, interval_seconds: int) -> prometheus.Dataquery:
    """A PromQL target: instant for the values now, a range otherwise; a table's as time
    series, which the panel joins by labels into rows."""
    b = (
        prometheus.Dataquery()
        .ref_id(q.ref_id)
        .datasource(_PROM_DATASOURCE)
        .expr(q.promql)
        .editor_mode(pm.QueryEditorMode.CODE)
        .legend_format(q.legend or "__auto")
        .format(pm.PromQueryFormat.TIME_SERIES)
        .interval(_duration(interval_seconds))
    )
    return b.instant() if q.instant else b.range()


def dashboard_json(spec: Dashboard, interval_seconds: int, backend: str = "influxdb") -> dict:
    """The dashboard model Grafana loads (no id: Grafana assigns it; no version, no time), its
    queries those of the monitoring backend."""
    b = (
        board.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags(["hal", "hal-provision"])
        .readonly()
        .time("now-6h", "now")
        .refresh(_duration(interval_seconds))
        .timezone("browser")
    )
    for number, panel in enumerate(spec.panels, 1):
        b.with_panel(_panel(panel, number, interval_seconds, backend == "prometheus"))
    return json.loads(json.dumps(b.build(), cls=JSONEncoder))


def _panel(p: Panel, number: int, interval_seconds: int, prom: bool):
    b = (
        _BUILDERS[p.kind]()
        .id(number)
        .title(p.title)
        .description(p.description)
        .datasource(_PROM_DATASOURCE if prom else _DATASOURCE)
        .span(p.width)
        .height(p.height)
        .unit(p.unit)
        # A bucket holds at least one collection, else sums of the latest see empty buckets.
        .interval(_duration(interval_seconds))
    )
    for q in p.queries:
        b.with_target(_promql_target(q, interval_seconds) if prom else InfluxQLTarget(q))
    if p.max is not None:
        b.min(0).max(p.max)
    if p.no_value is not None:
        b.no_value(p.no_value)
    if p.alert_at is not None:
        b.thresholds(
            board.ThresholdsConfig()
            .mode(dm.ThresholdsMode.ABSOLUTE)
            .steps([dm.Threshold(None, "green"), dm.Threshold(p.alert_at, "red")])
        )
        if p.kind == "timeseries":  # a graph draws its thresholds only when asked to
            b.thresholds_style(
                common_builders.GraphThresholdsStyleConfig().mode(cm.GraphTresholdsStyleMode.LINE_AND_AREA)
            )
    for column, unit in p.field_units:
        b.override_by_name(column, [dm.DynamicConfigValue("unit", unit)])
    if p.kind in ("stat", "gauge", "bargauge"):
        b.reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    if p.kind == "stat" and all(q.instant for q in p.queries):
        b.graph_mode(cm.BigValueGraphMode.NONE)  # one value now: nothing to draw a sparkline of
    if p.kind == "table":
        if prom:  # one series per row and column: one row per set of the other labels
            b.with_transformation(dm.DataTransformerConfig("joinByLabels", options={"value": COLUMN}))
        # Table-format results carry a Time column (the epoch, for queries without time buckets).
        b.with_transformation(dm.DataTransformerConfig("organize", options={"excludeByName": {"Time": True}}))
        if p.sort_by:
            b.sort_by([common_builders.TableSortByFieldState().display_name(p.sort_by).desc(True)])
    return b


def _duration(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


# ---- provisioning ----------------------------------------------------------------------------------


def _yaml(cluster: Cluster, what: str, doc: dict) -> str:
    return header(cluster) + f"# {what}\n" + yaml.safe_dump(doc, default_flow_style=False, sort_keys=True)


def datasources_yaml(cluster: Cluster) -> str:
    m = cluster.monitoring
    if m.backend == "prometheus":
        return _prometheus_datasource_yaml(cluster)
    what = f"The InfluxDB datasource; the password comes from ${PASSWORD_ENV} in Grafana's environment."
    if m.influxdb.tls:
        what += f" HTTPS, the server verified against the cluster CA ({CA_CERT}, read by Grafana at start)."
    tls_json = {"tlsAuthWithCACert": True, "tlsSkipVerify": False} if m.influxdb.tls else {}
    # $__file{PATH}: Grafana's provisioning reads the file's content into the field.
    tls_secure = {"tlsCACert": "$__file{" + CA_CERT + "}"} if m.influxdb.tls else {}
    return _yaml(
        cluster,
        what,
        {
            "apiVersion": 1,
            "datasources": [
                {
                    "name": m.grafana.datasource,
                    "uid": DATASOURCE_UID,
                    "type": "influxdb",
                    "access": "proxy",
                    "url": influx_url(cluster),
                    "user": DATASOURCE_USER,
                    "isDefault": True,
                    "editable": False,
                    "jsonData": {
                        "dbName": m.influxdb.database,
                        "httpMode": "GET",
                        "timeInterval": _duration(m.interval_seconds),
                        **tls_json,
                    },
                    # $NAME, not ${NAME}: Grafana expands it once, so a '$' inside the password stays.
                    "secureJsonData": {"password": f"${PASSWORD_ENV}", **tls_secure},
                }
            ],
        },
    )


def _prometheus_datasource_yaml(cluster: Cluster) -> str:
    m = cluster.monitoring
    tls = m.prometheus.tls
    what = "The Prometheus datasource"
    if tls:
        what += (
            f"; Grafana logs in as {PROM_USER}, the password from ${PROM_PASSWORD_ENV} in its environment. HTTPS, "
            f"the server verified against the cluster CA ({CA_CERT}, read by Grafana at start)."
        )
    else:
        what += ", over plain HTTP without a login (monitoring.prometheus.tls is false)."
    # As the InfluxDB datasource's: $NAME expanded once by Grafana; the CA certificate's content.
    login = {"basicAuth": True, "basicAuthUser": PROM_USER} if tls else {"basicAuth": False}
    tls_json = {"tlsAuthWithCACert": True, "tlsSkipVerify": False} if tls else {}
    secure = {"basicAuthPassword": f"${PROM_PASSWORD_ENV}", "tlsCACert": "$__file{" + CA_CERT + "}"} if tls else {}
    source = {
        "name": m.grafana.datasource,
        "uid": PROM_DATASOURCE_UID,
        "type": "prometheus",
        "access": "proxy",
        "url": prometheus_url(cluster),
        **login,
        "isDefault": True,
        "editable": False,
        "jsonData": {
            "httpMethod": "POST",
            "prometheusType": "Prometheus",
            # The scrape interval: Grafana's smallest step and the base of $__rate_interval.
            "timeInterval": _duration(m.interval_seconds),
            **tls_json,
        },
    }
    if secure:
        source["secureJsonData"] = secure
    return _yaml(cluster, what, {"apiVersion": 1, "datasources": [source]})


def providers_yaml(cluster: Cluster) -> str:
    folder = cluster.cluster.name.upper()  # as the dashboards' titles name the cluster
    return _yaml(
        cluster,
        f"{folder}'s dashboards, from {DASHBOARD_DIR}.",
        {
            "apiVersion": 1,
            "providers": [
                {
                    "name": "hal",
                    "orgId": 1,
                    "folder": folder,
                    "type": "file",
                    "disableDeletion": True,
                    "allowUiUpdates": False,
                    "updateIntervalSeconds": 60,
                    "options": {"path": DASHBOARD_DIR, "foldersFromFilesStructure": False},
                }
            ],
        },
    )
