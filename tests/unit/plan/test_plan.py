"""`hal-provision plan`: the update policy, the Slurm rule against the role's own, the accounting
and GPFS consequences, job impact from real Slurm 22.05 JSON, the CLI's errors, and golden
outputs (text and JSON) of the six kinds of day-2 change.

Goldens live in tests/golden/plan/<case>.txt and <case>.json (console width 120, no colour: the plan
prints at most 100 columns whatever the console's width).
After an intended change, regenerate them with the other goldens and review the diff:

    HAL_UPDATE_GOLDEN=1 python3 -m pytest tests/unit/render/test_golden.py tests/unit/plan/test_plan.py
"""

from __future__ import annotations

import base64
import difflib
import json
import os
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hal_provision import tools, update_policy
from hal_provision.cli.main import app
from hal_provision.cli.common import console
from hal_provision.loader import REPO_DEFAULT
from hal_provision.plan import build
from hal_provision.plan.jobs import Job, parse_jobs, parse_nodes
from hal_provision.plan.slurm import changed_keys, restart_required
from hal_provision.render import render_all
from hal_provision.render.policy import POLICY_JSON
from hal_provision.loader import validate_text

TESTS = Path(__file__).resolve().parents[2]
REPO = TESTS.parent
GOLDEN = TESTS / "golden" / "plan"
DATA = TESTS / "data" / "plan"
SQUEUE, SINFO = DATA / "squeue.json", DATA / "sinfo.json"
UPDATE = os.environ.get("HAL_UPDATE_GOLDEN") == "1"
HAL = REPO_DEFAULT.read_text(encoding="utf-8")

# ---- edits of the HAL description (each replacement must happen exactly once) ----------------
MAX_TIME = 'max_time: "1-00:00:00"                  # [paper] 24 h in the swrun example'
RAISE_LIMIT = [(MAX_TIME, 'max_time: "2-00:00:00"')]
LOWER_LIMIT = [(MAX_TIME, 'max_time: "12:00:00"')]
MORE_RESERVE = [("memory_reserve_mib: 8192 ", "memory_reserve_mib: 16384 ")]
ADD_NODE = [
    ("    hosts: hal[01-16]\n    count: 16 ", "    hosts: hal[01-17]\n    count: 17 "),
    ("      nodes: hal[01-16]\n", "      nodes: hal[01-17]\n"),
    (
        "    - {hosts: hal-dev, port: 1, switch: ib-sw1, first_switch_port: 20}\n",
        "    - {hosts: hal-dev, port: 1, switch: ib-sw1, first_switch_port: 20}\n"
        "    - {hosts: hal17, port: 1, switch: ib-sw1, first_switch_port: 21}\n",
    ),
]
REMOVE_NODE = [  # hal16 leaves every place that names it
    ("    hosts: hal[01-16]\n    count: 16 ", "    hosts: hal[01-15]\n    count: 15 "),
    ("      nodes: hal[01-16]\n", "      nodes: hal[01-15]\n"),
    ('{hosts: "hal[01-16]", port: 1', '{hosts: "hal[01-15]", port: 1'),
    ('hosts: "hal[01-16],hal-dev"', 'hosts: "hal[01-15],hal-dev"'),
    ('        clients: "hal[01-16],hal-login,hal-dev"', '        clients: "hal[01-15],hal-login,hal-dev"'),
    (
        'mount_point: /sw, clients: "hal[01-16],hal-login,hal-dev"',
        'mount_point: /sw, clients: "hal[01-15],hal-login,hal-dev"',
    ),
]


def SLURM_VERSION(version: str) -> list[tuple[str, str]]:  # noqa: N802 (an edit, as the constants above)
    """slurm.version from the site's own packages (slurm.build_own): most majors no Debian ships."""
    return [("\nslurm:\n", f'\nslurm:\n  version: "{version}"\n  build_own: true\n')]


def edit(edits, text: str = HAL) -> str:
    for old, new in edits:
        assert text.count(old) == 1, f"expected exactly one {old!r} in the HAL description"
        text = text.replace(old, new)
    return text


def tree(text: str) -> dict[str, str]:
    loaded = validate_text(text, "cluster.yml")
    assert loaded.model is not None and not [f for f in loaded.findings if f.level.value == "error"], "\n".join(
        f.format() for f in loaded.findings
    )
    return render_all(loaded.model)


@pytest.fixture(scope="module")
def hal_tree() -> dict[str, str]:
    return tree(HAL)


def jobs_json() -> dict:
    return json.loads(SQUEUE.read_text())


def jobs_from(doc: dict) -> list[Job]:
    return parse_jobs(json.dumps(doc), "test")


# ---- the policy ------------------------------------------------------------------------------
GOLDEN_TREES = sorted(p for p in (TESTS / "golden").iterdir() if p.is_dir() and p.name != "plan")


@pytest.mark.parametrize("case", GOLDEN_TREES, ids=lambda p: p.name)
def test_every_rendered_file_belongs_to_exactly_one_component(case: Path) -> None:
    policy = update_policy.load()
    problems = []
    for path in sorted(case.rglob("*")):
        rel = path.relative_to(case).as_posix()
        if path.is_file() and rel.startswith(("files/", "inventory/")):
            owners = [c.name for c in policy.owners(rel)]
            if len(owners) != 1:
                problems.append(f"{rel}: {owners or 'no component'}")
    assert not problems, "update_policy.yml must give each rendered file one component:\n" + "\n".join(problems)


def test_every_entry_names_the_role_code_it_mirrors() -> None:
    for component in update_policy.load().components:
        assert component.handler and component.detail is not None, component.name


def test_rendered_policy_is_the_table_the_slurm_role_reads(hal_tree) -> None:
    doc = json.loads(hal_tree[POLICY_JSON])
    assert doc["slurm"]["reconfigure_keys"] == update_policy.load().reconfigure_keys
    assert "PartitionName" in doc["slurm"]["reconfigure_keys"] and "NodeName" not in doc["slurm"]["reconfigure_keys"]
    role_keys = yaml.safe_load((REPO / "roles/slurm/defaults/main.yml").read_text()).get("slurm_reconfigure_keys")
    if isinstance(role_keys, list):  # while the role still carries its own copy, it must be this one
        assert role_keys == doc["slurm"]["reconfigure_keys"]


def test_path_patterns_capture_the_hosts() -> None:
    policy = update_policy.load()
    telegraf = policy.component("telegraf")
    assert telegraf.groups_for(telegraf.match("files/etc/telegraf/roles/data_transfer.conf")) == ["role_data_transfer"]
    assert telegraf.groups_for(telegraf.match("files/etc/telegraf/hosts/hal-mgmt1/hal-slurm.conf")) == ["hal-mgmt1"]
    # A group whose inputs differ from its role's has its own file: its nodes restart, no others.
    assert telegraf.groups_for(telegraf.match("files/etc/telegraf/groups/cpu-nodes.conf")) == ["nodes_cpu_nodes"]
    health = policy.component("health")
    assert health.groups_for(health.match("files/etc/hal-provision/health/mgmt-main.json")) == ["nodes_mgmt_main"]
    assert policy.component("lmod_modules").match("files/sw/modulefiles/compute/Core/cuda/12.lua") == {
        "role": "compute"
    }


