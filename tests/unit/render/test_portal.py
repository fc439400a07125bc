"""The web portal: the checks (one row per mistake, as an edit of the embedded HAL
description), the catalogue against the wrapper suite, the job-side launch scripts, the hub
configuration, and the catalogue spawner's form and batch script (real batchspawner)."""

from __future__ import annotations

import json
import subprocess

import pytest

from hal_provision.checks import run_all
from hal_provision.findings import Level
from hal_provision.loader import load_text
from hal_provision.render import portal, render_all, swsuite
from hal_provision.node.swsuite.translate import Request, resolve

E, W = Level.error, Level.warning

JUPYTERLAB = (
    "    - {name: jupyterlab, kind: jupyterlab, title: JupyterLab, modules: [jupyter],\n"
    "       virtual_partitions: [gpux1, gpux2, gpux4, cpun1], max_hours: 24}\n"
)
TENSORBOARD_VPS = "virtual_partitions: [gpux1, cpun1],\n       max_hours: 8}\n    - {name: h2o"
ENV = "    module: jupyter/2026.11 "

ROWS = [
    (
        "app-module-missing",
        [(JUPYTERLAB, JUPYTERLAB.replace("modules: [jupyter]", "modules: [jupyter, tensorflow]"))],
        E,
        "portal.apps[1].modules[1]",
        "app 'jupyterlab' loads module 'tensorflow', which is not in software.modules",
    ),
    (
        "app-module-not-on-compute",
        [("      roles: [login, development, compute]\n", "      roles: [login]\n")],
        E,
        "portal.apps[0].modules[0]",
        "app 'jupyter' loads module 'jupyter', which compute nodes do not see",
    ),
    (
        "app-without-the-environment",
        [(JUPYTERLAB, JUPYTERLAB.replace("modules: [jupyter]", "modules: [wmlce]"))],
        E,
        "portal.apps[1].modules",
        "app 'jupyterlab' does not load the user environment 'jupyter'",
    ),
    (
        "environment-module-missing",
        [(ENV, "    module: jupyter/2027.01 ")],
        E,
        "portal.user_environment.module",
        "user environment module 'jupyter/2027.01' is not in software.modules; did you mean 'jupyter/2026.11'?",
    ),
    (
        "environment-module-without-version",
        [(ENV, "    module: jupyter ")],
        E,
        "portal.user_environment.module",
        "name the environment's module as NAME/VERSION",
    ),
    (
        "virtual-partition-missing",
        [(JUPYTERLAB, JUPYTERLAB.replace("gpux4, cpun1]", "gpux4, gpux5]"))],
        E,
        "portal.apps[1].virtual_partitions[3]",
        "offers virtual partition 'gpux5', which is not in swsuite.virtual_partitions",
    ),
    (
        "virtual-partition-spans-nodes",
        [(JUPYTERLAB, JUPYTERLAB.replace("gpux4, cpun1]", "gpux8, cpun1]"))],
        E,
        "portal.apps[1].virtual_partitions[2]",
        "offers gpux8, which spans 2 nodes",
    ),
    (
        "cpu-partition-spans-nodes",
        [(JUPYTERLAB, JUPYTERLAB.replace("gpux4, cpun1]", "gpux4, cpun2]"))],
        E,
        "portal.apps[1].virtual_partitions[3]",
        "offers cpun2, which spans 2 nodes",
    ),
    (
        "hours-beyond-the-partitions-max-time",
        [
            (
                '      max_time: "1-00:00:00"                  # [paper] 24 h in the swrun example',
                '      max_time: "12:00:00"',
            )
        ],
        W,
        "portal.apps[1].max_hours",
        "app 'jupyterlab' allows 24 hours, but partition 'gpu' behind its virtual "
        "partitions has MaxTime 12:00:00: Slurm refuses longer sessions there; use at most 12 hours",
    ),
    (
        "hours-beyond-partition",
        [(JUPYTERLAB, JUPYTERLAB.replace("max_hours: 24", "max_hours: 48"))],
        W,
        "portal.apps[1].max_hours",
        "allows 48 hours, but gpux1 allows 24",
    ),
    (
        "default-hours-beyond-limit",
        [(TENSORBOARD_VPS, TENSORBOARD_VPS.replace("max_hours: 8}", "max_hours: 8, default_hours: 9}"))],
        E,
        "portal.apps[2].default_hours",
        "presets 9 hours, more than the 8 it allows",
    ),
    (
        "app-name-twice",
        [(JUPYTERLAB, JUPYTERLAB.replace("name: jupyterlab,", "name: jupyter,"))],
        E,
        "portal.apps[1].name",
        "app name 'jupyter' is already used by portal.apps[0]",
    ),
    (
        "container-without-runtime",
        [lambda t: t[: t.index("\ncontainers:")] + t[t.index("\naccounts:") :]],
        E,
        "portal.apps[4].container",
        "runs in a container, but the model has no containers section",
    ),
    (
        "tls-certificate-without-key",
        [("  front_end: jupyterhub ", "  tls: {certificate: /etc/ssl/portal.pem}\n  front_end: jupyterhub ")],
        E,
        "portal.tls.key",
        "tls.certificate is set but tls.key is not",
    ),
    (
        "tls-key-without-certificate",
        [("  front_end: jupyterhub ", "  tls: {key: /etc/ssl/private/portal.key}\n  front_end: jupyterhub ")],
        E,
        "portal.tls.certificate",
        "tls.key is set but tls.certificate is not",
    ),
    (
        "no-directory-for-login",
        [("  ldap: hal-mgmt1\n", "")],
        E,
        "portal.auth",
        "the portal logs users in against the cluster directory, but services.ldap names no host",
    ),
    (
        "no-ca-and-no-certificate",
        [("  ldap: hal-mgmt1\n", "")],
        E,
        "portal.tls",
        "no site certificate, and no cluster CA to sign one",
    ),
    (
        "ondemand-without-shared-home",
        [("  front_end: jupyterhub ", "  front_end: open_ondemand ")],
        E,
        "services.portal",
        "Open OnDemand stages every session in the user's home, but hal-mgmt2 does not mount the shared /home",
    ),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


ACCEPTED = [
    (
        "site-certificate",
        [
            (
                "  front_end: jupyterhub ",
                "  tls: {certificate: /etc/ssl/portal.pem, key: /etc/ssl/private/portal.key}\n  front_end: jupyterhub ",
            )
        ],
    ),
    ("portal-on-login", [("  portal: hal-mgmt2\n", "  portal: hal-login\n")]),
    (
        "ondemand-on-login-with-home",
        [
            ("  portal: hal-mgmt2\n", "  portal: hal-login\n"),
            ("  front_end: jupyterhub ", "  front_end: open_ondemand "),
        ],
    ),
    ("no-portal", [lambda t: t[: t.index("\nportal:")] + t[t.index("\nmonitoring:") :]]),
]


@pytest.mark.parametrize("mutation", [pytest.param(m, id=name) for name, m in ACCEPTED])
def test_valid_variation_is_accepted(edited, mutation):
    loaded = load_text(edited(*mutation), "c.yml")
    assert loaded.model is not None, loaded.findings
    ours = [f.format() for f in run_all(loaded.model) if f.path[:1] == ("portal",) or f.check.startswith("portal")]
    assert ours == []


def test_broken_portal_section_is_rejected_with_its_line_and_writes_nothing(render_rejects, edited):
    render_rejects(edited(("  front_end: jupyterhub ", "  front_end: ondemand ")), "portal.front_end")


# ---- rendering ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def catalogue(files):
    return json.loads(files[portal.CATALOGUE])


def test_catalogue_lists_the_apps_in_order_with_swrun_s_own_options(hal, catalogue):
    assert [a["name"] for a in catalogue["apps"]] == [
        "jupyter",
        "jupyterlab",
        "tensorboard",
        "h2o",
        "jupyter-tf-container",
    ]
    table = swsuite.table(hal)
    for app in catalogue["apps"]:
        for vp, spec in app["virtual_partitions"].items():
            want = [a for a in resolve(table, Request(vp), one_task_per_node=True) if not a.startswith("--time")]
            assert spec["options"] == want, (app["name"], vp)
    gpux1 = catalogue["apps"][1]["virtual_partitions"]["gpux1"]
    assert "--gres=gpu:v100:1" in gpux1["options"] and "--ntasks=1" in gpux1["options"]
    assert "--gres" not in " ".join(catalogue["apps"][1]["virtual_partitions"]["cpun1"]["options"])
    assert catalogue["apps"][2]["virtual_partitions"]["gpux1"]["max_hours"] == 8  # the app's own limit


def test_catalogue_names_the_environment_module_and_its_prefix(catalogue):
    env = catalogue["user_environment"]
    assert env["module"] == "jupyter/2026.11" and env["prefix"] == "/sw/jupyter/2026.11"
    assert env["packages"][:2] == ["jupyterhub==5.2.1", "batchspawner==1.3.0"]
    assert catalogue["server_name"] == "hal-mgmt2.ncsa.illinois.edu"


def test_launch_scripts_are_bash_and_load_the_app_s_environment(files, tmp_path):
    for name in ("jupyter", "jupyterlab", "tensorboard", "h2o", "jupyter-tf-container"):
        text = files[f"files/opt/hal/portal/apps/{name}/launch.sh"]
        script = tmp_path / f"{name}.sh"
        script.write_text(text)
        subprocess.run(["bash", "-n", str(script)], check=True)
        assert text.rstrip().endswith('"$@"')
        if name == "jupyter-tf-container":
            assert "module load" not in text
            assert 'exec singularity exec "${nv[@]}" /sw/containers/tensorflow-jupyter.sif "$@"' in text
        else:
            assert "\nmodule purge\nmodule load jupyter\nset -u\n" in text
    assert (
        'export HAL_TENSORBOARD_LOGDIR="$HOME"/tensorboard\n'
        in files["files/opt/hal/portal/apps/tensorboard/launch.sh"]
    )


def test_launch_script_runs_the_given_command(files, tmp_path):
    """With a stand-in `module` (Lmod is not on this machine), the script execs its arguments."""
    script = tmp_path / "launch.sh"
    script.write_text(files["files/opt/hal/portal/apps/tensorboard/launch.sh"])
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CUDA_VISIBLE_DEVICES": "0"}
    run = subprocess.run(
        [
            "bash",
            "-c",
            f'module() {{ echo "module $*" >&2; }}; export -f module; '
            f"bash {script} sh -c 'echo \"$HAL_TENSORBOARD_LOGDIR\"'",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.strip() == f"{tmp_path}/tensorboard" and (tmp_path / "tensorboard").is_dir()
    assert "module purge\nmodule load jupyter\n" in run.stderr and "GPUs 0" in run.stderr
    usage = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr


def test_hub_config_is_python_that_sets_the_model_s_values(files, catalogue):
    text = files[portal.HUB_CONFIG]
    compile(text, "jupyterhub_config.py", "exec")
    for line in (
        'c.JupyterHub.bind_url = "https://:443/"',
        'c.JupyterHub.ssl_cert = "/etc/jupyterhub/tls/portal.crt"',
        'c.LDAPAuthenticator.server_address = "hal-mgmt1.ncsa.illinois.edu"',
        'c.LDAPAuthenticator.bind_dn_template = ["uid={username},ou=People,dc=ncsa,dc=illinois,dc=edu"]',
        'c.JupyterHub.spawner_class = "hal_portal.CatalogueSpawner"',
        "c.Spawner.start_timeout = 300",
        '"--timeout=7200"',
    ):
        assert line in text, line


def test_no_secret_is_rendered(files):
    for path in (portal.HUB_CONFIG, portal.CATALOGUE, portal.SERVER_PROXY):
        text = files[path]
        assert "PRIVATE KEY" not in text and "cookie_secret =" not in text and "auth_token =" not in text, path


def test_server_proxy_offers_tensorboard_and_h2o(files):
    text = files[portal.SERVER_PROXY]
    compile(text, "jupyter_server_config.py", "exec")
    assert '"tensorboard": {' in text and '"{base_url}tensorboard"' in text
    assert '"h2o": {' in text and '"{base_url}h2o"' in text


def test_nothing_rendered_without_a_portal(edited):
    text = edited(lambda t: t[: t.index("\nportal:")] + t[t.index("\nmonitoring:") :])
    files = render_all(load_text(text, "c.yml").model)
    assert not any("portal" in p or "jupyterhub" in p for p in files)


# ---- the spawner (real batchspawner and JupyterHub classes) --------------------------------------


def _hub_apps(files) -> dict:
    namespace: dict = {}

    class Config(dict):
        def __getattr__(self, name):
            return self.setdefault(name, Config())

        def __setattr__(self, name, value):
            self[name] = value

    namespace["get_config"] = Config
    exec(files[portal.HUB_CONFIG], namespace)  # noqa: S102  (our rendered file)
    return namespace["c"].CatalogueSpawner.apps


@pytest.fixture()
def spawner(files):
    from hal_provision.node.portal.spawner import CatalogueSpawner

    return CatalogueSpawner(apps=_hub_apps(files))


def test_form_offers_every_app_on_its_virtual_partitions(spawner, catalogue):
    form = spawner.form_html()
    for app in catalogue["apps"]:
        for vp in app["virtual_partitions"]:
            assert f'value="{app["name"]}:{vp}"' in form
    assert form.count("<optgroup") == len(catalogue["apps"])
    assert 'value="jupyter:gpux1" selected' in form


def test_form_choices_are_validated(spawner):
    assert spawner.options_from_form({"session": ["jupyterlab:gpux1"], "hours": ["2"]}) == {
        "app": "jupyterlab",
        "virtual_partition": "gpux1",
        "hours": 2,
    }
    assert spawner.options_from_form({"session": ["h2o:cpun1"], "hours": [""]})["hours"] == 1
    for form, message in (
        ({"session": ["jupyterlab:gpux16"], "hours": ["1"]}, "not offered on gpux16"),
        ({"session": ["tensorboard:gpux1"], "hours": ["9"]}, "from 1 to 8"),
        ({"session": ["tensorboard:gpux1"], "hours": ["1; rm"]}, "whole number"),
        ({"session": ["nope:gpux1"], "hours": ["1"]}, "unknown application"),
    ):
        with pytest.raises(ValueError, match=message):
            spawner.options_from_form(form)


def test_batch_script_holds_the_catalogue_s_options_and_the_launch_script(spawner, catalogue):
    import asyncio

    spawner.user_options = {"app": "jupyterlab", "virtual_partition": "gpux1", "hours": 3}
    subvars = {
        "homedir": "/home/jdoe",
        "keepvars": "PATH,JUPYTERHUB_API_TOKEN",
        "srun": "srun --export=ALL",
        "cmd": spawner.cmd_formatted_for_batch(),
    }
    script = asyncio.run(spawner._get_batch_script(**subvars))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert "#SBATCH --time=03:00:00" in lines and "#SBATCH --job-name=portal-jupyterlab" in lines
    want = catalogue["apps"][1]["virtual_partitions"]["gpux1"]["options"]
    assert [
        ln.removeprefix("#SBATCH ")
        for ln in lines
        if ln.startswith("#SBATCH --")
        and not any(ln.startswith(f"#SBATCH --{k}") for k in ("job-name", "output", "chdir", "export", "time"))
    ] == want
    run = next(ln for ln in lines if ln.startswith("srun "))
    assert run.startswith(
        "srun --export=ALL /opt/hal/portal/apps/jupyterlab/launch.sh batchspawner-singleuser jupyterhub-singleuser"
    )
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
