"""The host's caches: the node image that carries the roles' packages, the wheelhouse
the portal installs from, and the list of installed packages that lets an idempotent run skip
the package manager. Each setting is rendered both ways, and the roles' own Jinja is evaluated by Ansible's
templating for both: without a wheelhouse pip reaches for its index, as on a site without one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hal_provision.loader import load
from hal_provision.render import render_all
from hal_provision.sandbox import image, wheelhouse
from hal_provision.sandbox.derive import derive_sandbox
from hal_provision.sandbox.overlay import SANDBOX_INVENTORY, SshAccess, sandbox_files
from tests.conftest import templar

REPO = Path(__file__).resolve().parents[3]
SSH = SshAccess(
    private_key=Path("/work/.hal-sandbox/ssh/id_ed25519"), known_hosts=Path("/work/.hal-sandbox/ssh/known_hosts")
)


@pytest.fixture(scope="module")
def sandbox_cluster():
    return derive_sandbox(load().model)


def inventory_vars(cluster, **kw) -> dict:
    return yaml.safe_load(sandbox_files(cluster, SSH, **kw)[SANDBOX_INVENTORY])["all"]["vars"]


# ---- rendered both ways -----------------------------------------------------------------------
def test_the_sandbox_inventory_names_the_wheelhouse_only_with_the_caches(sandbox_cluster):
    with_caches = inventory_vars(sandbox_cluster, wheelhouse=wheelhouse.NODE_WHEELHOUSE)
    cached = ("portal_pip_wheelhouse", "lmod_pip_wheelhouse")
    assert [with_caches[k] for k in cached] == [wheelhouse.NODE_WHEELHOUSE] * 2
    without = inventory_vars(sandbox_cluster)
    assert not set(cached) & set(without)
    # The rest of the sandbox's settings are the same either way.
    assert {k: v for k, v in with_caches.items() if k not in cached} == without


def portal_vars(**overrides) -> dict:
    role = REPO / "roles/portal"
    return {
        **yaml.safe_load((role / "defaults/main.yml").read_text()),
        **yaml.safe_load((role / "vars/main.yml").read_text()),
        **overrides,
    }


def test_without_a_wheelhouse_pip_keeps_the_sites_environment_and_its_index():
    value = templar(portal_vars())
    assert value("__portal_pip_environment") == {}
    site = {"PIP_INDEX_URL": "https://pypi.example.org/simple"}
    value = templar(portal_vars(portal_pip_environment=site))
    assert value("__portal_pip_environment") == site


def test_with_a_wheelhouse_pip_installs_from_it_alone():
    value = templar(
        portal_vars(
            portal_pip_wheelhouse=wheelhouse.NODE_WHEELHOUSE, portal_pip_environment={"PIP_CERT": "/etc/ssl/x.crt"}
        )
    )
    assert value("__portal_pip_environment") == {
        "PIP_CERT": "/etc/ssl/x.crt",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": wheelhouse.NODE_WHEELHOUSE,
    }


def lmod_vars(plan_wheelhouse: str | None = None, **overrides) -> dict:
    role = REPO / "roles/lmod"
    return {
        **yaml.safe_load((role / "defaults/main.yml").read_text()),
        **yaml.safe_load((role / "vars/main.yml").read_text()),
        "__lmod_plan": {"wheelhouse": plan_wheelhouse, "environments": []},
        **overrides,
    }


@pytest.mark.parametrize(
    ("plan", "overrides", "expected"),
    [
        (None, {}, {}),  # the index, as pip is configured on the node
        ("/sw/wheels", {}, {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "/sw/wheels"}),  # the model's wheelhouse
        (
            "/sw/wheels",
            {"lmod_pip_wheelhouse": wheelhouse.NODE_WHEELHOUSE, "lmod_pip_environment": {"PIP_CERT": "/c"}},
            {"PIP_CERT": "/c", "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheelhouse.NODE_WHEELHOUSE},
        ),  # the sandbox's
    ],
)
def test_module_environments_install_from_the_wheelhouse_in_force(plan, overrides, expected):
    assert templar(lmod_vars(plan, **overrides))("__lmod_pip_environment") == expected


def test_the_wheelhouse_holds_what_the_portal_role_installs():
    files = render_all(derive_sandbox(load().model))
    reqs = wheelhouse.requirements(files)
    catalogue = __import__("json").loads(files[wheelhouse.CATALOGUE])
    assert set(catalogue["user_environment"]["packages"]) <= set(reqs)
    assert "jupyterhub-ldapauthenticator==2.0.2" in reqs and "jupyterhub-idle-culler==2.0.0" in reqs
    assert "torch==2.13.0+cpu" in reqs  # the CPU PyTorch module's environment (software.modules[].pip)
    assert (
        wheelhouse.requirements(
            {k: v for k, v in files.items() if k not in (wheelhouse.CATALOGUE, wheelhouse.SOFTWARE)}
        )
        == []
    )


def test_the_host_pips_local_wheel_directories_reach_the_wheelhouse(tmp_path):
    (tmp_path / "wheels").mkdir()
    links = wheelhouse.host_find_links(
        {"PIP_FIND_LINKS": f"{tmp_path / 'wheels'} https://example.invalid/x {tmp_path / 'missing'}"}
    )
    assert tmp_path / "wheels" in links and tmp_path / "missing" not in links
    assert all(not str(p).startswith("http") for p in links)


def test_find_links_of_any_section_of_pips_configuration_file_are_found(tmp_path):
    """A find-links in pip's own configuration (here an [install] section of the file
    PIP_CONFIG_FILE names, not only global.find-links) reaches the wheelhouse too."""
    (tmp_path / "wheels").mkdir()
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[install]\nfind-links = {tmp_path / 'wheels'}\n")
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PIP_CONFIG_FILE": str(conf)}
    assert wheelhouse.host_find_links(environ) == [tmp_path / "wheels"]


def test_a_module_whose_packages_no_pip_source_has_is_left_out_of_the_wheelhouse(monkeypatch, tmp_path):
    """fill_available: everything at once when pip finds it all; otherwise the portal's own
    requirements, then each module environment alone, and the modules pip could not fill are
    returned with pip's reason (the real pip runs in the sandbox scenario)."""
    files = render_all(derive_sandbox(load().model))
    portal, modules = wheelhouse.requirement_sets(files)
    assert modules == {"pytorch/2.13.0-cpu": ["numpy==2.3.5", "torch==2.13.0+cpu"]} and "jupyterhub==5.2.1" in portal
    filled = []

    def fill(reqs, *args, **kw):
        if "torch==2.13.0+cpu" in reqs:
            raise wheelhouse.WheelhouseError(
                "pip wheel into /w failed: ERROR: Could not find a version\n"
                "ERROR: No matching distribution found for torch==2.13.0+cpu"
            )
        filled.append(reqs)
        return tmp_path

    monkeypatch.setattr(wheelhouse, "fill", fill)
    missing = wheelhouse.fill_available(files, tmp_path, "image")
    assert missing == {"pytorch/2.13.0-cpu": "ERROR: No matching distribution found for torch==2.13.0+cpu"}
    assert filled == [portal]
    monkeypatch.setattr(wheelhouse, "fill", lambda reqs, *a, **kw: filled.append(reqs))
    assert wheelhouse.fill_available(files, tmp_path, "image") == {}
    assert filled[-1] == wheelhouse.requirements(files)