# ---- the Slurm rule, against the role's own Jinja ----------------------------------------------
CONF = (
    "ClusterName=hal\n# nodes\nNodeName=hal[01-02] CPUs=160 RealMemory=253952 Gres=gpu:v100:4\n"
    "PartitionName=gpu Nodes=hal[01-02] MaxTime=1-00:00:00 State=UP\n"
)
RULE_CASES = [
    pytest.param(
        CONF.replace("MaxTime=1-00:00:00", "MaxTime=2-00:00:00"),
        ["slurm.conf"],
        ["partitionname"],
        False,
        id="limit-raised",
    ),
    pytest.param(CONF.replace("# nodes", "# the nodes"), ["slurm.conf"], [], False, id="comment-only"),
    pytest.param(
        CONF.replace("RealMemory=253952", "RealMemory=245760"), ["slurm.conf"], ["nodename"], True, id="node-redefined"
    ),
    pytest.param(CONF, ["gres.conf"], [], True, id="gres-only"),
    pytest.param(
        CONF + "SlurmctldDebug=debug\n", ["slurm.conf", "cgroup.conf"], ["slurmctlddebug"], True, id="cgroup-too"
    ),
]


def role_values(names: list[str], rendered: Path, **facts) -> list:
    """The slurm role's variables `names`, evaluated by Ansible's own templating from
    roles/slurm/defaults and vars with `facts` (the role's registered results, the host's
    inventory). `rendered` stands in for the rendered files/ tree (hal_rendered_dir), holding
    the update policy the role may read."""
    template = pytest.importorskip("ansible.template")
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader

    with warnings.catch_warnings():  # a second call says it was configured already: so it was
        warnings.simplefilter("ignore", UserWarning)
        init_plugin_loader()  # lookups (the policy file) resolve as in ansible-playbook

    role_vars = {
        **yaml.safe_load((REPO / "roles/slurm/defaults/main.yml").read_text()),
        **yaml.safe_load((REPO / "roles/slurm/vars/main.yml").read_text()),
    }
    variables = {k: template.trust_as_template(v) if isinstance(v, str) else v for k, v in role_vars.items()}
    variables.update(hal_rendered_dir=str(rendered), **facts)
    templar = template.Templar(loader=DataLoader(), variables=variables)
    return [templar.template(template.trust_as_template("{{ %s }}" % name)) for name in names]


def role_rule(old: str, new: str, changed_files: list[str], rendered: Path) -> tuple[list[str], bool]:
    """The slurm role's __slurm_conf_changed_keys and __slurm_restart_required."""
    keys, restart = role_values(
        ["__slurm_conf_changed_keys", "__slurm_restart_required"],
        rendered,
        __slurm_conf_text=new,
        __slurm_conf_installed={"content": base64.b64encode(old.encode()).decode()},
        __slurm_config_copy={"stdout_lines": [f"<fcsT...... {name}" for name in changed_files]},
    )
    return list(keys), bool(restart)


@pytest.mark.parametrize("new, changed, keys, restart", RULE_CASES)
def test_slurm_rule_is_the_roles(new, changed, keys, restart, hal_tree, tmp_path) -> None:
    policy_keys = update_policy.load().reconfigure_keys
    ours = changed_keys(CONF, new), restart_required(changed_keys(CONF, new), changed != ["slurm.conf"], policy_keys)
    assert ours == (keys, restart)
    policy_file = tmp_path / POLICY_JSON.removeprefix("files/")
    policy_file.parent.mkdir(parents=True)
    policy_file.write_text(hal_tree[POLICY_JSON])
    assert role_rule(CONF, new, changed, tmp_path) == ours


# ---- consequences ------------------------------------------------------------------------------
def consequences(plan, name: str) -> list[tuple[str, str]]:
    [component] = [c for c in plan.components if c.name == name]
    return [(c.action, c.hosts) for c in component.consequences]


def test_a_raised_limit_reconfigures(hal_tree) -> None:
    plan = build(hal_tree, tree(edit(RAISE_LIMIT)))
    assert [c.name for c in plan.components] == ["slurm"]
    assert consequences(plan, "slurm") == [
        ("scontrol reconfigure", "hal-mgmt1"),
        ("reload slurmd", "hal[01-16]"),
        ("file only", "hal-dev,hal-login,hal-mgmt2"),
    ]
    assert plan.exit_code == 2


def test_a_new_node_restarts_every_running_daemon_and_is_deployed_first(hal_tree) -> None:
    plan = build(hal_tree, tree(edit(ADD_NODE)))
    assert consequences(plan, "new hosts") == [("first deployment", "hal17")]
    assert consequences(plan, "slurm")[:2] == [("restart slurmctld", "hal-mgmt1"), ("restart slurmd", "hal[01-16]")]
    assert consequences(plan, "hosts_file") == [
        ("file only", "hal[01-16],hal-data,hal-dev,hal-dtn,hal-login,hal-mgmt[1-2]")
    ]
    [slurm] = [c for c in plan.components if c.name == "slurm"]
    assert any(n.startswith("nodes added: hal17 (Slurm 22.05") for n in slurm.notes)


@pytest.mark.parametrize(
    "edits, commands",
    [
        (
            [
                (
                    '{name: debug, priority: 100, max_wall: "04:00:00", max_gpus_per_user: 4}',
                    '{name: debug, priority: 100, max_wall: "04:00:00", max_gpus_per_user: 8}',
                )
            ],
            [
                "sacctmgr --immediate modify qos where name=debug set Priority=100 MaxWall=04:00:00 "
                "MaxTRESPerUser=gres/gpu=8 MaxJobsPerUser=-1 Description=debug"
            ],
        ),
        (
            [("      full_name: Raj Smith\n", "      full_name: Raj Smith\n      state: disabled\n")],
            ["sacctmgr --immediate delete user where name=rsmith account=bioml cluster=hal"],
        ),
        (
            [
                (
                    "    - {name: debug, priority: 100,",
                    '    - {name: long, priority: 5, max_wall: "7-00:00:00"}\n    - {name: debug, priority: 100,',
                )
            ],
            ["sacctmgr --immediate add qos long Priority=5 MaxWall=7-00:00:00 Description=long"],
        ),
    ],
    ids=["qos-limit", "user-disabled", "qos-added"],
)
def test_accounting_changes_are_the_roles_sacctmgr_commands(hal_tree, edits, commands) -> None:
    plan = build(hal_tree, tree(edit(edits)))
    [component] = [c for c in plan.components if c.name == "slurm_accounting"]
    [sacctmgr, *rest] = component.consequences
    assert (sacctmgr.action, sacctmgr.hosts, list(sacctmgr.commands)) == ("sacctmgr", "hal-mgmt1", commands)
    assert [c.action for c in rest] == (["scontrol reconfigure"] if "add qos" in commands[0] else [])


