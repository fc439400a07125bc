"""The backup role and its playbooks, without a node: what the role reads from the rendered
tree (the program's path and the mount points in the service unit, this host's jobs and
destination in the job list), the order and scope of a restore (a files job's own members; no
snapshot dated after now for `latest`), who is stopped while each job is restored, and that its
names agree with hal-backup, the renderer, the update policy and site.yml. The role's own
Jinja is evaluated by Ansible's templating (tests.conftest.templar). The restore itself runs
for real in tests/acceptance/test_backup_restore.py; the timer and a converge in the sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hal_provision.loader import load_text
from hal_provision.node import backup as program
from hal_provision.render import backup as renderer
from hal_provision.render import render_all
from hal_provision.render.portal import CA_SIGNED_CERT, CA_SIGNED_KEY, COOKIE_SECRET
from hal_provision.update_policy import load as load_policy
from tests.conftest import templar

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "backup"
ANSIBLE_PLAYBOOK = shutil.which("ansible-playbook") or str(Path(os.sys.executable).parent / "ansible-playbook")


def _yaml(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


@pytest.fixture(scope="module")
def inventory_groups(files) -> dict[str, list[str]]:
    """The rendered inventory's groups with their hosts (children left out)."""
    doc = yaml.safe_load(files["inventory/hosts.yml"])["all"]["children"]
    return {name: list((body or {}).get("hosts") or {}) for name, body in doc.items()}


def role_vars(files, inventory_groups, host: str = "hal-mgmt1", **extra) -> dict:
    """The role's defaults and vars (main and Debian) for `host`, with the rendered files the
    lookups would read given as their values."""
    values = {**_yaml(ROLE / "defaults/main.yml"), **_yaml(ROLE / "vars/main.yml"), **_yaml(ROLE / "vars/Debian.yml")}
    doc = json.loads(files[renderer.CONFIG])
    values.update(
        hal_rendered_dir="/r/files",
        playbook_dir=str(REPO / "playbooks"),
        role_path=str(ROLE),
        inventory_hostname=host,
        groups=inventory_groups,
        __backup_doc=doc,
        __backup_config=doc,
        __backup_unit_text=files[renderer.SERVICE],
    )
    values["__backup_jobs"] = [j for j in doc["jobs"] if j["host"] == host]
    values.update(extra)
    return values


@pytest.mark.parametrize(
    ("host", "path", "mount_point"),
    [("hal-mgmt1", "/backup/hal", "/backup"), ("hal-mgmt2", "/backup-mgmt2/hal", "/backup-mgmt2")],
)
def test_the_role_reads_the_program_and_this_host_s_destination(hal, files, inventory_groups, host, path, mount_point):
    """The program from the unit; each host's own destination and mount point from the job list,
    the mount point one the unit lets the service write."""
    value = templar(role_vars(files, inventory_groups, host))
    assert value("__backup_program_found") == [renderer.PROGRAM]
    assert value("__backup_host_destination") == {"path": path, "mount_point": mount_point}
    assert hal.backup_destinations[host] == (path, mount_point)
    assert value("__backup_mounts_found") == ["/backup", "/backup-mgmt2"]
    assert templar(role_vars(files, inventory_groups, "hal01"))("__backup_host_destination") == {}
    # The units', the job list's and the key's names on the node are hal-backup's and the renderer's.
    assert value("__backup_config_path") == program.CONFIG == "/" + renderer.CONFIG.removeprefix("files/")
    assert value("__backup_key_path") == program.KEY
    assert [value("__backup_unit_dir") + "/" + value(name) for name in ("__backup_service", "__backup_timer")] == [
        "/" + renderer.SERVICE.removeprefix("files/"),
        "/" + renderer.TIMER.removeprefix("files/"),
    ]
    assert value("__backup_mariadb_dump") == program.SQL_FILE
    assert value("__backup_influxdb_address") == program.INFLUXDB_ADDRESS
    assert value("backup_config_src") == "/r/files/etc/hal-provision/backup.json"
    assert Path(value("backup_program_src")).resolve() == Path(program.__file__)
    assert Path(value("__backup_unit_checker_src")).resolve().is_file()


