"""Monitoring with the Prometheus backend, on the running cluster (the fleet scenario:
tests/data/clusters/fleet.yml has `monitoring.backend: prometheus`).

The real Prometheus on services.monitoring_db scrapes the real node exporter of every node the
model gives inputs, each target with the model's host and group; the toolkit's collectors write
the exporters' textfile directory and succeed; every dashboard panel's PromQL, as Grafana sends
it, returns data from that Prometheus (a running job makes the job panels' data); and an alert
goes the whole way: a compute node whose shared /home goes away is drained by the health check,
the rule fires, the real Alertmanager posts it to a webhook receiver this test runs on the
sandbox's network (the model's alerts.webhooks), and once /home is back the health check resumes
the node and the receiver gets the alert resolved.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse
import urllib.request

import pytest

from deployed import deployed, retry

D = deployed()
FACTS = json.loads(D.rendered("etc/hal-provision/prometheus.json") or "null")
pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(FACTS is None, reason="the model's monitoring backend is not prometheus"),
]
SERVER = (D.hosts_in("service_monitoring_db") or [None])[0]
INTERVAL = FACTS["interval_seconds"] if FACTS else 60
# Scrape, evaluation, Alertmanager's group wait and the webhook: a few intervals.
ALERT_WAIT = 12 * INTERVAL + 60
STASH = "/run/hal-test-home"


def prometheus_url() -> str:
    scheme = "https" if FACTS["tls"] else "http"
    return f"{scheme}://{D.hostvars[SERVER].get('ansible_host', SERVER)}:{FACTS['port']}"


def api(path: str, **params) -> object:
    """One call of Prometheus' HTTP API; its data. Raises with Prometheus' error."""
    url = f"{prometheus_url()}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{url}: HTTP {exc.code}: {exc.read().decode()[:400]}") from None
    assert body["status"] == "success", body
    return body["data"]


def instant(promql: str) -> list[dict]:
    return api("query", query=promql)["result"]


def metrics_config(host: str) -> dict:
    group = D.hostvars[host]["hal_node_group"]
    return json.loads(D.rendered(f"etc/hal-provision/metrics/{group}.json") or "null")


def exporter_hosts() -> list[str]:
    return sorted(h for h in D.hostvars if metrics_config(h) is not None)


def test_every_exporter_is_scraped_with_the_models_labels():
    def up() -> dict[str, dict]:
        targets = api("targets")["activeTargets"]
        return {t["labels"]["host"]: t for t in targets if t["labels"].get("job") == "node" and t["health"] == "up"}

    want = exporter_hosts()

    def all_up() -> dict | None:
        targets = up()
        return targets if set(want) <= set(targets) else None

    got = retry(all_up, 3 * INTERVAL + 30, 2)
    assert got, f"node exporters up: {sorted(up())}, expected {want}"
    for host in want:
        assert got[host]["labels"]["group"] == D.hostvars[host]["hal_node_group"], got[host]["labels"]


def test_the_servers_files_pass_promtool():
    host = D.host(SERVER)
    for cmd in (
        "promtool check config /etc/prometheus/prometheus.yml",
        "promtool check rules /etc/prometheus/rules/hal.rules.yml",
        "amtool check-config /etc/prometheus/alertmanager.yml",
    ):
        out = host.run(cmd)
        assert out.rc == 0, f"{cmd} on {SERVER}: {out.stdout}{out.stderr}"
    rules = api("rules")["groups"]
    loaded = {r["name"] for g in rules for r in g["rules"]}
    assert {"NodeDrainedByHealthCheck", "NodeUnreachable", "SlurmctldUnreachable"} <= loaded, loaded


def test_every_collector_succeeds_where_the_model_runs_it():
    expected = set()
    for host in exporter_hosts():
        config = metrics_config(host)
        names = [c["name"] for c in config["collectors"] + config["hosts"].get(host, [])]
        expected |= {(host, name) for name in names}

    def succeeded() -> set:
        return {(r["metric"]["host"], r["metric"]["collector"]) for r in instant("hal_collector_success == 1")}

    def all_succeeded() -> set | None:
        now = succeeded()
        return now if expected <= now else None

    got = retry(all_succeeded, 6 * INTERVAL + 30, 2)
    failing = instant("hal_collector_success == 0")
    assert got, f"collectors without success: {sorted(expected - succeeded())}; failing: {failing}"


def _panels() -> list[tuple[str, str, dict]]:
    out = []
    for path in sorted((D.files / "var/lib/grafana/dashboards/hal").glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board.get("panels", []):
            for target in panel.get("targets", []):
                out.append((board["uid"], panel.get("title", ""), target))
    return out


def _concrete(expr: str) -> str:
    """The query as Grafana sends it (a 15-minute range, buckets of the interval)."""
    rate = f"{max(4 * INTERVAL, 60)}s"
    return expr.replace("$__rate_interval", rate).replace("$__interval", f"{INTERVAL}s").replace("$__range", "900s")


@pytest.fixture(scope="module")
def running_job():
    """A job that runs while the panels are read: the job panels have something to show."""
    job = D.sbatch("--wrap 'sleep 600' -t 15 -J prom-panels")
    assert retry(
        lambda: D.host(D.controller).check_output("squeue -h -j %s -o %%T", job).strip() == "RUNNING", 120, 2
    ), f"job {job} never ran"
    yield job
    D.host(D.controller).run("scancel %s", job)


def test_every_panel_returns_data_from_prometheus(running_job):
    targets = _panels()
    assert targets, "no dashboard rendered"
    assert all(t.get("datasource", {}).get("type") == "prometheus" for _u, _t, t in targets)

    def empty() -> list[str]:
        missing = []
        now = time.time()
        for uid, title, target in targets:
            expr = _concrete(target["expr"])
            if target.get("instant") or target.get("format") == "table":
                result = api("query", query=expr)["result"]
            else:
                result = api("query_range", query=expr, start=now - 900, end=now, step=INTERVAL)["result"]
            if not result:
                missing.append(f"{uid} / {title} / {target['refId']}: {expr}")
        return missing

    left = retry(lambda: not empty() or None, 6 * INTERVAL + 60, 5)
    assert left, "panels without data:\n" + "\n".join(empty())


class Receiver(http.server.ThreadingHTTPServer):
    """The webhook the model names: keeps every alert Alertmanager posts."""

    def __init__(self, address):
        self.alerts: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.alerts.extend(body.get("alerts", []))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(address, Handler)

    def seen(self, status: str, alertname: str, host: str) -> dict | None:
        return next(
            (
                a
                for a in self.alerts
                if a["status"] == status
                and a["labels"].get("alertname") == alertname
                and a["labels"].get("host") == host
            ),
            None,
        )


def _sinfo(node: str) -> tuple[str, str]:
    out = D.host(D.controller).check_output("sinfo -h -N -n %s -o '%%T|%%E'", node)
    state, _, reason = out.splitlines()[0].partition("|")
    return state.strip().rstrip("*~#!%$@^-+"), reason.strip()


def test_a_node_drained_by_the_health_check_alerts_a_webhook_and_resolves(running_job):
    """Alertmanager for real, to the model's webhook, firing then resolved."""
    (hook,) = json.loads(D.rendered("etc/hal-provision/prometheus.json"))["webhooks"]
    parsed = urllib.parse.urlsplit(hook)
    receiver = Receiver((parsed.hostname, parsed.port))
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    node = next(h for h in exporter_hosts() if "health" in [c["name"] for c in metrics_config(h)["collectors"]])
    compute = D.host(node)
    try:
        assert _sinfo(node)[0] in ("idle", "mixed", "allocated"), _sinfo(node)
        started = time.monotonic()
        # /home goes away as a lost NFS mount would (the sandbox's /home is a bind of a host
        # directory: a second bind keeps it to put back).
        out = compute.run("mkdir -p %s && mount --bind /home %s && umount -l /home", STASH, STASH)
        assert out.rc == 0, f"umount /home on {node}: {out.stderr}"
        compute.run("/usr/local/sbin/hal-healthcheck")  # what slurmd runs every health.interval_s
        state, reason = _sinfo(node)
        assert state in ("drained", "draining") and "mounts" in reason, (state, reason)
        fired = retry(lambda: receiver.seen("firing", "NodeDrainedByHealthCheck", node), ALERT_WAIT, 2)
        assert fired, f"no firing NodeDrainedByHealthCheck for {node} in {ALERT_WAIT} s: {receiver.alerts}"
        assert fired["labels"]["check"] == "mounts" and fired["labels"]["severity"] == "critical", fired
        print(f"{node}: alert at the webhook {time.monotonic() - started:.0f} s after /home went away")
    finally:
        out = compute.run("mountpoint -q /home || mount --bind %s /home; umount %s", STASH, STASH)
        assert out.rc == 0, f"/home back on {node}: {out.stderr}"
        compute.run("/usr/local/sbin/hal-healthcheck")
    assert _sinfo(node)[0] not in ("drained", "draining"), _sinfo(node)
    resolved_from = time.monotonic()
    resolved = retry(lambda: receiver.seen("resolved", "NodeDrainedByHealthCheck", node), ALERT_WAIT, 2)
    receiver.shutdown()
    assert resolved, f"the alert for {node} was not resolved in {ALERT_WAIT} s: {receiver.alerts}"
    print(f"{node}: resolved at the webhook {time.monotonic() - resolved_from:.0f} s after the node resumed")