@pytest.mark.parametrize(
    "tuning, actions",
    [
        ("{pagepool: 8G}", [("mmchconfig", "hal-dtn", ["mmchconfig pagepool=8G -i -N computeNodes"])]),
        (
            "{pagepool: 4G, workerThreads: 512}",
            [
                ("mmchconfig", "hal-dtn", ["mmchconfig workerThreads=512 -N computeNodes"]),
                ("restart GPFS", "hal[01-16],hal-dev", []),
            ],
        ),
    ],
    ids=["immediate", "restart"],
)
def test_gpfs_tuning_is_storage_gpfs_plan(hal_tree, tuning, actions) -> None:
    new = tree(
        edit(
            [
                (
                    'hosts: "hal[01-16],hal-dev"\n        tuning: {pagepool: 4G}',
                    f'hosts: "hal[01-16],hal-dev"\n        tuning: {tuning}',
                )
            ]
        )
    )
    plan = build(hal_tree, new)
    [component] = [c for c in plan.components if c.name == "gpfs_tuning"]
    assert [(c.action, c.hosts, list(c.commands)) for c in component.consequences] == actions


# ---- a backup controller -------------------------------------------------------------------------
BACKUP = (TESTS / "data" / "clusters" / "x86-backup-controller.yml").read_text()
ONE_CONTROLLER = [("  slurmctld: tg-mgmt1,tg-mgmt2 ", "  slurmctld: tg-mgmt1          ")]
BACKUP_RESERVE = [("  memory_reserve_mib: 16384 ", "  memory_reserve_mib: 32768 ")]  # NodeName: a restart


@pytest.fixture(scope="module")
def backup_tree() -> dict[str, str]:
    return tree(BACKUP)


def test_with_a_backup_controller_the_backup_restarts_first(backup_tree) -> None:
    plan = build(backup_tree, tree(edit(BACKUP_RESERVE, BACKUP)))
    assert consequences(plan, "slurm") == [
        ("restart slurmctld", "tg-mgmt2"),
        ("restart slurmctld", "tg-mgmt1"),
        ("restart slurmd", "tg[01-04]"),
        ("file only", "tg-login"),
    ]
    [component] = [c for c in plan.components if c.name == "slurm"]
    backup, primary = component.consequences[:2]
    assert backup.detail == "backup controller, first: keys outside reconfigure_keys: nodename"
    assert primary.detail == (
        "primary controller, once `scontrol ping` shows tg-mgmt2 UP: one controller always "
        "runs, and tg-mgmt2 takes over should tg-mgmt1 not come back"
    )
    assert "restart slurmctld on tg-mgmt2; restart slurmctld on tg-mgmt1; restart slurmd on tg[01-04]" in plan.summary


def test_with_one_controller_it_restarts_alone(backup_tree) -> None:
    one = edit(ONE_CONTROLLER, BACKUP)
    plan = build(tree(one), tree(edit(BACKUP_RESERVE, one)))
    assert consequences(plan, "slurm")[:2] == [("restart slurmctld", "tg-mgmt1"), ("restart slurmd", "tg[01-04]")]


def test_a_reconfigure_needs_no_order(backup_tree) -> None:
    """(tg[01-04] are configless: the reconfigure reaches them, see the configless tests below.)"""
    plan = build(backup_tree, tree(edit([('max_time: "2-00:00:00"\n', 'max_time: "3-00:00:00"\n')], BACKUP)))
    assert consequences(plan, "slurm") == [
        ("scontrol reconfigure", "tg-mgmt[1-2]"),
        ("reached by scontrol reconfigure", "tg[01-04]"),
        ("file only", "tg-login"),
    ]


def test_a_backup_added_restarts_it_first_and_says_so(backup_tree) -> None:
    """tg-mgmt2 was a management host already: its slurmctld starts as the backup, before the
    primary restarts to learn of it (SlurmctldHost needs a restart, slurm.conf(5))."""
    plan = build(tree(edit(ONE_CONTROLLER, BACKUP)), backup_tree)
    assert consequences(plan, "slurm")[:2] == [("restart slurmctld", "tg-mgmt2"), ("restart slurmctld", "tg-mgmt1")]
    [component] = [c for c in plan.components if c.name == "slurm"]
    assert "controllers (primary first): tg-mgmt1 -> tg-mgmt1, tg-mgmt2" in component.notes


def test_the_plan_prints_the_order(in_tmp) -> None:
    (in_tmp / "old.yml").write_text(BACKUP)
    (in_tmp / "new.yml").write_text(edit(BACKUP_RESERVE, BACKUP))
    result = run("new.yml", "--from", "old.yml")
    assert result.exit_code == 2, result.output
    text = " ".join(result.stdout.split())
    assert "backup controller, first" in text and "once `scontrol ping` shows" in text, result.stdout
    assert text.index("tg-mgmt2") < text.index("tg-mgmt1")
    doc = json.loads(run("new.yml", "--from", "old.yml", "--json").stdout)
    [slurm] = [c for c in doc["components"] if c["name"] == "slurm"]
    assert [(q["action"], q["hosts"]) for q in slurm["consequences"]][:2] == [
        ("restart slurmctld", "tg-mgmt2"),
        ("restart slurmctld", "tg-mgmt1"),
    ]
    assert slurm["consequences"][1]["detail"].startswith("primary controller, once `scontrol ping` shows tg-mgmt2 UP")


def test_the_role_finds_the_controllers_the_plan_orders(backup_tree, tmp_path) -> None:
    """The slurm role reads the primary and the backup from the same rendered slurm.conf the plan
    reads, creates the shared state directory once and on no controller by itself, and its
    handlers restart the backup, wait for its `scontrol ping`, then restart the primary."""
    from hal_provision.plan.slurm import SlurmConf

    conf = backup_tree["files/etc/slurm/slurm.conf"]
    assert SlurmConf.parse(conf).controllers == ["tg-mgmt1", "tg-mgmt2"]
    groups = {
        "service_slurmctld": ["tg-mgmt1", "tg-mgmt2"],
        "service_slurmdbd": ["tg-mgmt1"],
        "slurm_nodes": ["tg01"],
        "role_login": ["tg-login"],
    }
    names = [
        "__slurm_ctld_hosts",
        "__slurm_is_ctld_backup",
        "__slurm_ctld_state_shared",
        "__slurm_ctld_in_play",
        "__slurm_dirs",
    ]
    facts = dict(
        __slurm_conf_text=conf, __slurm_dbd_conf_text="", groups=groups, ansible_play_hosts=["tg-mgmt2", "tg-mgmt1"]
    )
    primary = role_values(names, tmp_path, inventory_hostname="tg-mgmt1", **facts)
    backup = role_values(names, tmp_path, inventory_hostname="tg-mgmt2", **facts)
    assert primary[0] == backup[0] == ["tg-mgmt1", "tg-mgmt2"]
    assert (bool(primary[1]), bool(backup[1])) == (False, True)
    assert bool(primary[2]) and primary[3] == ["tg-mgmt1", "tg-mgmt2"]  # the primary first, whatever the play's order
    assert "/srv/slurmctld/state" not in primary[4] + backup[4] and "/var/log/slurm" in primary[4]
    one = role_values(
        names,
        tmp_path,
        inventory_hostname="tg-mgmt1",
        **{**facts, "__slurm_conf_text": conf.replace("SlurmctldHost=tg-mgmt2\n", "")},
    )
    assert not one[2] and "/srv/slurmctld/state" in one[4]  # one controller: its own directory, as before
    handlers = [h["name"] for h in yaml.safe_load((REPO / "roles/slurm/handlers/main.yml").read_text())]
    assert (
        handlers.index("Restart the backup slurmctld")
        < handlers.index("Wait until the backup slurmctld answers scontrol ping")
        < handlers.index("Restart slurmctld")
    )
    assert update_policy.load().component("slurm").extra["backup_ready"] == "scontrol ping"


