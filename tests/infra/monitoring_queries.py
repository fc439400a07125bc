"""The deployed monitoring as the tests reach it: the rendered facts and dashboards, InfluxDB's
HTTP API as each of its users, and the panel queries as Grafana sends them.

Shared by test_monitoring (the stack, every panel's query) and test_faults (a node that dies
shows down in the status panel)."""

from __future__ import annotations

import base64
import functools
import json
import re
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from deployed import deployed

D = deployed()
ROLES = Path(__file__).resolve().parents[2] / "roles"
FACTS = json.loads(D.rendered("etc/hal-provision/monitoring.json") or "null")
DB = (D.hosts_in("service_monitoring_db") or [None])[0]
INTERVAL = FACTS["interval_seconds"] if FACTS else 60
DASHBOARD_DIR = "var/lib/grafana/dashboards/hal"


def role_var(role: str, var: str):
    """A role variable as the play sees it: the inventory's value, else the role's default."""
    hv = D.hostvars[next(iter(D.hostvars))]
    return hv.get(var, yaml.safe_load((ROLES / role / "defaults/main.yml").read_text())[var])


SECRETS = role_var("influxdb", "influxdb_secrets_dir")


def url(scheme: str | None = None) -> str:
    """InfluxDB's API by the database host's address (which its certificate names too)."""
    scheme = scheme or ("https" if FACTS.get("tls") else "http")
    return f"{scheme}://{D.hostvars[DB].get('ansible_host', DB)}:{FACTS['port']}"


@functools.cache
def cluster_ca() -> str:
    """The cluster CA's certificate, as the database host has it (the cluster_ca role's file)."""
    return D.host(DB).check_output("cat %s", FACTS["ca_file"]) + "\n"


def tls_context() -> ssl.SSLContext | None:
    """What verifies InfluxDB's certificate: the cluster CA alone."""
    return ssl.create_default_context(cadata=cluster_ca()) if FACTS.get("tls") else None


@functools.cache
def password(user: str) -> str:
    return D.host(DB).check_output("cat %s", f"{SECRETS}/influxdb_{user}_pass")


def influx(path: str, user: str | None, params: dict, data: bytes | None = None) -> tuple[int, object]:
    """One HTTP request to InfluxDB as `user` (None: no credentials): status and body."""
    req = urllib.request.Request(
        f"{url()}{path}?{urllib.parse.urlencode(params)}", data=data, method="POST" if data is not None else "GET"
    )
    if user:
        token = base64.b64encode(f"{user}:{password(user)}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=30, context=tls_context()) as resp:
            body = resp.read().decode()
            return resp.status, json.loads(body) if body else ""
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def query(q: str, user: str = "grafana") -> list[dict]:
    """The series one statement returns, as `user`; raises on any error."""
    status, body = influx("/query", user, {"db": FACTS["database"], "q": q, "epoch": "s"})
    if status != 200:
        raise AssertionError(f"{q}\nas {user}: HTTP {status}: {body}")
    result = body["results"][0]
    if "error" in result:
        raise AssertionError(f"{q}\nas {user}: {result['error']}")
    return result.get("series", [])


def values(series: list[dict]) -> list:
    """Every non-null value of every series, the time column left out."""
    return [v for s in series for row in s["values"] for v in row[1:] if v is not None]


def panels() -> list[tuple[str, str, str, str]]:
    """(dashboard uid, panel title, refId, raw InfluxQL) of every rendered panel target."""
    out = []
    for path in sorted((D.files / DASHBOARD_DIR).glob("*.json")):
        board = json.loads(path.read_text())
        stack = list(board.get("panels", []))
        while stack:
            panel = stack.pop(0)
            stack.extend(panel.get("panels", []))  # panels inside collapsed rows
            for target in panel.get("targets", []):
                out.append((board["uid"], panel.get("title", ""), target.get("refId", ""), target["query"]))
    return out


def concrete(q: str) -> str:
    """A panel query as Grafana sends it for the last 15 minutes."""
    return q.replace("$timeFilter", "time > now() - 15m").replace("$__interval", f"{INTERVAL}s")


def reads(q: str, measurement: str) -> bool:
    return re.search(rf'\bFROM\s+"?{re.escape(measurement)}"?(\s|$|\))', q) is not None


def nodes_down_query() -> str:
    found = [q for _b, t, _r, q in panels() if "down" in t.lower() and reads(q, "system")]
    if len(found) != 1:
        raise AssertionError(f"expected one 'Nodes down' panel query over system, found {found}")
    return found[0]


def nodes_down() -> float | None:
    got = values(query(concrete(nodes_down_query())))
    return got[-1] if got else None


class DownWatch(threading.Thread):
    """From its start, poll the status panel's Nodes-down query until it shows `expected`
    or two intervals (plus one collection round of slack) have passed; `seen_after` is the
    seconds it took, None when it never did."""

    def __init__(self, expected: float = 1, slack: float = 10):
        super().__init__(daemon=True)
        self.expected, self.deadline = expected, 2 * INTERVAL + slack
        self.seen_after: float | None = None
        self.last: object = None

    def run(self) -> None:
        start = time.monotonic()
        while time.monotonic() - start < self.deadline:
            try:
                self.last = nodes_down()
            except AssertionError as exc:
                self.last = str(exc)
            if self.last == self.expected:
                self.seen_after = time.monotonic() - start
                return
            time.sleep(2)