def test_a_unit_without_the_lines_gives_nothing_the_role_would_use(files, inventory_groups):
    value = templar(role_vars(files, inventory_groups, __backup_unit_text="[Service]\nExecStart=/bin/true\n"))
    assert not value("__backup_program_found") and value("__backup_mounts_found") == []


@pytest.mark.parametrize(
    ("host", "jobs"),
    [
        ("hal-mgmt1", ["accounting_db", "directory", "monitoring", "slurmctld_state", "secrets-hal-mgmt1"]),
        ("hal-mgmt2", ["secrets-hal-mgmt2"]),
        ("hal01", []),  # no job: the role does nothing there
        ("hal-data", []),
    ],
)
def test_each_host_runs_the_jobs_that_name_it(files, inventory_groups, host, jobs):
    value = templar(role_vars(files, inventory_groups, host))
    assert [j["name"] for j in value("__backup_host_jobs")] == jobs


@pytest.mark.parametrize(
    ("asked", "order"),
    [
        ([], ["secrets-hal-mgmt1", "accounting_db", "directory", "monitoring", "slurmctld_state"]),
        (["slurmctld_state", "accounting_db"], ["accounting_db", "slurmctld_state"]),
        (["secrets-hal-mgmt1", "directory"], ["secrets-hal-mgmt1", "directory"]),
        (["secrets-hal-mgmt2"], []),  # another host's job: nothing to do here
    ],
)
def test_restore_runs_the_secrets_first_then_backup_json_s_order(files, inventory_groups, asked, order):
    value = templar(role_vars(files, inventory_groups, backup_restore_jobs=asked))
    assert [j["name"] for j in value("__backup_restore_order")] == order
    assert value("__backup_unknown_jobs") == []


def test_unknown_job_names_are_listed(files, inventory_groups):
    value = templar(role_vars(files, inventory_groups, backup_restore_jobs=["secrets", "accounting_db"]))
    assert value("__backup_unknown_jobs") == ["secrets"]  # HAL's are secrets-<host>


@pytest.mark.parametrize(
    ("job", "owners"),
    [
        ("accounting_db", [["hal-mgmt1", "slurmdbd"]]),
        ("directory", [["hal-mgmt1", "slapd"]]),
        ("monitoring", []),  # influxd restore -portable needs the server running
        ("slurmctld_state", [["hal-mgmt1", "slurmctld"]]),
        ("secrets-hal-mgmt1", [["hal-mgmt1", "munge"], ["hal-mgmt1", "slapd"]]),
        ("secrets-hal-mgmt2", [["hal-mgmt2", "jupyterhub"], ["hal-mgmt2", "apache2"]]),
    ],
)
def test_restore_stops_the_services_that_use_the_state(files, inventory_groups, job, owners):
    doc = json.loads(files[renderer.CONFIG])
    entry = next(j for j in doc["jobs"] if j["name"] == job)
    value = templar(role_vars(files, inventory_groups, entry["host"], __backup_job=entry))
    assert [list(pair) for pair in value("__backup_restore_owners")] == owners


def test_with_a_backup_controller_both_controllers_stop_for_the_state(files, inventory_groups):
    groups = dict(inventory_groups, service_slurmctld=["hal-mgmt1", "hal-mgmt2"])
    entry = {"name": "slurmctld_state", "kind": "files", "host": "hal-mgmt1", "paths": ["/var/lib/slurm/slurmctld"]}
    value = templar(role_vars(files, groups, __backup_job=entry))
    assert [list(p) for p in value("__backup_restore_owners")] == [
        ["hal-mgmt1", "slurmctld"],
        ["hal-mgmt2", "slurmctld"],
    ]