# ---- configless compute nodes (x86-backup-controller: slurm.configless) ---------------------------
PUSHED = [("  configless: true ", "  configless: false ")]
RAISE_BACKUP_LIMIT = [('max_time: "2-00:00:00"\n', 'max_time: "3-00:00:00"\n')]


def test_configless_nodes_get_no_file_and_the_reconfigure_reaches_them(backup_tree) -> None:
    plan = build(backup_tree, tree(edit(RAISE_BACKUP_LIMIT, BACKUP)))
    [component] = [c for c in plan.components if c.name == "slurm"]
    reached = component.consequences[1]
    assert (reached.action, reached.hosts) == ("reached by scontrol reconfigure", "tg[01-04]")
    assert reached.detail.startswith("configless: no file copied")
    assert [c.name for c in plan.components] == ["slurm"]  # slurmd's options did not change


def test_a_restart_restarts_configless_slurmd_which_fetches_the_files_again(backup_tree) -> None:
    plan = build(backup_tree, tree(edit(BACKUP_RESERVE, BACKUP)))
    [component] = [c for c in plan.components if c.name == "slurm"]
    restart = component.consequences[2]
    assert (restart.action, restart.hosts) == ("restart slurmd", "tg[01-04]")
    assert "fetches the configuration from slurmctld as it starts" in restart.detail


def test_pushed_and_configless_nodes_side_by_side() -> None:
    """A compute node that is also a login node keeps its files (users' commands read them): it
    is reloaded; the configless ones are reached by the reconfigure."""
    login_computes = [
        (
            "    hosts: tg-login\n    hardware: login\n",
            "    hosts: tg-login\n    also: [compute]\n    hardware: hgx-a100\n",
        ),
        ("      nodes: tg[01-04]\n", "      nodes: tg[01-04],tg-login\n"),
    ]
    old = tree(edit(login_computes, BACKUP))
    plan = build(old, tree(edit(login_computes + RAISE_BACKUP_LIMIT, BACKUP)))
    assert consequences(plan, "slurm") == [
        ("scontrol reconfigure", "tg-mgmt[1-2]"),
        ("reload slurmd", "tg-login"),
        ("reached by scontrol reconfigure", "tg[01-04]"),
    ]


@pytest.mark.parametrize("direction", ["on", "off"])
def test_turning_configless_on_or_off_restarts_slurmctld_then_slurmd(backup_tree, direction) -> None:
    pushed = tree(edit(PUSHED, BACKUP))
    old, new = (pushed, backup_tree) if direction == "on" else (backup_tree, pushed)
    plan = build(old, new)
    slurm = consequences(plan, "slurm")
    assert slurm[:2] == [("restart slurmctld", "tg-mgmt2"), ("restart slurmctld", "tg-mgmt1")]  # enable_configless
    assert slurm[2] == ("restart slurmd", "tg[01-04]")
    # slurmd's --conf-server and unit drop-in come (on) or go (off): slurmd restarts with them
    assert consequences(plan, "slurmd_configless") == [("restart slurmd", "tg[01-04]")]


def test_the_role_withholds_what_the_inventory_says(backup_tree, tmp_path) -> None:
    """The slurm role's variables, by Ansible's templating, on the rendered inventory: a configless
    compute node gets no file slurmctld serves and restarts slurmd only when what it fetched
    differs from the render; a controller in the group (never rendered so) keeps its files."""
    inventory = yaml.safe_load(backup_tree["inventory/hosts.yml"])["all"]["children"]
    configless = inventory["slurm_configless"]
    groups = {
        "service_slurmctld": ["tg-mgmt1", "tg-mgmt2"],
        "service_slurmdbd": ["tg-mgmt1"],
        "slurm_nodes": ["tg01", "tg02", "tg03", "tg04"],
        "role_login": ["tg-login"],
        "slurm_configless": list(configless["hosts"]),
    }
    os_vars = yaml.safe_load((REPO / "roles/slurm/vars/Debian.yml").read_text())
    names = [
        "__slurm_is_configless",
        "__slurm_withheld_files",
        "__slurm_pushed_files",
        "__slurm_slurmd_dropin",
        "__slurm_restart_required",
    ]
    facts = dict(
        groups=groups,
        __slurm_conf_text=backup_tree["files/etc/slurm/slurm.conf"],
        __slurm_dbd_conf_text="",
        **os_vars,
        **configless["vars"],
    )
    fetched_same = role_values(names, tmp_path, inventory_hostname="tg01", __slurm_fetched={"changed": False}, **facts)
    assert fetched_same == [
        True,
        ["slurm.conf", "cgroup.conf", "gres.conf", "topology.conf"],
        [],
        "/etc/systemd/system/slurmd.service.d/hal-configless.conf",
        False,
    ]
    fetched_old = role_values(
        names[-1:], tmp_path, inventory_hostname="tg01", __slurm_fetched={"changed": True}, **facts
    )
    assert fetched_old == [True]
    controller = role_values(
        names[:3],
        tmp_path,
        inventory_hostname="tg-mgmt1",
        **{**facts, "groups": {**groups, "slurm_configless": ["tg-mgmt1"], "slurm_nodes": ["tg-mgmt1"]}},
    )
    assert controller == [
        False,
        [],
        ["slurm.conf", "cgroup.conf", "gres.conf", "topology.conf", "job_container.conf", "namespace.yaml"],
    ]


def test_files_the_front_end_does_not_deploy_do_nothing(hal_tree) -> None:
    new = dict(hal_tree)
    new["files/etc/ood/config/ood_portal.yml"] += "# changed\n"
    [component] = build(hal_tree, new).components
    assert component.name == "open_ondemand"
    assert consequences(build(hal_tree, new), "open_ondemand") == [("nothing on the nodes", "-")]


# ---- a Slurm upgrade -----------------------------------------------------------------------------
def test_an_upgrade_goes_slurmdbd_then_slurmctld_then_slurmd_rolling(hal_tree) -> None:
    plan = build(hal_tree, tree(edit(SLURM_VERSION("23.11"))), inventory="inv")
    assert [c.name for c in plan.components] == ["slurm_upgrade"]
    assert consequences(plan, "slurm_upgrade") == [
        ("back up", "hal-mgmt1"),
        ("upgrade slurmdbd", "hal-mgmt1"),
        ("upgrade slurmctld", "hal-mgmt1"),
        ("upgrade slurmd", "hal[01-16]"),
        ("upgrade Slurm clients", "hal-dev,hal-login,hal-mgmt2"),
    ]
    [upgrade] = plan.components
    backup, dbd, _ctld, slurmd, _clients = upgrade.consequences
    assert backup.commands[0] == "ansible-playbook -i inv playbooks/backup.yml"
    assert "cannot be known in advance" in dbd.detail
    assert slurmd.commands == ("ansible-playbook -i inv playbooks/rolling.yml -e 'hosts=hal[01-16]'",)
    assert plan.exit_code == 2 and not plan.blocked


