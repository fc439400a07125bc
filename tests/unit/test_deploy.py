"""Deploy (issue 34, pull mode): the model's section and its derived views, the checks (one row
per mistake, as an edit of the embedded HAL description with a pull section added), and the
rendered deploy.json, units, nginx site and inventory groups."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from hal_provision.findings import Level
from hal_provision.hostlist import expand
from hal_provision.render import render_all
from hal_provision.render.deploy import CONFIG, NGINX_SITE, SERVICE, TIMER

from tests.conftest import SystemdRoot, hal_with

E = Level.error
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
NO_SYSTEMD = "systemd-analyze is not installed on this machine (Debian: apt-get install systemd)"

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


ROWS = [
    ("point-not-a-host", [points('{host: hal-mgnt1, serves: "hal[01-16]"}')],
     E, "deploy.distribution[0].host", "'hal-mgnt1' is not a host of the model; did you mean 'hal-mgmt1'?"),
    ("point-is-a-pull-node", [points('{host: hal01, serves: "hal[02-16]"}')],
     E, "deploy.distribution[0].host", "hal01 is a pull node"),
    ("serves-unknown-hosts", [points('{host: hal-mgmt1, serves: "hal[01-18]"}')],
     E, "deploy.distribution[0].serves", "hal[17-18] (2 hosts) are not hosts of the model"),
    ("serves-a-login-node", [points('{host: hal-mgmt1, serves: "hal[01-16],hal-login"}')],
     E, "deploy.distribution[0].serves", "hal-login is not a pull node"),
    ("node-served-twice", [points('{host: hal-mgmt1, serves: "hal[01-10]"}', '{host: hal-mgmt2, serves: "hal[08-16]"}')],
     E, "deploy.distribution[1].serves", "hal[08-10] (3 hosts) are also served by hal-mgmt1 (deploy.distribution[0])"),
    ("node-not-served", [points('{host: hal-mgmt1, serves: "hal[01-08]"}', '{host: hal-mgmt2, serves: "hal[09-15]"}')],
     E, "deploy.distribution", "hal16 is a pull node that no distribution point serves"),
    ("several-points-one-without-serves", [points('{host: hal-mgmt1}', '{host: hal-mgmt2, serves: "hal[09-16]"}')],
     E, "deploy.distribution[0]", "point hal-mgmt1 has no `serves`: with 2 points"),
    ("herd-too-large", [("  herd_size: 500\n", "  herd_size: 10\n")],
     E, "deploy.distribution[0].serves", "hal-mgmt1 serves 16 pull nodes, more than deploy.herd_size (10): split "
     "them over more distribution points (at least 2 for 16 pull nodes)"),
    ("port-zero", [("  port: 8181\n", "  port: 0\n")], E, "deploy.port", "0 is not a TCP port: write 1-65535"),
    ("port-too-high", [("  port: 8181\n", "  port: 70000\n")], E, "deploy.port", "70000 is not a TCP port"),
    ("schedule-cron-syntax", [('  schedule: "*:0/30"\n', '  schedule: "*/30 * * * *"\n')],
     E, "deploy.schedule", "'*/30 * * * *' is not a calendar expression"),
    ("mode-unknown", [("  mode: pull\n", "  mode: ansible-pull\n")], E, "deploy.mode", "Input should be 'push' or 'pull'"),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"),
                         [pytest.param([*ROWS_START, *r[1]], *r[2:], id=r[0]) for r in ROWS])
def test_deploy_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


ACCEPTED = [
    ("default-point", [lambda text: text.replace('  distribution:\n' + POINT, "")]),
    ("one-point-without-serves", [(POINT, "    - {host: hal-mgmt2}\n")]),
    ("two-points", [points('{host: hal-mgmt1, serves: "hal[01-08]"}', '{host: hal-mgmt2, serves: "hal[09-16]"}')]),
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
    hal = hal_with(_with_pull, lambda text: text.replace('  distribution:\n' + POINT, ""))
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
    from hal_provision.cli.validate import validate

    return render_all(validate(TWOGEN).model)


def test_deploy_json_names_each_nodes_point_by_its_primary_address(twogen_files):
    data = json.loads(twogen_files[CONFIG])
    url = "http://10.20.0.2:8181/"  # tg-mgmt's mgmt address, deploy.port
    nodes = expand("tg[01-08]")
    assert data == {"mode": "pull", "version_file": "/var/lib/hal-provision/converge/last.json", "port": 8181,
                    "drain_wait_s": 3600, "bundle_root": "/srv/hal-provision/bundles",
                    "points": [{"host": "tg-mgmt", "address": "10.20.0.2", "url": url, "serves": nodes}],
                    "nodes": dict.fromkeys(nodes, url)}


def test_two_points_split_the_nodes():
    hal = hal_with(_with_pull, points('{host: hal-mgmt1, serves: "hal[01-08]"}', '{host: hal-mgmt2, serves: "hal[09-16]"}'))
    data = json.loads(render_all(hal)[CONFIG])
    assert [(p["host"], p["serves"][0], p["serves"][-1]) for p in data["points"]] == [
        ("hal-mgmt1", "hal01", "hal08"), ("hal-mgmt2", "hal09", "hal16")]
    assert data["nodes"]["hal09"] == data["points"][1]["url"] != data["nodes"]["hal08"]


def test_push_renders_nothing_of_pull_mode():
    files = render_all(hal_with())
    assert not {CONFIG, SERVICE, TIMER, NGINX_SITE, "inventory/deploy.yml"} & set(files)


def test_units_and_site_take_the_models_values(twogen_files):
    timer, service, site = twogen_files[TIMER], twogen_files[SERVICE], twogen_files[NGINX_SITE]
    assert "OnCalendar=*:0/30\n" in timer and "RandomizedDelaySec=300\n" in timer and "OnBootSec=120s\n" in timer
    assert "Persistent=true\n" in timer
    assert "Type=oneshot\n" in service and "ExecStart=/usr/local/sbin/hal-converge\n" in service
    assert "Restart=no\n" in service
    assert "listen 8181;" in site and "root /srv/hal-provision/bundles;" in site and "autoindex off;" in site
    assert 'location = /current.json' in site and "no-store" in site
    # nginx takes limit_except only inside a location: each of the two has its own
    assert site.count("limit_except GET {") == 2 and site.index("location = /current.json") < site.index("limit_except GET {")


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
