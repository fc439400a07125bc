"""Monitoring on the deployed cluster, against the real InfluxDB.

InfluxDB runs with authentication, the model's database, retention policy and users (admin,
write-only telegraf, read-only grafana), passwords root-only and nowhere in the rendered tree;
every node whose role or group has inputs runs the agent (Telegraf, or the stand-in where it cannot be
installed) on the rendered telegraf.conf. Then every panel query of the rendered dashboards,
exactly as Grafana would send it, is run against the database as the grafana user and must
return data: dashboards, collectors and database agree on measurement, tag and field names. A
running swbatch job appears in the job panels. (A compute node that dies shows down in the
status panel within two intervals: test_faults, which stops one anyway.)
"""

from __future__ import annotations

import json
import re

import pytest

from deployed import TEST_USER, deployed, retry
from monitoring_queries import (
    DB,
    FACTS,
    INTERVAL,
    SECRETS,
    cluster_ca,
    concrete,
    influx,
    panels,
    query,
    reads,
    role_var,
    url,
    values,
)

D = deployed()
pytestmark = pytest.mark.skipif(FACTS is None, reason="the model has no monitoring section")
AGENT_HOSTS = [h for h in D.hostvars if D.telegraf_conf(h)]
AGENT = "hal-telegraf-standin" if FACTS and role_var("telegraf", "telegraf_install_method") == "standin" else "telegraf"
PANELS = panels() if FACTS else []


# ---- the database --------------------------------------------------------------------------


def test_influxdb_runs_with_authentication():
    svc = D.host(DB).service("influxdb")
    assert svc.is_running and svc.is_enabled
    status, body = influx("/query", None, {"q": "SHOW DATABASES"})
    assert status == 401, f"a query without credentials answered HTTP {status}: {body}"


def test_influxdb_speaks_only_https_that_the_cluster_ca_vouches_for():
    """monitoring.influxdb.tls: plain HTTP on the port gets no answer a client could use, HTTPS
    verified by the system's CAs alone fails, verified by the cluster CA it answers; the
    certificate names the database host and the CA's key stays on the CA's host."""
    import ssl
    import urllib.error
    import urllib.request

    if not FACTS.get("tls"):
        pytest.skip("the model has monitoring.influxdb.tls: false")
    status, body = influx("/ping", None, {})
    assert status == 204, f"HTTPS verified by the cluster CA: HTTP {status}: {body}"
    try:
        with urllib.request.urlopen(f"{url('http')}/ping", timeout=10) as plain:
            answered = plain.status
    except urllib.error.HTTPError as exc:  # Go's server: 400 "Client sent an HTTP request to an HTTPS server"
        answered = exc.code
    except OSError:
        answered = None
    assert answered in (400, None), f"plain HTTP answered {answered}"
    with pytest.raises(urllib.error.URLError) as unverified:
        urllib.request.urlopen(f"{url()}/ping", timeout=10, context=ssl.create_default_context())
    assert isinstance(unverified.value.reason, ssl.SSLCertVerificationError), unverified.value
    cert = D.host(DB).check_output("openssl x509 -in /etc/influxdb/tls/influxdb.crt -noout -ext subjectAltName")
    assert f"DNS:{DB}" in cert and f"IP Address:{D.hostvars[DB].get('ansible_host', DB)}" in cert, cert
    key = D.host(DB).file("/etc/influxdb/tls/influxdb.key")
    assert (key.user, key.group, key.mode) == ("root", "influxdb", 0o640)
    ca_host = FACTS["ca_host"]
    assert not [h for h in D.hostvars if h != ca_host and D.host(h).file("/etc/hal-provision/ca/cluster-ca.key").exists]


def _influx_duration(model: str) -> str:
    if model == "INF":
        return "0s"
    n, unit = int(model[:-1]), model[-1]
    return f"{n * {'h': 1, 'd': 24, 'w': 168}[unit]}h0m0s"


def test_database_retention_and_users_match_the_model():
    databases = [row[0] for s in query("SHOW DATABASES", "admin") for row in s["values"]]
    assert FACTS["database"] in databases, databases
    policies = {
        row[0]: row for s in query(f'SHOW RETENTION POLICIES ON "{FACTS["database"]}"', "admin") for row in s["values"]
    }
    assert "hal" in policies, policies
    assert policies["hal"][1] == _influx_duration(FACTS["retention"]) and policies["hal"][-1] is True, policies["hal"]
    users = {row[0]: row[1] for s in query("SHOW USERS", "admin") for row in s["values"]}
    assert users == {"admin": True, **{u: False for u in FACTS["users"]}}, users
    for user, privilege in FACTS["users"].items():
        grants = [tuple(row) for s in query(f'SHOW GRANTS FOR "{user}"', "admin") for row in s["values"]]
        assert grants == [(FACTS["database"], privilege)], f"{user}: {grants}"