def test_an_upgrade_with_a_backup_controller_takes_the_backup_first(backup_tree) -> None:
    plan = build(backup_tree, tree(edit(SLURM_VERSION("23.02"), BACKUP)))
    actions = consequences(plan, "slurm_upgrade")
    assert actions[1:4] == [
        ("upgrade slurmdbd", "tg-mgmt1"),
        ("upgrade slurmctld", "tg-mgmt2"),
        ("upgrade slurmctld", "tg-mgmt1"),
    ]
    assert actions[4] == ("upgrade slurmd", "tg[01-04]")
    assert actions[0] == ("back up", "tg-mgmt1")  # no backup section: by hand, on the slurmdbd host


def test_beside_an_upgrade_each_daemon_restarts_once(backup_tree) -> None:
    """23.11 writes slurm.conf and slurmd's configless options otherwise: those files go in at each
    daemon's step of the upgrade, which restarts it; no restart of their own beside it."""
    plan = build(backup_tree, tree(edit(SLURM_VERSION("23.11"), BACKUP)))
    assert [c.name for c in plan.components] == ["slurm_upgrade", "slurm", "slurmd_configless"]
    assert not [q for c in plan.components for q in c.consequences if q.action.startswith("restart")]
    assert consequences(plan, "slurm") == [("at its upgrade step", "tg[01-04],tg-login,tg-mgmt[1-2]")]
    assert consequences(plan, "slurmd_configless") == [("at its upgrade step", "tg[01-04]")]
    assert "restart" not in plan.summary


@pytest.mark.parametrize(
    "old, new, why",
    [
        ("22.05", "24.11", "upgrade through 22.05 -> 23.11 -> 24.11"),
        ("22.05", "25.11", "upgrade through 22.05 -> 23.11 -> 25.05 -> 25.11"),
        ("24.11", "23.11", "Slurm 24.11 -> 23.11 is a downgrade, which Slurm does not support"),
    ],
)
def test_an_upgrade_outside_the_window_or_a_downgrade_blocks(old, new, why) -> None:
    plan = build(tree(edit(SLURM_VERSION(old))), tree(edit(SLURM_VERSION(new))))
    [reason] = plan.blocked
    assert why in reason and plan.exit_code == 1
    assert consequences(plan, "slurm_upgrade") == [("blocked", "-")]
    assert not any(line.startswith("apply") for line in plan.advice)


def test_an_upgrade_says_the_new_files_go_in_at_each_step(hal_tree) -> None:
    [upgrade] = build(hal_tree, tree(edit(SLURM_VERSION("23.11")))).components
    assert (
        "the Slurm files of NEW are written for 23.11: each daemon gets them at its step, not before" in upgrade.notes
    )


# ---- job impact --------------------------------------------------------------------------------
def test_recorded_jobs_read_as_slurm_wrote_them() -> None:
    running, pending = parse_jobs(SQUEUE.read_text(), "squeue")
    assert (running.job_id, running.user, running.state, running.nodes, running.gpus_per_node) == (
        1,
        "jdoe",
        "RUNNING",
        "hal16",
        2,
    )
    assert (pending.job_id, pending.user, pending.state, pending.time_limit, pending.node_count) == (
        2,
        "rsmith",
        "PENDING",
        1200,
        4,
    )
    assert pending.memory_mb_per_node() == 204800 and pending.total_gpus() == 16
    assert parse_nodes(SINFO.read_text(), "sinfo")["hal16"].state == "mixed"


def test_later_data_parsers_read_the_same() -> None:
    """Slurm 23.02+ wraps numbers and lists states: the same job comes out."""
    doc = jobs_json()
    job = doc["jobs"][1]
    job.update(
        time_limit={"set": True, "infinite": False, "number": 1200},
        job_state=["PENDING"],
        memory_per_node={"set": True, "infinite": False, "number": 204800},
    )
    assert jobs_from(doc)[1] == parse_jobs(SQUEUE.read_text(), "squeue")[1]


def stranded(hal_tree, edits, **pending_changes) -> list[tuple[int, bool, str]]:
    doc = jobs_json()
    doc["jobs"][1].update(pending_changes)
    plan = build(hal_tree, tree(edit(edits)), jobs=jobs_from(doc))
    return [(i.job.job_id, i.blocking, i.why) for i in plan.impacts]


def test_a_job_already_beyond_a_limit_is_not_this_changes_doing(hal_tree) -> None:
    assert stranded(hal_tree, RAISE_LIMIT, time_limit=3000) == []


@pytest.mark.parametrize(
    "edits, changes, why",
    [
        (LOWER_LIMIT, {}, "asks for 20:00:00; partition gpu's MaxTime drops to 12:00:00 (was 1-00:00:00)"),
        (
            [
                (
                    '{name: debug, priority: 100, max_wall: "04:00:00"',
                    '{name: debug, priority: 100, max_wall: "02:00:00"',
                )
            ],
            {"qos": "debug", "time_limit": 180},
            "asks for 03:00:00; QOS debug's MaxWall drops to 02:00:00 (was 04:00:00)",
        ),
        (
            [("max_gpus_per_user: 4}", "max_gpus_per_user: 2}")],
            {"qos": "debug", "node_count": 1, "tres_per_node": "gres:gpu:v100:4"},
            "asks for 4 GPUs; QOS debug allows 2 per user (was 4)",
        ),
        (
            [("memory_reserve_mib: 8192 ", "memory_reserve_mib: 65536 ")],
            {"memory_per_node": 204800},
            "asks for 200G per node; partition gpu's nodes offer 192G (was 248G)",
        ),
        (REMOVE_NODE, {"node_count": 16}, "asks for 16 nodes; partition gpu has 15 (was 16)"),
        (
            [
                (
                    '{name: debug, priority: 100, max_wall: "04:00:00", max_gpus_per_user: 4}',
                    "{name: normal-x, priority: 1}",
                ),
                ("      qos: [normal, debug]\n", "      qos: [normal]\n"),
                ("      default_qos: normal\n", ""),
            ],
            {"qos": "debug"},
            "QOS debug leaves the model: its associations no longer allow it",
        ),
    ],
    ids=["partition-max-time", "qos-max-wall", "qos-gpus", "memory", "node-count", "qos-removed"],
)
def test_pending_jobs_a_lowered_limit_strands(hal_tree, edits, changes, why) -> None:
    assert (2, True, why) in stranded(hal_tree, edits, **changes)


