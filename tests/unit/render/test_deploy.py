"""Deploy (pull mode): the model's section and its derived views, the checks (one row
per mistake, as an edit of the embedded HAL description with a pull section added), and the
rendered deploy.json, units, the points' nginx sites and inventory groups."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import yaml

from hal_provision.findings import Level
from hal_provision.hostlist import expand
from hal_provision.render import render_all
from hal_provision.render.deploy import BUNDLE_ROOT, CONFIG, NGINX_SITES, SERVICE, TIMER, nginx_site_path

from tests.conftest import SystemdRoot, hal_with

E = Level.error
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
NO_SYSTEMD = "systemd-analyze is not installed on this machine (Debian: apt-get install systemd)"
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
NO_NGINX = (
    "nginx is not installed on this machine (Debian: apt-get install nginx; bootstrap.sh leaves it out, "
    "as Debian's package starts nginx on port 80 when it is installed)"
)

PULL = """
deploy:
  mode: pull
  herd_size: 500
  distribution:
    - {host: hal-mgmt1, serves: "hal[01-16]"}
  port: 8181
  schedule: "*:0/30"
  randomized_delay_s: 300
  drain_wait_s: 3600
"""
POINT = '    - {host: hal-mgmt1, serves: "hal[01-16]"}\n'


def _with_pull(text: str) -> str:
    return text + PULL


ROWS_START = [_with_pull]


def points(*lines: str):
    return (POINT, "".join(f"    - {line}\n" for line in lines))


TWO_POINTS = points('{host: hal-mgmt1, serves: "hal[01-08]"}', '{host: hal-mgmt2, serves: "hal[09-16]"}')

ROWS = [
    (
        "point-not-a-host",
        [points('{host: hal-mgnt1, serves: "hal[01-16]"}')],
        E,
        "deploy.distribution[0].host",
        "'hal-mgnt1' is not a host of the model; did you mean 'hal-mgmt1'?",
    ),
    (
        "point-is-a-pull-node",
        [points('{host: hal01, serves: "hal[02-16]"}')],
        E,
        "deploy.distribution[0].host",
        "hal01 is a pull node",
    ),
    (
        "serves-unknown-hosts",
        [points('{host: hal-mgmt1, serves: "hal[01-18]"}')],
        E,
        "deploy.distribution[0].serves",
        "hal[17-18] (2 hosts) are not hosts of the model",
    ),
    (
        "serves-a-login-node",
        [points('{host: hal-mgmt1, serves: "hal[01-16],hal-login"}')],
        E,
        "deploy.distribution[0].serves",
        "hal-login is not a pull node",
    ),
    (
        "node-served-twice",
        [points('{host: hal-mgmt1, serves: "hal[01-10]"}', '{host: hal-mgmt2, serves: "hal[08-16]"}')],
        E,
        "deploy.distribution[1].serves",
        "hal[08-10] (3 hosts) are also served by hal-mgmt1 (deploy.distribution[0])",
    ),
    (
        "node-not-served",
        [points('{host: hal-mgmt1, serves: "hal[01-08]"}', '{host: hal-mgmt2, serves: "hal[09-15]"}')],
        E,
        "deploy.distribution",
        "hal16 is a pull node that no distribution point serves",
    ),
    (
        "several-points-one-without-serves",
        [points("{host: hal-mgmt1}", '{host: hal-mgmt2, serves: "hal[09-16]"}')],
        E,
        "deploy.distribution[0]",
        "point hal-mgmt1 has no `serves`: with 2 points",
    ),
    (
        "herd-too-large",
        [("  herd_size: 500\n", "  herd_size: 10\n")],
        E,
        "deploy.distribution[0].serves",
        "hal-mgmt1 serves 16 pull nodes, more than deploy.herd_size (10): split "
        "them over more distribution points (at least 2 for 16 pull nodes)",
    ),
    ("port-zero", [("  port: 8181\n", "  port: 0\n")], E, "deploy.port", "0 is not a TCP port: write 1-65535"),
    ("port-too-high", [("  port: 8181\n", "  port: 70000\n")], E, "deploy.port", "70000 is not a TCP port"),
    (
        "schedule-cron-syntax",
        [('  schedule: "*:0/30"\n', '  schedule: "*/30 * * * *"\n')],
        E,
        "deploy.schedule",
        "'*/30 * * * *' is not a calendar expression",
    ),
    (
        "mode-unknown",
        [("  mode: pull\n", "  mode: ansible-pull\n")],
        E,
        "deploy.mode",
        "Input should be 'push' or 'pull'",
    ),
]


@pytest.mark.parametrize(
    ("mutation", "level", "path", "message"), [pytest.param([*ROWS_START, *r[1]], *r[2:], id=r[0]) for r in ROWS]
)
def test_deploy_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


ACCEPTED = [
    ("default-point", [lambda text: text.replace("  distribution:\n" + POINT, "")]),
    ("one-point-without-serves", [(POINT, "    - {host: hal-mgmt2}\n")]),
    ("two-points", [TWO_POINTS]),
    ("daily", [('  schedule: "*:0/30"\n', "  schedule: daily\n")]),
    ("push-ignores-the-rest", [("  mode: pull\n", "  mode: push\n"), (POINT, "    - {host: hal01}\n")]),
]


@pytest.mark.parametrize("mutation", [pytest.param(m, id=name) for name, m in ACCEPTED])
def test_valid_deploy_variation_is_accepted(check_file, edited, mutation):
    _file, loaded = check_file(edited(_with_pull, *mutation))
    assert loaded.model is not None
    assert [f.format() for f in loaded.findings if f.level is not Level.info] == []


# ---- the model's views --------------------------------------------------------------------


def test_push_is_the_default_and_has_no_pull_nodes_or_points():
    hal = hal_with()
    assert hal.deploy.mode == "push"
    assert len(hal.deploy_pull_nodes) == 0 and hal.deploy_points == ()


def test_default_point_is_the_first_management_host_serving_every_compute_node():
    hal = hal_with(_with_pull, lambda text: text.replace("  distribution:\n" + POINT, ""))
    (point,) = hal.deploy_points
    assert point.host == "hal-mgmt1"
    assert str(point.serves) == str(hal.slurm_nodes) == "hal[01-16]"


def test_host_address_is_the_primary_networks():
    hal = hal_with()
    hostvars = yaml.safe_load(render_all(hal)["inventory/hosts.yml"])["all"]["children"]["nodes_compute"]["hosts"]
    assert hal.host_address("hal05") == hostvars["hal05"]["ansible_host"]
    assert hal.host_address("nohost") is None


# ---- the rendered files -------------------------------------------------------------------

TWOGEN = "tests/data/clusters/x86-twogen.yml"


@pytest.fixture(scope="module")
def twogen_files():
    from hal_provision.loader import validate

    return render_all(validate(TWOGEN).model)


def test_deploy_json_names_each_nodes_point_by_its_primary_address(twogen_files):
    data = json.loads(twogen_files[CONFIG])
    url = "http://10.20.0.2:8181/"  # tg-mgmt's mgmt address, deploy.port
    nodes = expand("tg[01-08]")
    assert data == {
        "mode": "pull",
        "cluster": "twogen",
        "release_key": "/etc/hal-provision/release.pub",
        "version_file": "/var/lib/hal-provision/converge/last.json",
        "port": 8181,
        "drain_wait_s": 3600,
        "bundle_root": "/srv/hal-provision/bundles",
        "points": [{"host": "tg-mgmt", "address": "10.20.0.2", "url": url, "serves": nodes}],
        "nodes": dict.fromkeys(nodes, url),
    }


def test_two_points_split_the_nodes():
    hal, files = pull_case("two-points")
    data = json.loads(files[CONFIG])
    assert [(p["host"], p["serves"][0], p["serves"][-1]) for p in data["points"]] == [
        ("hal-mgmt1", "hal01", "hal08"),
        ("hal-mgmt2", "hal09", "hal16"),
    ]
    assert data["nodes"]["hal09"] == data["points"][1]["url"] != data["nodes"]["hal08"]


def test_push_renders_nothing_of_pull_mode():
    files = render_all(hal_with())
    assert not {CONFIG, SERVICE, TIMER, "inventory/deploy.yml"} & set(files)
    assert not [path for path in files if path.startswith(NGINX_SITES)]


def test_units_and_site_take_the_models_values(twogen_files):
    timer, service, site = twogen_files[TIMER], twogen_files[SERVICE], twogen_files[nginx_site_path("tg-mgmt")]
    assert "OnCalendar=*:0/30\n" in timer and "RandomizedDelaySec=300\n" in timer and "OnBootSec=120s\n" in timer
    assert "Persistent=true\n" in timer
    assert "Type=oneshot\n" in service and "ExecStart=/usr/local/sbin/hal-converge\n" in service
    assert "Restart=no\n" in service
    assert "listen 10.20.0.2:8181;" in site and "root /srv/hal-provision/bundles;" in site and "autoindex off;" in site
    assert "location = /current.json" in site and "no-store" in site
    # nginx takes limit_except only inside a location: each of the two has its own
    assert site.count("limit_except GET {") == 2 and site.index("location = /current.json") < site.index(
        "limit_except GET {"
    )


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason=NO_SYSTEMD)
def test_systemd_verifies_the_units(twogen_files, tmp_path):
    """systemd-analyze verify loads both units in a root with the system's units and a
    stand-in hal-converge; a bad calendar is refused (the control)."""
    root = SystemdRoot(tmp_path, SYSTEMD_ANALYZE)
    root.unit("hal-converge.service", twogen_files[SERVICE])
    root.unit("hal-converge.timer", twogen_files[TIMER])
    root.program("/usr/local/sbin/hal-converge")
    ok = root.verify("hal-converge.service", "hal-converge.timer")
    assert ok.returncode == 0 and not ok.stderr.strip(), ok.stderr
    root.unit("hal-converge.timer", twogen_files[TIMER].replace("OnCalendar=*:0/30", "OnCalendar=halfhourly"))
    bad = root.verify("hal-converge.service", "hal-converge.timer")
    assert "Failed to parse calendar specification" in bad.stderr, bad.stderr


# ---- the points' nginx sites ----------------------------------------------------------------

FLEET = "tests/data/clusters/fleet.yml"
PULL_CASES = ["fleet", "two-points"]  # one point serving every node; two splitting them


@functools.cache
def pull_case(name: str):
    """(model, rendered tree) of a pull-mode case: the fleet test cluster, or HAL with two points."""
    from hal_provision.loader import validate

    cluster = validate(FLEET).model if name == "fleet" else hal_with(_with_pull, TWO_POINTS)
    return cluster, render_all(cluster)


def server_rules(site: str) -> tuple[list[str], list[str]]:
    """A site's server-level `listen` values and access rules (`allow X`, `deny all`), in order;
    a location's own rules (limit_except's deny) are indented deeper and not among them."""
    return re.findall(r"^    listen (.+);$", site, re.M), re.findall(r"^    ((?:allow|deny) .+);$", site, re.M)


def test_fleet_point_listens_on_its_address_and_lets_in_its_nodes_only():
    _fleet, files = pull_case("fleet")
    assert server_rules(files[nginx_site_path("fl-mgmt")]) == (
        ["10.89.79.10:8181"],
        ["allow 10.89.79.21", "allow 10.89.79.22", "allow 10.89.79.23", "allow 10.89.79.24", "deny all"],
    )


@pytest.mark.parametrize("case", PULL_CASES)
def test_each_point_has_a_site_on_its_url_open_to_the_nodes_it_serves(case):
    """One site per point, none other; each listens where deploy.json sends its nodes, on no
    bare port, allows each of its nodes' primary address and denies the rest."""
    cluster, files = pull_case(case)
    data = json.loads(files[CONFIG])
    sites = {path: text for path, text in files.items() if path.startswith(NGINX_SITES + "/")}
    assert sorted(sites) == sorted(nginx_site_path(p["host"]) for p in data["points"])
    for point in data["points"]:
        listens, access = server_rules(sites[nginx_site_path(point["host"])])
        assert listens == [f"{point['address']}:{data['port']}"] and point["url"] == f"http://{listens[0]}/"
        assert access == [f"allow {cluster.host_address(node)}" for node in point["serves"]] + ["deny all"]
        assert point["serves"] and None not in {cluster.host_address(node) for node in point["serves"]}
    assert not [path for path, text in sites.items() if re.search(r"^\s*listen\s+\d+\s*;", text, re.M)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class NginxPrefix:
    """A site inside a minimal nginx.conf of its own (pid, logs and temporary files under
    `tmp_path`), moved to the loopback: `nginx -t` binds the listen address, and the point's is
    not this machine's. test() runs `nginx -t`; serve() runs it in the foreground."""

    def __init__(self, tmp_path, site: str):
        self.prefix, self.port = tmp_path, free_port()
        (listen,), _access = server_rules(site)
        (tmp_path / "site.conf").write_text(site.replace(f"    listen {listen};", f"    listen 127.0.0.1:{self.port};"))
        temp = "".join(
            f"    {kind}_temp_path {tmp_path}/{kind};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (tmp_path / "nginx.conf").write_text(
            f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
            f"http {{\n    access_log off;\n{temp}    include {tmp_path}/site.conf;\n}}\n"
        )
        self.argv = [NGINX, "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-e", str(tmp_path / "error.log")]

    def test(self) -> subprocess.CompletedProcess:
        return subprocess.run([*self.argv, "-t"], capture_output=True, text=True, timeout=30)

    @contextlib.contextmanager
    def serve(self):
        """nginx in one foreground process (no workers, so no user to switch to), until the end
        of the block; yields its base URL."""
        proc = subprocess.Popen(
            [*self.argv, "-g", "daemon off; master_process off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    break
                except OSError:
                    assert proc.poll() is None, proc.communicate()[1]
                    assert time.monotonic() < deadline, "nginx did not listen within 10 s"
                    time.sleep(0.05)
            yield f"http://127.0.0.1:{self.port}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def request(url: str, method: str = "GET") -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as refused:
        return refused.code, dict(refused.headers)


@pytest.mark.skipif(NGINX is None, reason=NO_NGINX)
@pytest.mark.parametrize("case", PULL_CASES)
def test_nginx_takes_every_points_site(case, tmp_path):
    """Debian 12's nginx (`nginx -t`) takes each rendered site; the same site with limit_except
    at server level, where nginx takes it nowhere, is refused (the control)."""
    _cluster, files = pull_case(case)
    sites = {path: text for path, text in files.items() if path.startswith(NGINX_SITES + "/")}
    for n, (path, site) in enumerate(sorted(sites.items())):
        (tmp_path / str(n)).mkdir()
        ok = NginxPrefix(tmp_path / str(n), site).test()
        assert ok.returncode == 0, f"{path}:\n{ok.stderr}"
    bad = site.replace("    deny all;\n", "    deny all;\n    limit_except GET { deny all; }\n", 1)
    (tmp_path / "bad").mkdir()
    refused = NginxPrefix(tmp_path / "bad", bad).test()
    assert refused.returncode != 0 and '"limit_except" directive is not allowed here' in refused.stderr, refused.stderr


@pytest.mark.skipif(NGINX is None, reason=NO_NGINX)
def test_served_site_gives_its_nodes_bundles_read_only_and_refuses_anyone_else(tmp_path):
    """fl-mgmt's site, served on the loopback from a bundle root holding current.json: this
    machine is none of its nodes, so GET is refused (403); with 127.0.0.1 let in as the nodes
    are, GET gives current.json uncached, a missing file is 404 and a PUT is refused."""
    _fleet, files = pull_case("fleet")
    site = files[nginx_site_path("fl-mgmt")]
    root = tmp_path / "bundles"
    root.mkdir()
    (root / "current.json").write_text('{"version": "0123456789abcdef"}\n')
    site = site.replace(f"    root {BUNDLE_ROOT};", f"    root {root};")
    as_rendered, as_a_node = tmp_path / "rendered", tmp_path / "node"
    as_rendered.mkdir()
    as_a_node.mkdir()
    with NginxPrefix(as_rendered, site).serve() as url:
        assert request(f"{url}/current.json")[0] == 403
    let_in = site.replace("    deny all;\n", "    allow 127.0.0.1;\n    deny all;\n", 1)
    with NginxPrefix(as_a_node, let_in).serve() as url:
        status, headers = request(f"{url}/current.json")
        assert status == 200 and headers.get("Cache-Control") == "no-store", headers
        assert request(f"{url}/missing.tar.gz")[0] == 404
        assert request(f"{url}/current.json", "PUT")[0] == 403


@pytest.mark.parametrize("serves", ['"@role:compute"', '"@compute"', '"@role:compute,hal-login"'])
def test_a_point_serves_node_groups_and_roles_by_name(check_file, edited, serves):
    """serves takes @GROUP and @role:ROLE like every other placement: a grown group needs no second edit."""
    _file, loaded = check_file(edited(_with_pull, (POINT, f"    - {{host: hal-mgmt1, serves: {serves}}}\n")))
    if "hal-login" in serves:  # resolved like any placement, then checked: a login node pulls nothing
        assert [f.message.split(":")[0] for f in loaded.findings if f.dotted == "deploy.distribution[0].serves"] == [
            "hal-login is not a pull node"
        ], [f.format() for f in loaded.findings]
        return
    assert loaded.model is not None and not [f for f in loaded.findings if f.dotted.startswith("deploy")], [
        f.format() for f in loaded.findings
    ]
    (point,) = loaded.model.deploy_points
    assert point.host == "hal-mgmt1" and list(point.serves) == [f"hal{i:02d}" for i in range(1, 17)]