def test_telegraf_cannot_read_and_grafana_cannot_write():
    status, body = influx("/query", "telegraf", {"db": FACTS["database"], "q": "SELECT * FROM system LIMIT 1"})
    refused = status == 403 or (status == 200 and "not authorized" in json.dumps(body))
    assert refused, f"telegraf read: HTTP {status}: {body}"
    status, body = influx("/write", "grafana", {"db": FACTS["database"]}, b"hal_verify_probe value=1")
    assert status == 403, f"grafana write: HTTP {status}: {body}"


def test_passwords_are_root_only_and_not_rendered():
    host = D.host(DB)
    secrets = host.file(SECRETS)
    assert secrets.is_directory and secrets.user == "root" and secrets.mode == 0o700
    words = []
    for user in ("admin", "telegraf", "grafana"):
        f = host.file(f"{SECRETS}/influxdb_{user}_pass")
        assert f.user == "root" and f.mode == 0o600, f"{f.path}: {f.user} {oct(f.mode)}"
        words.append(f.content_string.strip())
        assert len(words[-1]) >= 12
    leaked = [
        str(p)
        for p in D.inventory.parent.rglob("*")
        if p.is_file() and any(w in p.read_text(errors="replace") for w in words)
    ]
    assert leaked == [], f"a password is in the rendered tree: {leaked}"


def test_grafanas_admin_password_is_generated_root_only_and_not_the_packages_default():
    """Grafana itself cannot be installed here: its environment file, where the role puts the
    password Grafana makes its first admin with, is what is checked."""
    hosts = D.hosts_in("service_grafana")
    if not hosts:
        pytest.skip("the model runs no Grafana")
    host = D.host(hosts[0])
    env = host.file("/etc/default/grafana-server")
    assert env.user == "root" and env.mode == 0o600, f"{env.path}: {env.user} {oct(env.mode)}"
    found = re.findall(r"^GF_SECURITY_ADMIN_PASSWORD=(.*)$", env.content_string, re.M)
    assert len(found) == 1 and found[0] not in ("", "admin") and len(found[0]) >= 24, "no generated admin password"
    kept = host.file("/etc/hal-provision/secrets/grafana_admin_pass")
    assert kept.user == "root" and kept.mode == 0o600 and kept.content_string.strip() == found[0]
    leaked = [
        str(p) for p in D.inventory.parent.rglob("*") if p.is_file() and found[0] in p.read_text(errors="replace")
    ]
    assert leaked == [], f"Grafana's admin password is in the rendered tree: {leaked}"


# ---- the agents ------------------------------------------------------------------------------


@pytest.mark.parametrize("host", AGENT_HOSTS)
def test_agent_runs_the_rendered_configuration(host):
    node = D.host(host)
    conf = node.file("/etc/telegraf/telegraf.conf")
    assert conf.content_string == D.telegraf_conf(host)
    extra = sorted((D.files / "etc/telegraf/hosts" / host).glob("*.conf"))
    for path in extra:
        assert node.file(f"/etc/telegraf/telegraf.d/{path.name}").content_string == path.read_text()
    env = node.file("/etc/default/telegraf")
    assert env.user == "root" and env.group == "telegraf" and env.mode == 0o640
    svc = node.service(AGENT)
    assert svc.is_running and svc.is_enabled, D.journal(host, AGENT)
    # The agent runs unprivileged.
    assert node.check_output("systemctl show -p User --value %s", AGENT) == "telegraf"


@pytest.mark.parametrize("host", AGENT_HOSTS)
def test_agent_writes_over_https_verified_by_the_cluster_ca(host):
    """Its output is the https URL with the cluster CA's certificate as tls_ca (the file on the
    node, the CA's own), and its points of the last two intervals are in the database."""
    if not FACTS.get("tls"):
        pytest.skip("the model has monitoring.influxdb.tls: false")
    import tomllib

    node = D.host(host)
    (out,) = tomllib.loads(node.file("/etc/telegraf/telegraf.conf").content_string)["outputs"]["influxdb"]
    assert out["urls"] == [FACTS["url"]] and out["urls"][0].startswith("https://") and out["tls_ca"] == FACTS["ca_file"]
    assert out.get("insecure_skip_verify") is False
    ca = node.file(FACTS["ca_file"])
    assert (ca.user, ca.mode) == ("root", 0o644) and ca.content_string.strip() == cluster_ca().strip()

    def written() -> int:
        got = values(
            query(f"SELECT count(uptime) FROM system WHERE host = '{host}' AND time > now() - {2 * INTERVAL + 5}s")
        )
        return got[0] if got else 0

    assert retry(lambda: written() >= 1, 2 * INTERVAL + 10, 5), (
        f"no point from {host} in the last two intervals\n" + D.journal(host, AGENT)
    )