def test_a_running_job_on_a_redefined_node_blocks_and_on_a_restarted_one_not(hal_tree) -> None:
    plan = build(hal_tree, tree(edit(MORE_RESERVE)), jobs=parse_jobs(SQUEUE.read_text(), "squeue"))
    [impact] = plan.impacts
    assert impact.blocking and impact.job.job_id == 1 and "RealMemory 253952 -> 245760" in impact.why
    assert (
        "or roll: ansible-playbook -i INVENTORY playbooks/rolling.yml -e 'hosts=hal16' (drains, waits for their "
        "jobs without cancelling any, converges, resumes)" in plan.advice
    )
    new = dict(hal_tree)
    new["files/etc/slurm/cgroup.conf"] += "# changed\n"  # a restart, no node changes
    [note] = build(hal_tree, new, jobs=parse_jobs(SQUEUE.read_text(), "squeue")).impacts
    assert (note.job.job_id, note.blocking) == (1, False) and "keeps running" in note.why


# ---- the CLI: goldens --------------------------------------------------------------------------
CASES = {  # case -> (edits of NEW, job data given, expected exit code)
    "no-change": ([], False, 0),
    "limit-raised": (RAISE_LIMIT, False, 2),
    "memory-reserve": (MORE_RESERVE, False, 2),
    "node-added": (ADD_NODE, False, 2),
    "node-removed-job-running": (REMOVE_NODE, True, 1),
    "max-time-lowered-job-pending": (LOWER_LIMIT, True, 1),
    "slurm-22.05-to-23.11": (SLURM_VERSION("23.11"), False, 2),
    "slurm-22.05-to-24.11": (SLURM_VERSION("24.11"), False, 1),
}


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Run in a scratch directory holding old.yml (HAL as deployed), so outputs name relative paths."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.yml").write_text(HAL)
    return tmp_path


def run(*args: str, columns: int = 120):
    console.cache_clear()  # the consoles keep the width COLUMNS had when they were made
    return CliRunner().invoke(app, ["plan", *args], env={"COLUMNS": str(columns), "NO_COLOR": "1"})


def plan_golden(case: str, output: str, old: str, new: str, jobs: str | None, exit_code: int) -> None:
    """`plan new.yml --from old.yml` in the current directory (the outputs name relative paths),
    with `jobs` (squeue --json) when given, against the golden CASE.OUTPUT (txt or json)."""
    Path("old.yml").write_text(old)
    Path("new.yml").write_text(new)
    args = ["new.yml", "--from", "old.yml"]
    if jobs is not None:
        Path("squeue.json").write_text(jobs)
        args += ["--jobs", "squeue.json"]
    result = run(*args, *(["--json"] if output == "json" else []))
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    if output == "json":
        assert json.loads(result.stdout)["exit_code"] == exit_code
    compare_golden(GOLDEN / f"{case}.{output}", result.stdout)


def compare_golden(path: Path, actual: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
    expected = path.read_text() if path.exists() else ""
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(True), actual.splitlines(True), f"golden/{path.name}", f"actual/{path.name}"
            )
        )
        pytest.fail(
            f"{path} differs:\n{diff}\nIf intended: HAL_UPDATE_GOLDEN=1 python3 -m pytest tests/unit/plan/test_plan.py",
            pytrace=False,
        )


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("output", ["txt", "json"])
def test_plan_golden(in_tmp, case, output) -> None:
    edits, with_jobs, exit_code = CASES[case]
    (in_tmp / "new.yml").write_text(edit(edits))
    args = ["new.yml", "--from", "old.yml"] + (["--jobs", str(SQUEUE), "--nodes", str(SINFO)] if with_jobs else [])
    result = run(*args, *(["--json"] if output == "json" else []))
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    if output == "json":
        doc = json.loads(result.stdout)  # the document and nothing else
        assert doc["exit_code"] == exit_code
    compare_golden(GOLDEN / f"{case}.{output}", result.stdout)


def test_blocking_plans_name_the_job_and_what_to_do() -> None:
    removed = (GOLDEN / "node-removed-job-running.txt").read_text()
    assert "BLOCKS" in removed and "jdoe" in removed and "hal16" in removed
    assert "scontrol update nodename=hal16 state=drain" in removed
    lowered = json.loads((GOLDEN / "max-time-lowered-job-pending.json").read_text())
    assert [(j["job_id"], j["user"], j["blocking"]) for j in lowered["jobs"]] == [(2, "rsmith", True)]


def test_every_printed_plan_fits_100_columns() -> None:
    """Every golden plan, push and pull (test_plan_compose.py's and test_plan_pull.py's too),
    printed at 120 columns: the tables, the summary and the advice within 100."""
    printed = sorted(GOLDEN.glob("*.txt"))
    assert len(printed) >= 15
    wide = [
        f"{path.name}:{n}: {len(line)}"
        for path in printed
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if len(line) > 100
    ]
    assert not wide, wide


def test_a_long_command_is_broken_only_between_words_with_a_backslash() -> None:
    from hal_provision.plan.advice import Line
    from hal_provision.plan.report import wrap

    command = "ansible-playbook -i rendered/a-long-cluster-name/inventory playbooks/site.yml --limit 'all:!deploy_pull'"
    lines = wrap(Line(f"push the control plane (every service): {command} (then publish)", [command]), 70, "  ", "    ")
    assert lines == [
        "  push the control plane (every service):",
        "    ansible-playbook -i rendered/a-long-cluster-name/inventory \\",
        "        playbooks/site.yml --limit 'all:!deploy_pull'",
        "    (then publish)",
    ]
    assert wrap("a plain line of words", 12, "  ", "    ") == ["  a plain", "    line of", "    words"]


INVENTORY_64 = yaml.safe_dump(
    {
        "all": {
            "children": {
                "nodes_compute": {"hosts": dict.fromkeys(f"hal{i:02d}" for i in range(1, 65))},
                "nodes_login": {"hosts": {"hal-login": None}},
                "service_slurmctld": {"hosts": {"hal-mgmt1": None, "hal-mgmt2": None}},
                "deploy_pull": {"hosts": dict.fromkeys(f"hal{i:02d}" for i in range(1, 65))},
            }
        }
    }
)


@pytest.mark.parametrize(
    "hosts, limit",
    [
        (["hal17"], "hal17"),
        (["hal17", "hal18"], "hal17,hal18"),
        ([f"hal{i}" for i in range(49, 65)], "'~hal(49|5[0-9]|6[0-4])$'"),
        ([f"hal{i:02d}" for i in range(1, 65)], "deploy_pull"),  # the shorter of the two groups holding them
        ([f"hal{i:02d}" for i in (3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 15)], "'~hal(0[3-9]|10|1[2-5])$'"),
        (["hal-login", "hal-mgmt1", "hal-mgmt2"], "'hal-login,~hal-mgmt[1-2]$'"),
    ],
    ids=["one", "two", "sixteen", "a-group", "two-runs", "names"],
)
def test_the_limit_is_exactly_the_hosts_for_ansible(tmp_path, hosts, limit) -> None:
    """The `--limit` of a first deployment, read by Ansible's own inventory manager: exactly those
    hosts. (hal[49:64] would be a subscript of a group or host `hal`, hal[49-64] a removed form of
    it: neither names a host.)"""
    manager = pytest.importorskip("ansible.inventory.manager")
    from ansible.parsing.dataloader import DataLoader

    from hal_provision.plan.inventory import Inventory

    assert Inventory({"inventory/hosts.yml": INVENTORY_64}).limit(hosts) == limit
    (tmp_path / "hosts.yml").write_text(INVENTORY_64)
    ansible = manager.InventoryManager(loader=DataLoader(), sources=[str(tmp_path / "hosts.yml")])
    [pattern] = shlex.split(limit)
    ansible.subset(pattern)
    assert sorted(h.name for h in ansible.get_hosts("all")) == sorted(hosts)