def test_check_mode_says_what_a_restore_replaces(files, inventory_groups):
    doc = json.loads(files[renderer.CONFIG])
    said = {}
    for entry in doc["jobs"]:
        value = templar(role_vars(files, inventory_groups, entry["host"], __backup_job=entry))
        said[entry["name"]] = value("__backup_replaces")
    assert said["accounting_db"] == (
        "databases slurm_acct_db (dropped, then accounting_db.sql loaded with mariadb), "
        "stopping slurmdbd on hal-mgmt1 meanwhile"
    )
    assert said["directory"] == (
        "the directory dc=ncsa,dc=illinois,dc=edu (/var/lib/ldap moved aside, data.ldif "
        "loaded with slapadd; config.ldif only where cn=config is missing), stopping slapd "
        "on hal-mgmt1 meanwhile"
    )
    assert said["monitoring"] == (
        "databases telegraf (dropped, then influxd restore -portable; the users get their privileges back)"
    )
    assert said["slurmctld_state"] == (
        "/var/lib/slurm/slurmctld (directories moved aside, then those paths extracted "
        "from files.tar), stopping slurmctld on hal-mgmt1 meanwhile"
    )
    assert said["secrets-hal-mgmt2"].endswith(", stopping jupyterhub on hal-mgmt2, apache2 on hal-mgmt2 meanwhile")


@pytest.mark.parametrize("name", [None, "examples/campus.yml", "tests/data/clusters/x86-backup-controller.yml"])
def test_every_backed_up_secret_file_has_its_services_named(name):
    """Each path a secrets job of the renderer backs up has an entry (its daemons, or none) in
    the role's path -> services map, so a restore never replaces a file a daemon holds open
    without knowing it. The renderer's whole list, and the portal's files."""
    mapping = _yaml(ROLE / "vars/Debian.yml")["__backup_restore_path_services"]
    listed = {path for paths in renderer.SECRET_FILES.values() for path in paths}
    listed |= {CA_SIGNED_KEY, CA_SIGNED_CERT, COOKIE_SECRET}
    assert listed == set(mapping)
    if name is not None:
        model = load_text((REPO / name).read_text(encoding="utf-8"), name).model
        files = render_all(model)
        if renderer.CONFIG in files:
            jobs = json.loads(files[renderer.CONFIG])["jobs"]
            assert {p for j in jobs if j["name"].startswith("secrets") for p in j["paths"]} <= set(mapping)


def test_a_files_restore_extracts_the_job_s_own_members_only(files, inventory_groups):
    """tar is given the job's paths as members, as hal-backup archived them (relative to /)."""
    doc = json.loads(files[renderer.CONFIG])
    entry = next(j for j in doc["jobs"] if j["name"] == "secrets-hal-mgmt1")
    value = templar(role_vars(files, inventory_groups, __backup_job=entry))
    members = value("__backup_members")
    assert members == [p.lstrip("/") for p in entry["paths"]]
    job = program.parse_config(dict(doc, jobs=[entry])).jobs[0]
    [command] = program.commands(job, Path("/s"))
    assert list(command.argv[command.argv.index("--") + 1 :]) == members
    tasks = _yaml(ROLE / "tasks/restore_files.yml")
    extract = next(t for t in tasks if t["name"] == "Extract the snapshot's files")["ansible.builtin.command"]["argv"]
    assert extract.rstrip().endswith("'--'] + __backup_members }}")


def test_latest_never_takes_a_snapshot_dated_after_now(files, inventory_groups):
    value = templar(role_vars(files, inventory_groups, found=["20260301T023000Z", "20990101T000000Z"]))
    assert value("found | select('le', __backup_now_stamp) | last") == "20260301T023000Z"
    tasks = _yaml(ROLE / "tasks/restore_job.yml")
    choose = next(t for t in tasks if t["name"].startswith("Choose the snapshot"))["ansible.builtin.set_fact"]
    assert "select('le', __backup_now_stamp)" in choose["__backup_stamp"]


