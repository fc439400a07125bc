"""The prometheus and node_exporter roles' own pieces, run for real on this machine.

* web.yml: the role's template, filled with the bcrypt hash its hash program prints (run under
  the system's Python with Debian's python3-bcrypt, as on the node), passes `promtool check
  web-config`, and a real Prometheus 2.42 started with it serves only HTTPS with a certificate
  the test's CA signed: plain HTTP is refused, no login and a wrong password get 401, the
  grafana user gets 200, a client that does not trust the CA fails.
* The hash program keeps the current hash while it matches the password (web.yml unchanged on a
  second converge) and makes a new one when the password changes.
* The options the templates write are ones the daemons accept (`--help` names every flag).
* The plays: Prometheus only where its configuration is rendered, the node exporter on the nodes
  of groups with a rendered runner configuration; the collectors are the telegraf role's one
  copy (tasks/collectors.yml), whose change restarts the runner.
"""

from __future__ import annotations

import base64
import datetime
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import jinja2
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.unit.roles.test_fleet_roles import run_local_playbook

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "prometheus"
NODE_ROLE = REPO / "roles" / "node_exporter"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
SYSTEM_PYTHON = "/usr/bin/python3"
ANSIBLE_PLAYBOOK = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")


def _has_bcrypt() -> bool:
    return subprocess.run([SYSTEM_PYTHON, "-c", "import bcrypt"], capture_output=True).returncode == 0


needs_prometheus = pytest.mark.skipif(
    not (Path(PROMETHEUS).exists() and Path(PROMTOOL).exists() and _has_bcrypt()),
    reason="needs Debian's prometheus (prometheus, promtool) and python3-bcrypt",
)


def _vars(role: Path, name: str = "main") -> dict:
    return yaml.safe_load((role / "vars" / f"{name}.yml").read_text())


