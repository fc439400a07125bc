"""The fleet roles and playbooks (deploy.mode pull): fleet_node, bundle_server,
playbooks/fleet.yml in site.yml, and playbooks/pull.yml, what a pull node runs on itself.

The munge role's pull mode runs for real (ansible-playbook -c local on this machine): the key
is never fetched from the key host, and a missing key fails the run with a message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYBOOKS = REPO / "playbooks"
ANSIBLE_PLAYBOOK = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
needs_ansible = pytest.mark.skipif(not Path(ANSIBLE_PLAYBOOK).exists(), reason="ansible-playbook is not installed")

# site.yml's tiers whose plays target only control-plane hosts, never a compute node.
CONTROL_PLANE_ONLY = {"accounting.yml", "slurm-controller.yml", "slurm-login.yml", "swsuite.yml"}
# The record copies the controller's rendered tree (delegate_to: localhost): never on a node.
CONTROLLER_ONLY = {"record.yml"}
# The boot server is a management host (provisioning.boot_server): a node never serves its own boot.
MANAGEMENT_ONLY = {"boot-server.yml"}


def _yaml(path: Path):
    return yaml.safe_load(path.read_text())


def _imports(playbook: str) -> list[dict]:
    return [entry for entry in _yaml(PLAYBOOKS / playbook) if "ansible.builtin.import_playbook" in entry]


def test_site_runs_fleet_after_every_tier_and_before_the_record():
    order = [e["ansible.builtin.import_playbook"] for e in _imports("site.yml")]
    assert order[-2:] == ["fleet.yml", "record.yml"]


def test_fleet_plays_target_only_the_pull_groups():
    plays = _yaml(PLAYBOOKS / "fleet.yml")
    assert [(p["hosts"], [r["role"] for r in p["roles"]]) for p in plays] == [
        ("deploy_points", ["bundle_server"]),
        ("deploy_pull", ["fleet_node"]),
    ]


def test_pull_imports_every_tier_that_reaches_a_compute_node_in_site_order_with_hal_pull():
    site = [e["ansible.builtin.import_playbook"] for e in _imports("site.yml")]
    pull = _imports("pull.yml")
    assert [e["ansible.builtin.import_playbook"] for e in pull] == [
        p for p in site if p not in CONTROL_PLANE_ONLY | CONTROLLER_ONLY | MANAGEMENT_ONLY
    ]
    assert all(e["vars"]["hal_pull"] is True for e in pull)
    # The node installs the hal-converge of the bundle it runs (bundle/hal_provision/node/converge.py).
    assert pull[-1]["vars"]["fleet_node_program_src"] == "{{ playbook_dir }}/../hal_provision/node/converge.py"


@pytest.mark.parametrize("playbook", sorted(CONTROL_PLANE_ONLY | MANAGEMENT_ONLY))
def test_the_tiers_left_out_of_pull_never_target_a_compute_node(playbook):
    for play in _yaml(PLAYBOOKS / playbook):
        hosts = play["hosts"]
        assert (
            not {"all", "slurm_nodes", "role_compute", "deploy_pull"} & set(hosts.replace(":", " ").split())
            or ":!slurm_nodes" in hosts
        ), (playbook, hosts)


@pytest.mark.parametrize("role", ["fleet_node", "bundle_server"])
def test_readme_names_every_variable_and_says_what_is_exercised(role):
    text = (REPO / "roles" / role / "README.md").read_text()
    for variable in _yaml(REPO / "roles" / role / "defaults/main.yml"):
        assert f"`{variable}`" in text, variable
    assert "## Exercised here, and not" in text


@needs_ansible
@pytest.mark.parametrize("playbook", ["site.yml", "fleet.yml", "pull.yml"])
def test_playbook_syntax(tmp_path, playbook):
    inventory = tmp_path / "hosts.json"
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "children": {
                        "deploy_points": {"hosts": {"hal-mgmt": {}}},
                        "deploy_pull": {"hosts": {"hal01": {}}},
                        "slurm_nodes": {"hosts": {"hal01": {}}},
                    }
                }
            }
        )
    )
    done = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", str(inventory), "--syntax-check", str(PLAYBOOKS / playbook)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )
    assert done.returncode == 0, done.stdout + done.stderr


MUNGE_PULL = """\
- name: Munge's configure tasks as a pull node runs them
  hosts: all
  gather_facts: false
  tasks:
    - name: Munge configure, pull mode
      ansible.builtin.include_role:
        name: munge
        tasks_from: configure
      vars:
        hal_pull: true
        __munge_key_path: "{{ key_path }}"
        munge_key_host: hal-mgmt-unreachable
"""


def run_local_playbook(playbook: Path, inventory: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """ansible-playbook -c local with the repository's roles; its run and the JSON callback's
    result (the timer callback prints after it)."""
    done = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-c", "local", "-i", str(inventory), str(playbook)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={
            **os.environ,
            "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        },
    )
    return done, json.JSONDecoder().raw_decode(done.stdout)[0]


@needs_ansible
@pytest.mark.parametrize("key_there", [True, False])
def test_munge_in_pull_mode_never_asks_the_key_host_and_needs_the_key_on_the_node(tmp_path, key_there):
    key = tmp_path / "munge.key"
    if key_there:
        key.write_bytes(b"k" * 32)
        key.chmod(0o400)
    playbook = tmp_path / "munge-pull.yml"
    playbook.write_text(MUNGE_PULL)
    inventory = tmp_path / "hosts.json"
    inventory.write_text(
        json.dumps({"all": {"hosts": {"hal01": {"key_path": str(key), "ansible_python_interpreter": sys.executable}}}})
    )
    done, result = run_local_playbook(playbook, inventory)
    tasks = {t["task"]["name"].split(" : ")[-1]: t["hosts"]["hal01"] for p in result["plays"] for t in p["tasks"]}
    stats = result["stats"]["hal01"]
    if key_there:
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr
        assert stats["changed"] == 0 and stats["failures"] == 0
        assert key.read_bytes() == b"k" * 32
        for name in (
            "Generate the cluster key once on the key host",
            "Read the cluster key from the key host",
            "Install the cluster key",
        ):
            assert tasks[name].get("skipped") is True, name
    else:
        assert done.returncode != 0
        failed = tasks["Refuse a pull converge without the cluster key"]
        assert failed["failed"] and "a pull node gets the munge key only from the enrolling push" in failed["msg"]
        assert "Generate the cluster key once on the key host" not in tasks