def test_grafanas_datasource_verifies_influxdb_with_the_cluster_ca():
    """Grafana cannot be installed here: the datasource file the role installed is checked, as
    Grafana reads it: https, tlsAuthWithCACert, and the cluster CA's PEM in place of the rendered
    placeholder."""
    import yaml

    hosts = D.hosts_in("service_grafana")
    if not hosts or not FACTS.get("tls"):
        pytest.skip("the model runs no Grafana, or InfluxDB without TLS")
    text = D.host(hosts[0]).file("/etc/grafana/provisioning/datasources/hal.yaml").content_string
    (source,) = yaml.safe_load(text)["datasources"]
    assert source["url"] == FACTS["url"] and source["jsonData"]["tlsAuthWithCACert"] is True
    assert source["secureJsonData"]["tlsCACert"].strip() == cluster_ca().strip()
    assert source["secureJsonData"]["password"].startswith("$"), "a password in the datasource file"


def test_slurm_collector_runs_on_the_controller_alone():
    with_slurm = [h for h in AGENT_HOSTS if (D.files / "etc/telegraf/hosts" / h / "hal-slurm.conf").is_file()]
    assert with_slurm in ([], [D.controller])


# ---- every panel query, against the real database -------------------------------------------


@pytest.fixture(scope="module")
def jobs():
    """A running swbatch job and a held (pending) one, for the job panels; cancelled after."""
    part = next((p for p, n in D.partitions().items() if n), None)
    if part is None:
        pytest.skip("the model has no partition with nodes")
    vps = json.loads(D.rendered("etc/swsuite/virtual-partitions.json") or '{"virtual_partitions": {}}')
    vp = min((n for n, v in vps["virtual_partitions"].items() if v["kind"] == "gpu"), default=None)
    # swbatch takes a job script (no --wrap), as a user would write one.
    script = (
        "cat > /tmp/hal-monitored.sh <<'EOF'\n#!/bin/bash\nsleep 600\nEOF\ncd /tmp && "
        + (f"swbatch -p {vp} -t 0:10" if vp else f"sbatch -p {part} -t 10")
        + " --job-name=hal-monitored --output=/dev/null /tmp/hal-monitored.sh"
    )
    running = re.search(r"(\d+)", D.user_ok(script)).group(1)
    held = D.sbatch(f"--hold -p {part} -N1 -t 5 --chdir=/tmp -o /dev/null --wrap true")
    try:
        assert retry(lambda: D.user_ok(f"squeue -h -j {running} -o %T").strip() == "RUNNING", 60, 2), (
            f"job {running} never ran"
        )
        yield {"running": running, "held": held, "user": TEST_USER}
    finally:
        D.as_user(D.login, f"scancel {running} {held}", 30)


@pytest.mark.parametrize("board,title,ref,q", PANELS, ids=[f"{b}:{t}:{r}" for b, t, r, _ in PANELS])
def test_every_panel_query_returns_data(jobs, board, title, ref, q):
    # Within two intervals every collector has written at least once since the jobs started.
    series = retry(lambda: values(query(concrete(q))), 2 * INTERVAL + 15, 5)
    assert series, f"dashboard {board}, panel {title!r} ({ref}) has no data:\n{concrete(q)}"


def test_running_swbatch_job_shows_in_the_job_panels(jobs):
    job_queries = [q for _b, _t, _r, q in PANELS if reads(q, "slurm_job")]
    assert job_queries, "no panel reads slurm_job (the running jobs)"

    def seen():
        series = [s for q in job_queries for s in query(concrete(q))]
        return any(jobs["running"] in json.dumps(s) for s in series)

    assert retry(seen, 2 * INTERVAL + 15, 5), f"job {jobs['running']} is in no job panel's data"
    user_queries = [q for _b, _t, _r, q in PANELS if reads(q, "slurm_jobs") and "user" in q]
    assert user_queries, "no panel reads jobs per user"
    # The per-user series may land a collector run after the job's own (seen once on the
    # sandbox): wait for it as for the job.
    assert retry(
        lambda: any(jobs["user"] in json.dumps(query(concrete(q))) for q in user_queries), 2 * INTERVAL + 15, 5
    ), f"{jobs['user']} is in no per-user job panel"