def hash_password(password: str, current: str = "") -> str:
    """The role's hash program (vars/main.yml __prometheus_hash_program), as the node runs it."""
    program = _vars(ROLE)["__prometheus_hash_program"]
    out = subprocess.run(
        [SYSTEM_PYTHON, "-c", program],
        input=json.dumps({"password": password, "current": current}),
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def web_yml(cert: Path, key: Path, hashed: str) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["to_json"] = json.dumps
    template = env.from_string((ROLE / "templates" / "web.yml.j2").read_text())
    return template.render(
        __prometheus_tls_cert=str(cert),
        __prometheus_tls_key=str(key),
        __prometheus_facts={"user": "grafana"},
        __prometheus_hash={"stdout": hashed},
    )


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca_and_server(tmp: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for localhost/127.0.0.1 it signs (as the cluster CA would)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("test cluster CA"))
        .issuer_name(_name("test cluster CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP384R1())
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    paths = tmp / "ca.crt", tmp / "prometheus.crt", tmp / "prometheus.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    paths[2].chmod(0o600)
    return paths


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, ca: Path | None, auth: tuple[str, str] | None = None) -> int:
    context = ssl.create_default_context(cafile=str(ca)) if ca else ssl.create_default_context()
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


# ---- the hash program ------------------------------------------------------------------------------------


@needs_prometheus
def test_the_hash_is_kept_while_the_password_matches_and_renewed_when_it_changes():
    first = hash_password("correct horse battery")
    assert first.startswith("$2")
    assert hash_password("correct horse battery", first) == first
    other = hash_password("another password here", first)
    assert other != first and other.startswith("$2")
    # Not a bcrypt hash (a hand edit): a fresh one.
    assert hash_password("correct horse battery", "plain").startswith("$2")


# ---- web.yml against a real Prometheus ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_prometheus(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prom-web")
    ca, cert, key = make_ca_and_server(tmp)
    password = "a-long-grafana-password-0123"
    web = tmp / "web.yml"
    web.write_text(web_yml(cert, key, hash_password(password)))
    checked = subprocess.run([PROMTOOL, "check", "web-config", str(web)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = tmp / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 15s\n")
    port = _free_port()
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.config.file={web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "log").open("w"),
    )
    try:
        url = f"https://localhost:{port}"
        for _ in range(100):
            try:
                if _get(f"{url}/-/ready", ca, ("grafana", password)) == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("Prometheus did not become ready: " + (tmp / "log").read_text()[-2000:])
        yield {"url": url, "port": port, "ca": ca, "password": password, "web": web}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@needs_prometheus
def test_web_config_lets_grafana_in_over_https(tls_prometheus):
    p = tls_prometheus
    assert _get(f"{p['url']}/api/v1/status/buildinfo", p["ca"], ("grafana", p["password"])) == 200


@needs_prometheus
def test_no_login_and_a_wrong_password_get_401(tls_prometheus):
    p = tls_prometheus
    assert _get(f"{p['url']}/api/v1/status/buildinfo", p["ca"]) == 401
    assert _get(f"{p['url']}/api/v1/status/buildinfo", p["ca"], ("grafana", "not-the-password-at-all")) == 401
    assert _get(f"{p['url']}/api/v1/status/buildinfo", p["ca"], ("admin", p["password"])) == 401


@needs_prometheus
def test_plain_http_is_refused(tls_prometheus):
    p = tls_prometheus
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            f"http://127.0.0.1:{p['port']}/api/v1/status/buildinfo", timeout=5
        ) as response:
            status = response.status
    except urllib.error.HTTPError as e:
        status = e.code
    # Go's TLS server answers a plain HTTP request with 400 and nothing of the API.
    assert status == 400


@needs_prometheus
def test_a_client_without_the_cluster_ca_fails(tls_prometheus):
    p = tls_prometheus
    with pytest.raises(urllib.error.URLError) as raised:
        _get(f"{p['url']}/api/v1/status/buildinfo", None, ("grafana", p["password"]))
    assert isinstance(raised.value.reason, ssl.SSLCertVerificationError)


@needs_prometheus
def test_web_config_holds_the_hash_only(tls_prometheus):
    text = tls_prometheus["web"].read_text()
    assert tls_prometheus["password"] not in text
    assert yaml.safe_load(text)["basic_auth_users"]["grafana"].startswith("$2")
    assert yaml.safe_load(text)["tls_server_config"]["min_version"] == "TLS12"


# ---- the daemons' options --------------------------------------------------------------------------------


def _flags(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    return done.stdout + done.stderr


@pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="needs Debian's prometheus")
@pytest.mark.parametrize(
    "binary, args_var, role",
    [
        (PROMETHEUS, "__prometheus_args", ROLE),
        ("/usr/bin/prometheus-alertmanager", "__prometheus_alertmanager_args", ROLE),
        ("/usr/bin/prometheus-node-exporter", "__node_exporter_args", NODE_ROLE),
    ],
)
def test_every_option_the_roles_write_is_one_the_daemon_knows(binary, args_var, role):
    if not Path(binary).exists():
        pytest.skip(f"{binary} is not installed")
    text = _vars(role)[args_var]
    flags = set(__import__("re").findall(r"--[a-z][\w.-]*[a-z]", text if isinstance(text, str) else " ".join(text)))
    assert flags
    known = _flags([binary, "--help"])
    for flag in flags:
        assert flag in known, f"{binary} has no option {flag}"


def test_alertmanager_listens_on_the_loopback_only_and_has_no_peers():
    args = _vars(ROLE)["__prometheus_alertmanager_args"]
    assert args[0].startswith("--web.listen-address=127.0.0.1:")
    assert "--cluster.listen-address=" in args


# ---- the plays and the shared collectors ------------------------------------------------------------------


def test_monitoring_plays_pick_the_backend_from_what_is_rendered():
    plays = yaml.safe_load((REPO / "playbooks" / "monitoring.yml").read_text())
    roles = {r["role"]: (play["hosts"], r.get("when", "")) for play in plays for r in play["roles"]}
    assert roles["prometheus"][0] == "service_monitoring_db"
    assert "/etc/prometheus/prometheus.yml" in roles["prometheus"][1]
    assert roles["node_exporter"][0] == "all"
    assert "/etc/hal-provision/metrics/" in roles["node_exporter"][1] and "hal_node_group" in roles["node_exporter"][1]
    assert "monitoring.json" in roles["influxdb"][1]


def test_the_node_exporter_role_uses_the_telegraf_roles_one_copy_of_the_collectors():
    install = yaml.safe_load((NODE_ROLE / "tasks" / "install.yml").read_text())
    included = [t["ansible.builtin.include_role"] for t in install if "ansible.builtin.include_role" in t]
    assert included == [
        {
            "name": "telegraf",
            "tasks_from": "collectors",
            "handlers_from": "collectors",
            "apply": {"tags": ["node_exporter", "node_exporter_install"]},
        }
    ]
    collectors = yaml.safe_load((REPO / "roles" / "telegraf" / "tasks" / "collectors.yml").read_text())
    notified = {t.get("notify") for t in collectors} - {None}
    assert notified == {"hal collectors changed"}
    handlers = yaml.safe_load((NODE_ROLE / "handlers" / "main.yml").read_text())
    assert any(h.get("listen") == "hal collectors changed" and "hal-metrics" in h["name"] for h in handlers)
    # The included handlers file is empty: the telegraf agent's restart never joins this play.
    assert yaml.safe_load((REPO / "roles" / "telegraf" / "handlers" / "collectors.yml").read_text()) == []


# ---- a role the play skips resolves nothing it cannot ------------------------------------------------------


def _roles_the_plays_skip_by_when() -> list[str]:
    """The roles a play of playbooks/ applies with a `when` (where the model has no use for them)."""
    found = set()
    for path in (REPO / "playbooks").glob("*.yml"):
        for play in yaml.safe_load(path.read_text()) or []:
            for entry in play.get("roles") or []:
                if isinstance(entry, dict) and "when" in entry:
                    found.add(entry["role"])
    return sorted(found)


@pytest.mark.skipif(not Path(ANSIBLE_PLAYBOOK).exists(), reason="ansible-playbook is not installed")
@pytest.mark.parametrize("tree", ["hal", "fleet"])  # backend influxdb, backend prometheus
def test_every_role_skipped_by_its_plays_when_runs_clean(tmp_path, tree):
    """Ansible resolves a task's delegate_to (and loop) before its `when`, even where the play's
    `when` skips the whole role: a delegate_to built from facts the role sets itself (the
    prometheus role's CA host) failed HAL's sandbox, whose influxdb backend skips that role. Every
    role a play skips by `when`, skipped, on HAL's rendered tree and the fleet's: nothing fails,
    nothing changes."""
    roles = _roles_the_plays_skip_by_when()
    assert {"prometheus", "node_exporter", "influxdb", "telegraf"} <= set(roles)
    playbook = tmp_path / "skipped.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Every role, skipped",
                    "hosts": "all",
                    "gather_facts": False,
                    "roles": [{"role": r, "when": False} for r in roles],
                }
            ]
        )
    )
    inventory = tmp_path / "hosts.json"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {"hal-mgmt1": {"ansible_python_interpreter": sys.executable}},
                    "vars": {"hal_rendered_dir": str(REPO / "tests/golden" / tree / "files")},
                }
            }
        )
    )
    done, result = run_local_playbook(playbook, inventory)
    failed = [
        f"{t['task']['name']}: {t['hosts']['hal-mgmt1'].get('msg')}"
        for p in result["plays"]
        for t in p["tasks"]
        if t["hosts"].get("hal-mgmt1", {}).get("failed")
    ]
    assert done.returncode == 0 and not failed, failed or done.stderr[-2000:]
    stats = result["stats"]["hal-mgmt1"]
    assert stats["changed"] == 0 and stats["failures"] == 0 and stats["ok"] == 0, stats