def test_diff_shows_the_changed_lines(in_tmp) -> None:
    (in_tmp / "new.yml").write_text(edit(RAISE_LIMIT))
    result = run("new.yml", "--from", "old.yml", "--diff")
    assert result.exit_code == 2
    assert "-PartitionName=gpu Nodes=hal[01-16] Default=YES MaxTime=1-00:00:00" in result.stdout
    assert "+PartitionName=gpu Nodes=hal[01-16] Default=YES MaxTime=2-00:00:00" in result.stdout
    doc = json.loads(run("new.yml", "--from", "old.yml", "--diff", "--json").stdout)
    assert "+PartitionName" in doc["components"][0]["files"][0]["diff"]


# ---- the CLI: where OLD comes from -------------------------------------------------------------
def write_record(directory: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        if rel.startswith(("files/", "inventory/")):
            (directory / rel).parent.mkdir(parents=True, exist_ok=True)
            (directory / rel).write_text(text)


def test_default_old_is_the_deployed_record(in_tmp, hal_tree) -> None:
    (in_tmp / "new.yml").write_text(edit(RAISE_LIMIT))
    write_record(in_tmp / "rendered" / "hal.deployed", hal_tree)
    result = run("new.yml")
    assert result.exit_code == 2 and "OLD: rendered/hal.deployed" in result.stdout
    assert "scontrol reconfigure" in result.stdout
    shutil.move(in_tmp / "rendered", in_tmp / "site")
    assert run("new.yml", "--rendered", "site/hal").exit_code == 2


def test_from_a_git_revision(in_tmp) -> None:
    repo = in_tmp / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "cluster.yml").write_text(HAL)
    subprocess.run([*git, "add", "cluster.yml"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "deployed"], check=True)
    (repo / "cluster.yml").write_text(edit(RAISE_LIMIT))
    result = run("repo/cluster.yml", "--from", "HEAD:repo/cluster.yml")  # from outside the repository
    assert result.exit_code == 2, result.output
    assert "OLD: HEAD:repo/cluster.yml" in result.stdout and "scontrol reconfigure" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["old.yml", "--from", "missing.yml"],
            "error: --from missing.yml: no such file (give the deployed cluster.yml, or REV:PATH in git)",
        ),
        (
            ["old.yml"],
            "error: no deployed record at rendered/hal.deployed (site.yml writes it after a whole-cluster converge): "
            "name what is deployed with --from FILE or --from REV:PATH, or converge once",
        ),
        (
            ["old.yml", "--from", "HEAD:old.yml"],
            "error: --from HEAD:old.yml: git show failed: fatal: not a git repository",
        ),
        (
            ["old.yml", "--from", "old.yml", "--jobs", "old.yml"],
            "error: --jobs old.yml is not JSON (Expecting value at line 1): give the saved output of `squeue --json`",
        ),
        (
            ["old.yml", "--from", "old.yml", "--jobs", "missing.json"],
            "error: --jobs missing.json: cannot read it (No such file or directory)",
        ),
        (
            ["old.yml", "--from", "old.yml", "--live", "inv.yml", "--jobs", "x.json"],
            "error: --live reads the jobs and nodes itself",
        ),
    ],
    ids=["no-such-from", "no-record", "bad-revision", "jobs-not-json", "jobs-missing", "live-and-jobs"],
)
def test_mistakes_exit_1_with_one_line(in_tmp, monkeypatch, args, message) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(in_tmp.parent))  # no repository above the scratch dir
    result = run(*args)
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(message), line


def test_an_invalid_new_prints_its_findings(in_tmp) -> None:
    (in_tmp / "new.yml").write_text(HAL.replace("    count: 16 ", "    count: 15 ", 1))
    result = run("new.yml", "--from", "old.yml")
    assert result.exit_code == 1 and result.stdout == ""
    assert "new.yml:152:5: error: nodes[6].count: count is 15 but hosts 'hal[01-16]' names 16" in result.stderr
    assert result.stderr.splitlines()[-1] == "error: NEW (new.yml) is not a valid description: nothing planned"


# ---- --live, through real Ansible ----------------------------------------------------------------
def live_inventory(tmp: Path, group: str = "service_slurmctld") -> Path:
    inventory = tmp / "inv.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        group: {
                            "hosts": {
                                "localhost": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": shutil.which("python3"),
                                }
                            }
                        }
                    }
                }
            }
        )
    )
    return inventory


