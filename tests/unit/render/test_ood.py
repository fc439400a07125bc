"""Open OnDemand: the portal, cluster and app files rendered from the portal's catalogue.

What a person would check by reading them: the portal logs in against the directory, the
cluster file submits to this Slurm, and every app offers exactly the catalogue's virtual
partitions and asks Slurm for exactly what `swbatch -p` would. Where Ruby is installed, every
ERB template compiles and submit.yml.erb is evaluated for a form's values.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import yaml

from hal_provision.loader import default_path, load_text
from hal_provision.model.accounts import base_dn
from hal_provision.render import accounts as acc, ood, portal
from hal_provision.render.common import header

HAL = load_text(default_path().read_text(), "hal.yml").model
APPS = [app.name for app in HAL.portal.apps]
RUBY = shutil.which("erb") and shutil.which("ruby")


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return ood.render(HAL)


@pytest.fixture(scope="module")
def cat() -> dict:
    return portal.catalogue(HAL)


def _app_file(files: dict[str, str], app: str, name: str) -> str:
    return files[f"{ood.OOD_APPS}/{app}/{name}"]


def _catalogue_app(cat: dict, name: str) -> dict:
    return next(a for a in cat["apps"] if a["name"] == name)


def _model(text: str):
    loaded = load_text(text, "c.yml")
    assert loaded.model is not None, loaded.findings
    return loaded.model


# ---- the set of files ----------------------------------------------------------------------------


def test_one_portal_file_one_cluster_file_and_seven_files_per_app(files):
    expected = {ood.PORTAL_CONFIG, f"{ood.OOD_CONFIG}/clusters.d/hal.yml"}
    for app in APPS:
        expected |= {
            f"{ood.OOD_APPS}/{app}/{name}"
            for name in (
                "manifest.yml",
                "form.yml",
                "submit.yml.erb",
                "view.html.erb",
                "template/before.sh.erb",
                "template/script.sh.erb",
                "template/after.sh.erb",
            )
        }
    assert set(files) == expected
    assert list(files) == sorted(files)


def test_render_is_deterministic(files):
    assert ood.render(load_text(default_path().read_text(), "hal.yml").model) == files


def test_every_file_starts_with_the_generated_by_header(files):
    expected = header(HAL)
    for rel, text in files.items():
        if rel.endswith(".html.erb"):  # an ERB comment: nothing of it reaches the page
            assert text.startswith("<%#\n"), rel
            assert all(line.removeprefix("# ") in text.split("-%>")[0] for line in expected.splitlines()), rel
        elif rel.endswith("script.sh.erb"):
            assert text.startswith("#!/bin/bash\n" + expected), rel
        else:
            assert text.startswith(expected), rel


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda t: t[: t.index("\nportal:")] + t[t.index("\nmonitoring:") :], id="no-portal-section"),
        pytest.param(lambda t: t.replace("  portal: hal-mgmt2\n", ""), id="no-portal-host"),
    ],
)
def test_nothing_is_rendered_without_a_portal(edited, edit):
    assert ood.render(_model(edited(edit))) == {}


def test_rendered_whatever_the_front_end(edited, files):
    model = _model(edited(("  front_end: jupyterhub ", "  front_end: open_ondemand ")))
    assert model.portal.front_end == "open_ondemand"
    assert ood.render(model) == files


# ---- ood_portal.yml ------------------------------------------------------------------------------


def test_portal_serves_the_catalogue_server_name_over_tls(files, cat):
    config = yaml.safe_load(files[ood.PORTAL_CONFIG])
    assert config["servername"] == cat["server_name"] == "hal-mgmt2.ncsa.illinois.edu"
    assert config["port"] == 443 and "listen_addr_port" not in config
    assert config["ssl"] == [
        f'SSLCertificateFile "{portal.CA_SIGNED_CERT}"',
        f'SSLCertificateKeyFile "{portal.CA_SIGNED_KEY}"',
    ]


def test_users_log_in_against_the_directory_over_ldaps(files):
    auth = yaml.safe_load(files[ood.PORTAL_CONFIG])["auth"]
    base = base_dn(HAL.accounts, HAL.cluster.domain)
    url = f"ldaps://{acc.server_fqdn(HAL)}:636/ou=People,{base}?uid"
    assert url == "ldaps://hal-mgmt1.ncsa.illinois.edu:636/ou=People,dc=ncsa,dc=illinois,dc=edu?uid"
    assert auth[0] == "AuthType Basic"
    assert auth[1].startswith('AuthName "')
    assert auth[2:] == [
        "AuthBasicProvider ldap",
        f'AuthLDAPURL "{url}"',
        "RequestHeader unset Authorization",
        "Require valid-user",
    ]
    assert acc.CA_CERT in files[ood.PORTAL_CONFIG]  # the comment tells where mod_ldap's trust comes from


def test_sessions_are_proxied_to_compute_nodes_only(files):
    config = yaml.safe_load(files[ood.PORTAL_CONFIG])
    assert config["node_uri"] == "/node"
    pattern = re.compile(config["host_regex"])
    for host in ("hal01", "hal16", "hal07.ncsa.illinois.edu"):
        assert pattern.fullmatch(host), host
    for host in ("hal-mgmt1", "hal-login.ncsa.illinois.edu", "hal01.example.com", "example.com"):
        assert not pattern.fullmatch(host), host


def test_site_certificate_and_port(edited):
    model = _model(
        edited(
            (
                "  start_timeout_seconds: 300",
                "  port: 8443\n  tls: {certificate: /etc/pki/portal.crt, "
                "key: /etc/pki/portal.key}\n  start_timeout_seconds: 300",
            )
        )
    )
    config = yaml.safe_load(ood.render(model)[ood.PORTAL_CONFIG])
    assert config["port"] == config["listen_addr_port"] == 8443
    assert config["ssl"] == ['SSLCertificateFile "/etc/pki/portal.crt"', 'SSLCertificateKeyFile "/etc/pki/portal.key"']
    before = ood.render(model)[f"{ood.OOD_APPS}/jupyter/template/before.sh.erb"]
    assert 'c.ServerApp.allow_origin = "https://hal-mgmt2.ncsa.illinois.edu:8443"' in before


# ---- clusters.d/hal.yml --------------------------------------------------------------------------


def test_cluster_file_submits_with_this_clusters_slurm(files):
    v2 = yaml.safe_load(files[f"{ood.OOD_CONFIG}/clusters.d/hal.yml"])["v2"]
    assert v2["metadata"]["title"] == "hal"
    assert v2["login"] == {"host": "hal-login.ncsa.illinois.edu"}
    assert v2["job"] == {"adapter": "slurm", "cluster": "hal", "bin": "/usr/bin", "conf": "/etc/slurm/slurm.conf"}
    for kind in ("basic", "vnc"):
        wrapper = v2["batch_connect"][kind]["script_wrapper"]
        assert wrapper.splitlines()[-2:] == ["module purge", "%s"]
        assert wrapper.count("%") == 1  # Ruby formats the job's body into it: no other %


# ---- the apps --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", APPS)
def test_manifest_is_a_batch_connect_app(files, name):
    manifest = yaml.safe_load(_app_file(files, name, "manifest.yml"))
    assert manifest["role"] == "batch_connect"
    assert manifest["category"] == "Interactive Apps"
    assert manifest["name"] == HAL.portal.app(name).title
    assert manifest["description"]


@pytest.mark.parametrize("name", APPS)
def test_form_offers_the_apps_virtual_partitions_in_order(files, cat, name):
    form = yaml.safe_load(_app_file(files, name, "form.yml"))
    app = _catalogue_app(cat, name)
    assert form["cluster"] == "hal"
    assert form["form"] == ["virtual_partition", "bc_num_hours"]
    options = form["attributes"]["virtual_partition"]["options"]
    assert [value for _, value, _ in options] == HAL.portal.app(name).virtual_partitions
    for label, value, data in options:
        vp = app["virtual_partitions"][value]
        assert vp["description"] in label
        assert data == {"data-max-bc-num-hours": vp["max_hours"]}
    hours = form["attributes"]["bc_num_hours"]
    assert hours["min"] == 1
    assert hours["max"] == max(vp["max_hours"] for vp in app["virtual_partitions"].values())
    assert hours["value"] == app["default_hours"]


def test_hours_follow_the_apps_limit(files):
    assert yaml.safe_load(_app_file(files, "tensorboard", "form.yml"))["attributes"]["bc_num_hours"]["max"] == 8
    assert yaml.safe_load(_app_file(files, "jupyterlab", "form.yml"))["attributes"]["bc_num_hours"]["max"] == 24


def _when_blocks(submit: str) -> dict[str, str]:
    """The text of each `when 'NAME'` branch of submit.yml.erb's case, by NAME."""
    parts = re.split(r"^  when '([^']*)'\n", submit.split("  else\n")[0], flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("name", APPS)
def test_submit_asks_slurm_for_exactly_the_virtual_partitions_options(files, cat, name):
    submit = _app_file(files, name, "submit.yml.erb")
    app = _catalogue_app(cat, name)
    blocks = _when_blocks(submit)
    assert list(blocks) == list(app["virtual_partitions"])
    assert len(re.findall(r"^  when ", submit, flags=re.M)) == len(app["virtual_partitions"])
    for vp_name, vp in app["virtual_partitions"].items():
        assert vp["options"], vp_name
        assert re.findall(r"^      '([^']*)',$", blocks[vp_name], flags=re.M) == vp["options"]
        assert f"    max_hours = {vp['max_hours']}\n" in blocks[vp_name]
    assert "raise ArgumentError" in submit.split("  else\n")[1]
    assert '"--time=#{hours}:00:00"' in submit
    assert 'template: "basic"' in submit


@pytest.mark.parametrize("name", APPS)
def test_script_runs_jupyter_through_the_apps_launch_script(files, cat, name):
    app = _catalogue_app(cat, name)
    script = _app_file(files, name, "template/script.sh.erb")
    command = "jupyter notebook" if app["kind"] == "jupyter_notebook" else "jupyter lab"
    assert f'\nexec {app["launch"]} {command} --config="${{CONFIG_FILE}}"\n' in script
    assert app["launch"] == f"/opt/hal/portal/apps/{name}/launch.sh"


@pytest.mark.parametrize("name", APPS)
def test_before_script_configures_the_server_behind_the_node_proxy(files, cat, name):
    app = _catalogue_app(cat, name)
    before = _app_file(files, name, "template/before.sh.erb")
    for line in (
        'port=$(find_port "${host}")',
        "password=$(create_passwd 32)",
        'export CONFIG_FILE="${PWD}/jupyter_server_config.py"',
        "c.ServerApp.port = ${port}",
        'c.ServerApp.base_url = "/node/${host}/${port}/"',
        f'c.ServerApp.default_url = "{app["default_url"]}"',
        'c.PasswordIdentityProvider.hashed_password = "sha256:${salt}:${password_hash}"',
    ):
        assert f"\n{line}" in before, line
    assert "wait_until_port_used" in _app_file(files, name, "template/after.sh.erb")
    view = _app_file(files, name, "view.html.erb")
    assert 'base_url = "/node/#{host}/#{port}"' in view
    assert f'CGI.escape("#{{base_url}}{app["default_url"]}")' in view
    assert 'name="password" value="<%= password %>"' in view


def test_shell_templates_without_erb_tags_are_valid_bash(files, tmp_path):
    shell = {rel: text for rel, text in files.items() if rel.endswith(".sh.erb")}
    assert shell
    for rel, text in shell.items():
        assert "<%" not in text, rel
        path = tmp_path / "t.sh"
        path.write_text(text)
        result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, (rel, result.stderr)


# ---- with Ruby: the templates compile, and submit.yml.erb gives what Slurm is asked ---------------


@pytest.mark.skipif(not RUBY, reason="erb and ruby are not installed (apt-get install ruby)")
def test_every_erb_template_compiles(files, tmp_path):
    for rel, text in files.items():
        if not rel.endswith(".erb"):
            continue
        path = tmp_path / "t.erb"
        path.write_text(text)
        ruby = subprocess.run(["erb", "-x", "-T", "-", str(path)], capture_output=True, text=True, check=True).stdout
        result = subprocess.run(["ruby", "-c"], input=ruby, capture_output=True, text=True)
        assert result.returncode == 0, (rel, result.stderr)


EVALUATE = """
require "erb"
require "yaml"
def virtual_partition; ENV.fetch("VP"); end
def bc_num_hours; ENV.fetch("HOURS"); end
puts ERB.new(File.read(ARGV[0]), trim_mode: "-").result(binding)
"""


def _submit(text: str, tmp_path, vp: str, hours: int) -> subprocess.CompletedProcess:
    path = tmp_path / "submit.yml.erb"
    path.write_text(text)
    return subprocess.run(
        ["ruby", "-e", EVALUATE, str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "VP": vp, "HOURS": str(hours)},
    )


@pytest.mark.skipif(not RUBY, reason="erb and ruby are not installed (apt-get install ruby)")
@pytest.mark.parametrize("name", APPS)
def test_submit_gives_the_partitions_options_and_refuses_too_many_hours(files, cat, name, tmp_path):
    text = _app_file(files, name, "submit.yml.erb")
    for vp_name, vp in _catalogue_app(cat, name)["virtual_partitions"].items():
        result = _submit(text, tmp_path, vp_name, vp["max_hours"])
        assert result.returncode == 0, result.stderr
        submit = yaml.safe_load(result.stdout)
        assert submit["batch_connect"] == {"template": "basic"}
        assert submit["script"]["native"] == [*vp["options"], f"--time={vp['max_hours']}:00:00"]
        too_long = _submit(text, tmp_path, vp_name, vp["max_hours"] + 1)
        assert too_long.returncode != 0 and f"last 1 to {vp['max_hours']} hours" in too_long.stderr
    unknown = _submit(text, tmp_path, "gpux99", 1)
    assert unknown.returncode != 0 and 'virtual partition "gpux99"' in unknown.stderr