def test_a_sandbox_without_a_modules_packages_keeps_its_modulefile_and_installs_nothing_for_it():
    from hal_provision.checks import run_all
    from hal_provision.findings import has_errors
    from hal_provision.sandbox.derive import without_module_packages

    sb = without_module_packages(derive_sandbox(load().model), {"pytorch/2.13.0-cpu"})
    assert not has_errors(run_all(sb))
    files = render_all(sb)
    _portal, modules = wheelhouse.requirement_sets(files)
    assert modules == {}
    assert any(path.endswith("pytorch/2.13.0-cpu.lua") for path in files)
    assert sb.recipes.cpu_framework_module == "pytorch/2.13.0-cpu"


def test_the_wheelhouse_lives_in_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("HAL_PROVISION_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert wheelhouse.default_dir() == tmp_path / "hal-provision" / "wheelhouse"


def test_the_caches_directory_can_be_named_outright(monkeypatch, tmp_path):
    """./bootstrap.sh test runs in an empty HOME and keeps the caches where the user's are."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HAL_PROVISION_CACHE", str(tmp_path / "kept"))
    assert wheelhouse.default_dir() == tmp_path / "kept" / "wheelhouse"


# ---- the installed packages: a role's package task runs only for what is missing ---------------
def package_condition(task_file: str, task_name: str) -> str:
    tasks = yaml.safe_load((REPO / task_file).read_text())
    [task] = [t for t in tasks if t["name"].startswith(task_name)]
    when = task["when"]
    return when[-1] if isinstance(when, list) else when


@pytest.mark.parametrize(
    "installed, runs",
    [
        (None, True),  # no list (a role run without common): the package manager decides
        (["chrony", "munge"], False),
        (["chrony"], True),
    ],
)
def test_a_package_task_is_skipped_only_when_the_list_has_every_package(installed, runs):
    condition = package_condition("roles/munge/tasks/install.yml", "Install munge")
    variables = {"__munge_packages": ["munge"]}
    if installed is not None:
        variables["hal_installed_packages"] = installed
    assert templar(variables)(condition) is runs


def test_common_lists_the_installed_packages_by_name():
    """The common role's expression over dpkg-query's lines keeps installed packages only."""
    tasks = yaml.safe_load((REPO / "roles/common/tasks/install.yml").read_text())
    [keep] = [t for t in tasks if "ansible.builtin.set_fact" in t]
    expr = keep["ansible.builtin.set_fact"]["hal_installed_packages"]
    lines = ["installed munge", "config-files mariadb-server", "not-installed slapd", "installed chrony"]
    value = templar({"__common_installed": {"stdout_lines": lines}})
    assert value(expr.strip("{} ")) == ["munge", "chrony"]


def test_every_package_task_of_the_roles_consults_the_list():
    """Each role's task that installs distribution packages by name carries the condition."""
    missing = []
    for path in sorted(REPO.glob("roles/*/tasks/*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            module = next((k for k in ("ansible.builtin.package", "ansible.builtin.apt") if k in task), None)
            if module is None or "name" not in task[module]:
                continue
            when = task.get("when", [])
            when = when if isinstance(when, list) else [when]
            if not any("hal_installed_packages" in str(w) for w in when):
                missing.append(f"{path.relative_to(REPO)}: {task['name']}")
    assert missing == []


# ---- the packages image -------------------------------------------------------------------------
def test_the_image_carries_the_roles_packages_but_those_they_must_install_themselves():
    wanted = image.image_packages()
    for role_package in (
        "munge",
        "slurmctld",
        "slurmd",
        "mariadb-server",
        "sssd-ldap",
        "lmod",
        "uidmap",
        "node-configurable-http-proxy",
        "default-jre-headless",
        "ipmitool",
    ):
        assert role_package in wanted
    assert "slapd" in image.role_packages() and "slapd" not in wanted  # debconf-preseeded by ldap_server
    assert not any("{{" in p or "/" in p for p in wanted)  # vendor URLs are not distribution packages


def test_the_image_leaves_the_roles_services_to_the_roles():
    services = image.role_services()
    assert {"munge", "mariadb", "slurmctld", "slurmd", "slurmdbd", "sssd", "chrony", "influxdb"} <= set(services)


def test_the_packages_image_is_rebuilt_when_its_content_changes():
    packages = image.image_packages()
    assert image.packages_revision(packages) == image.packages_revision(list(packages))
    assert image.packages_revision(packages) != image.packages_revision(packages + ["hello"])


def test_role_vars_are_read_from_the_vars_files(tmp_path):
    (tmp_path / "r1/vars").mkdir(parents=True)
    (tmp_path / "r1/vars/Debian.yml").write_text(
        "__r1_packages: [a, b]\n__r1_more_packages: {x: [c], y: [d]}\n__r1_package: e\n"
        "__r1_vendor_packages: \"{{ ['https://example.org/x.deb'] }}\"\n__r1_service: svc\n__r1_other: f\n"
    )
    (tmp_path / "r1/vars/RedHat.yml").write_text("__r1_packages: [rpm-only]\n")
    assert image.role_packages(tmp_path) == ["a", "b", "c", "d", "e"]
    assert image.role_services(tmp_path) == ["svc"]


def test_the_prefill_fills_what_sandbox_up_would(monkeypatch, tmp_path):
    """`python -m hal_provision.sandbox.prefill` (CI runs it beside pytest) fills the wheelhouse
    with the requirement sets `up` fills for the same description, so `up` finds their stamps."""
    from hal_provision.sandbox import lifecycle, prefill

    seen = []
    monkeypatch.setattr(image, "build_packages", lambda release=image.DEFAULT_RELEASE: f"img-{release}")
    monkeypatch.setattr(
        wheelhouse,
        "fill_available",
        lambda files, wheels, img, *a, **kw: seen.append((wheelhouse.requirement_sets(files), img)) or {},
    )
    assert prefill.main([]) == 0
    up = lifecycle.plan(load().model, tmp_path / "work")
    lifecycle.fill_wheelhouse(up, image.build_packages(), tmp_path / "wheels")
    assert len(seen) == 2 and seen[0] == seen[1], seen
    (portal, modules), img = seen[0]
    assert img == "img-bookworm" and "jupyterhub==5.2.1" in portal and modules


def test_a_bad_description_stops_the_prefill_with_its_located_error(capsys, tmp_path):
    from hal_provision.sandbox import prefill

    bad = tmp_path / "c.yml"
    bad.write_text("schema_version: 1\ncluster: [\n")
    assert prefill.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:" in err and "error" in err and "Traceback" not in err


def test_two_fillers_at_once_run_pip_once(monkeypatch, tmp_path):
    """Two sandboxes coming up at once (or the prefill beside a scenario's `up`): the second
    waits for the first's lock, then finds its stamp."""
    import subprocess
    import threading
    import time

    runs = []

    def pip(args, **kw):
        runs.append(args)
        time.sleep(0.5)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(wheelhouse, "host_find_links", lambda: [])
    monkeypatch.setattr(wheelhouse.subprocess, "run", pip)
    threads = [
        threading.Thread(target=wheelhouse.fill, args=(["a==1"], tmp_path, "img", None, lambda _m: None))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 1 and len(list(tmp_path.glob(".filled-*"))) == 1