@pytest.mark.parametrize("config", [None, "ansible.cfg"], ids=["no-config", "repository-config"])
def test_live_reads_squeue_and_sinfo_on_the_controller(in_tmp, monkeypatch, config) -> None:
    """Stand-in squeue and sinfo (printing the recorded JSON) on the PATH of a local 'controller';
    also under the repository's ansible.cfg, whose profile_tasks and timer callbacks print
    around the json callback's document."""
    if config is not None:
        monkeypatch.setenv("ANSIBLE_CONFIG", str(REPO / config))
    if tools.find("ansible") is None:
        pytest.skip("Ansible is not installed")
    bin_dir = in_tmp / "bin"
    bin_dir.mkdir()
    for name, data in (("squeue", SQUEUE), ("sinfo", SINFO)):
        (bin_dir / name).write_text(f'#!/bin/sh\ntest "$1" = --json && exec cat {data}\nexit 2\n')
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (in_tmp / "new.yml").write_text(edit(REMOVE_NODE))
    result = run("new.yml", "--from", "old.yml", "--live", str(live_inventory(in_tmp)), "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert [(j["job_id"], j["user"], j["blocking"]) for j in doc["jobs"]] == [(1, "jdoe", True)]
    assert doc["node_states"] == ["hal16: mixed"]


def test_live_without_a_controller_is_one_line(in_tmp) -> None:
    if tools.find("ansible") is None:
        pytest.skip("Ansible is not installed")
    result = run("old.yml", "--from", "old.yml", "--live", str(live_inventory(in_tmp, group="elsewhere")))
    assert result.exit_code == 1 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("error: --live: `squeue --json` on service_slurmctld[0] of "), line


# ---- the CLI: what the reader acts on ----------------------------------------------------------
ADD_TWO_NODES = [
    ("    hosts: hal[01-16]\n    count: 16 ", "    hosts: hal[01-18]\n    count: 18 "),
    ("      nodes: hal[01-16]\n", "      nodes: hal[01-18]\n"),
    (
        "    - {hosts: hal-dev, port: 1, switch: ib-sw1, first_switch_port: 20}\n",
        "    - {hosts: hal-dev, port: 1, switch: ib-sw1, first_switch_port: 20}\n"
        '    - {hosts: "hal[17-18]", port: 1, switch: ib-sw1, first_switch_port: 21}\n',
    ),
]


def test_new_hosts_get_their_first_deployment_not_a_restart(in_tmp) -> None:
    (in_tmp / "new.yml").write_text(edit(ADD_TWO_NODES))
    result = run("new.yml", "--from", "old.yml")
    assert result.exit_code == 2, result.output
    doc = json.loads(run("new.yml", "--from", "old.yml", "--json").stdout)
    rows = [[c["name"], q["action"], q["hosts"]] for c in doc["components"] for q in c["consequences"]]
    assert ["new hosts", "first deployment", "hal[17-18]"] in rows
    [restart_slurmd] = [row for row in rows if row[1] == "restart slurmd"]
    assert restart_slurmd[2] == "hal[01-16]"
    assert [row for row in rows if "hal17" in row[2] or "hal[17-18]" in row[2]] == [
        ["new hosts", "first deployment", "hal[17-18]"]
    ]
    # Ansible's --limit: names with commas (Ansible reads hal[17-18] as a subscript), the command on a line
    # of its own (it does not fit beside its label within 100 columns), whole
    command = "ansible-playbook -i rendered/hal/inventory playbooks/site.yml --limit hal17,hal18"
    lines = result.stdout.splitlines()
    assert lines[lines.index("  first deployment:") + 1].startswith(f"    {command} (the new hosts"), result.stdout
    assert (
        f"first deployment: {command} (the new hosts alone; the whole-cluster converge includes them)" in doc["advice"]
    )
    assert (
        "first deployment on hal[17-18]; restart slurmctld on hal-mgmt1; restart slurmd on hal[01-16]" in doc["summary"]
    )


def test_each_warning_is_printed_once(in_tmp) -> None:
    """OLD and NEW share their warnings (here the workstation's services beside its jobs): the
    plan prints NEW's, once; OLD's findings only when OLD is invalid."""
    workstation = (DATA.parent / "clusters" / "workstation.yml").read_text()
    (in_tmp / "ws-old.yml").write_text(workstation)
    (in_tmp / "ws-new.yml").write_text(
        workstation.replace("memory_reserve_mib: 16384 ", "memory_reserve_mib: 8192 ", 1)
    )
    result = run("ws-new.yml", "--from", "ws-old.yml")
    assert result.exit_code == 2, result.output
    warnings_ = [line for line in result.stderr.splitlines() if ": warning: " in line]
    assert warnings_, result.stderr
    for line in warnings_:
        message = line.split(": warning: ", 1)[1]
        assert result.output.count(message) == 1, result.output
    assert result.stderr.count("0 errors, 1 warning") == 1, result.stderr
    assert all(line.startswith("ws-new.yml:") for line in warnings_)


def test_an_invalid_old_still_prints_its_findings(in_tmp) -> None:
    (in_tmp / "bad.yml").write_text(HAL.replace("    count: 16 ", "    count: 15 ", 1))
    result = run("old.yml", "--from", "bad.yml")
    assert result.exit_code == 1 and result.stdout == ""
    assert "bad.yml:152:5: error: nodes[6].count: count is 15 but hosts 'hal[01-16]' names 16" in result.stderr
    assert result.stderr.splitlines()[-1] == "error: OLD (bad.yml) is not a valid description: nothing planned"


def test_the_apply_commands_name_the_tree_that_was_rendered(in_tmp) -> None:
    """`render -o` into a directory of one's own, then `plan --rendered` it: every command names
    that tree; an unrendered or stale one gets the render command first."""
    (in_tmp / "new.yml").write_text(edit(ADD_NODE))
    rendered = CliRunner().invoke(app, ["render", "new.yml", "-o", "site/next"])
    assert rendered.exit_code == 0, rendered.output
    result = run("new.yml", "--from", "old.yml", "--rendered", "site/next", "--json")
    assert result.exit_code == 2, result.output
    advice = json.loads(result.stdout)["advice"]
    assert advice[0] == "apply: ansible-playbook -i site/next/inventory playbooks/site.yml", advice
    assert advice[1].startswith(
        "first deployment: ansible-playbook -i site/next/inventory playbooks/site.yml --limit hal17 "
    ), advice
    assert "rendered/" not in result.stdout and "render first" not in result.stdout

    (in_tmp / "new.yml").write_text(edit(RAISE_LIMIT))  # site/next now holds another description
    stale = run("new.yml", "--from", "old.yml", "--rendered", "site/next").stdout.splitlines()
    assert [
        "  render first: hal-provision render new.yml -o site/next (site/next/inventory does not hold NEW",
        "    yet, and the commands below converge what it holds)",
    ] == stale[-4:-2], stale
    assert "  apply: ansible-playbook -i site/next/inventory playbooks/site.yml" in stale
    unrendered = run("new.yml", "--from", "old.yml").stdout.splitlines()
    assert [
        line for line in unrendered if line.startswith("  render first: hal-provision render new.yml -o rendered/hal ")
    ]


def unbroken_paths(doc: dict, text: str, columns: int) -> None:
    """Each changed file's path (as the node has it), and every path a detail names, stands
    whole on one line of `text`; no table line is wider than the console."""
    paths = {
        f["path"].removeprefix("files") if f["path"].startswith("files/") else f["path"]
        for c in doc["components"]
        for f in c["files"]
    }
    paths |= {word for c in doc["components"] for q in c["consequences"] for word in q["detail"].split() if "/" in word}
    lines = text.splitlines()
    assert paths and all(len(line) <= columns for line in lines if "│" in line or "━" in line), text
    broken = [p for p in sorted(paths) if not any(p in line for line in lines)]
    assert not broken, f"broken at {columns} columns: {broken}\n{text}"


@pytest.mark.parametrize("columns", [80, 100])
@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][2]])
def test_file_paths_are_never_broken(in_tmp, case, columns) -> None:
    """At 80 columns (and 100) the other columns wrap, never a path."""
    edits, with_jobs, exit_code = CASES[case]
    (in_tmp / "new.yml").write_text(edit(edits))
    args = ["new.yml", "--from", "old.yml"] + (["--jobs", str(SQUEUE), "--nodes", str(SINFO)] if with_jobs else [])
    result = run(*args, columns=columns)
    assert result.exit_code == exit_code, result.output
    unbroken_paths(json.loads(run(*args, "--json").stdout), result.stdout, columns)


def test_file_paths_are_never_broken_in_an_80_column_terminal(in_tmp) -> None:
    """The same as a person runs it: the command in a process of its own, COLUMNS=80."""
    (in_tmp / "new.yml").write_text(edit(ADD_NODE))
    command = [
        sys.executable,
        "-c",
        "from hal_provision.cli.main import main; main()",
        "plan",
        "new.yml",
        "--from",
        "old.yml",
    ]
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 2, done.stderr
    unbroken_paths(json.loads(run("new.yml", "--from", "old.yml", "--json").stdout), done.stdout, 80)