def test_the_sql_dump_loads_without_the_client_s_commands():
    """--binary-mode: the mariadb client runs no \\! (system), source, tee, ... from the dump."""
    [_drop, load_task] = _yaml(ROLE / "tasks/restore_mariadb.yml")
    assert "--batch --binary-mode <" in load_task["ansible.builtin.shell"]


@pytest.mark.parametrize(
    ("stamp", "ok"),
    [
        (program.stamp_of(program._utcnow()), True),
        ("20260301T023000Z", True),
        (".partial-20260301T023000Z", False),
        ("latest", False),
        ("2026-03-01", False),
    ],
)
def test_snapshot_names_are_hal_backup_s_stamps(files, inventory_groups, stamp, ok):
    value = templar(role_vars(files, inventory_groups, s=stamp))
    assert value("s is match(__backup_stamp_pattern)") is ok
    assert bool(program.STAMP_RE.fullmatch(stamp)) is ok


@pytest.mark.parametrize(
    ("extra", "snapshot", "jobs", "force"),
    [
        ({"snapshot": "latest"}, "latest", [], False),
        (
            {"snapshot": "20260301T023000Z", "jobs": "accounting_db, directory", "force": "yes"},
            "20260301T023000Z",
            ["accounting_db", "directory"],
            True,
        ),
        ({"jobs": ["monitoring"]}, "", ["monitoring"], False),
    ],
)
def test_restore_playbook_turns_its_extra_variables_into_the_role_s(extra, snapshot, jobs, force):
    [play] = _yaml(REPO / "playbooks/restore.yml")
    value = templar({**play["vars"], **extra})
    assert value("backup_restore_snapshot") == snapshot
    assert value("backup_restore_jobs") == jobs
    assert value("backup_restore_force") is force


def test_update_policy_names_the_role_s_handlers_and_hosts(files):
    policy = load_policy()
    units, config = policy.component("backup"), policy.component("backup_config")
    handlers = _yaml(ROLE / "handlers/main.yml")
    assert {h["listen"] for h in handlers} == {"Backup units changed"}
    for handler in handlers:
        assert handler["name"] in units.handler
    assert "roles/backup/tasks/install.yml Install the job list" in config.handler
    assert units.match(renderer.SERVICE) is not None and units.match(renderer.TIMER) is not None
    assert config.match(renderer.CONFIG) is not None and config.action == "file-only"
    # Every host of a job is in the groups the policy names.
    groups = yaml.safe_load(files["inventory/hosts.yml"])["all"]["children"]
    hosts = {h for g in units.hosts for h in ((groups.get(g) or {}).get("hosts") or {})}
    assert {j["host"] for j in json.loads(files[renderer.CONFIG])["jobs"]} <= hosts


def test_site_runs_backups_after_the_state_they_back_up_and_before_the_record():
    order = [entry["ansible.builtin.import_playbook"] for entry in _yaml(REPO / "playbooks/site.yml")]
    at = order.index("backup.yml")
    assert all(
        order.index(p) < at
        for p in ("directory.yml", "accounting.yml", "slurm-controller.yml", "portal.yml", "monitoring.yml")
    )
    assert order[-1] == "record.yml" and "restore.yml" not in order


def test_readme_names_every_variable_and_says_what_is_exercised():
    text = (ROLE / "README.md").read_text()
    for variable in _yaml(ROLE / "defaults/main.yml"):
        assert f"`{variable}`" in text, variable
    assert "## Exercised here, and not" in text


@pytest.mark.skipif(not Path(ANSIBLE_PLAYBOOK).exists(), reason="ansible-playbook is not installed")
@pytest.mark.parametrize("playbook", ["backup.yml", "restore.yml", "site.yml"])
def test_playbook_syntax_with_the_rendered_hal_inventory(tmp_path, files, playbook):
    for rel, text in files.items():
        if rel.startswith("inventory/"):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text)
    done = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "inventory"), "--syntax-check", str(REPO / "playbooks" / playbook)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
