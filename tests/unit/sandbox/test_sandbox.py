"""The sandbox's derived model and its test-harness overlay (pure: no containers, no I/O), and
where the node image and the Apptainer script find their Debian mirror."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path

import pytest
import yaml

from hal_provision.checks import run_all
from hal_provision.findings import has_errors
from hal_provision.hostlist import nodeset
from hal_provision.model import Cluster, Role
from hal_provision.render import render_all
from hal_provision.sandbox.derive import DEFAULT_SUBNET, SandboxError, derive_sandbox
from hal_provision.sandbox import image
from hal_provision.sandbox.lifecycle import plan
from hal_provision.sandbox.overlay import (
    CGROUP_CONF,
    MARK,
    SANDBOX_INVENTORY,
    SLURM_CONF,
    OverlayError,
    SshAccess,
    _replace_once,
    privileged_hosts,
    sandbox_files,
)


def _hosts(cluster) -> list[str]:
    return [h for g in cluster.nodes for h in nodeset(g.hosts)]


# ---- derive ----


@pytest.mark.parametrize(
    ("computes", "expected"),
    [
        (1, ["hal-mgmt1", "hal-login", "hal01"]),
        (2, ["hal-mgmt1", "hal-login", "hal01", "hal02"]),
        (4, ["hal-mgmt1", "hal-login", "hal01", "hal02", "hal03", "hal04"]),
    ],
)
def test_hal_sandbox_keeps_controller_login_and_first_computes(hal, computes, expected):
    assert _hosts(derive_sandbox(hal, computes=computes)) == expected


def test_services_move_to_the_controller_or_are_dropped(hal):
    svc = derive_sandbox(hal).services.model_dump(exclude_none=True)
    assert svc["slurmctld"] == svc["slurmdbd"] == svc["accounting_db"] == "hal-mgmt1"
    assert svc["portal"] == "hal-mgmt1"  # hal-mgmt2 is not kept: the portal moves to the management host
    assert all(set(nodeset(v)) <= set(_hosts(derive_sandbox(hal))) for v in svc.values() if v)


def test_addresses_are_consecutive_in_the_sandbox_subnet(hal):
    sb = derive_sandbox(hal, subnet="10.99.0.0/24")
    net = IPv4Network("10.99.0.0/24")
    primary = sb.cluster.primary_network
    assert list(sb.networks) == [primary] and sb.networks[primary].cidr == net
    firsts = [IPv4Address(str(g.addresses[primary])) for g in sb.nodes]
    assert all(a in net for a in firsts)
    assert [int(a) - int(net.network_address) for a in firsts] == [10, 11, 21]


def test_partitions_and_virtual_partitions_are_narrowed(hal):
    sb = derive_sandbox(hal, computes=2)
    assert [(p.name, p.nodes) for p in sb.slurm.partitions] == [("gpu", "hal[01-02]")]
    vps = {vp.name for vp in sb.swsuite.virtual_partitions}
    assert {"gpux1", "gpux8", "cpun2"} <= vps  # 2 nodes x 4 GPUs = 8 GPUs
    assert not {"gpux12", "gpux16", "cpun4"} & vps


def test_only_used_hardware_profiles_remain(hal):
    sb = derive_sandbox(hal)
    assert set(sb.hardware) == {g.hardware for g in sb.nodes}


@pytest.mark.parametrize("computes", [1, 2, 3])
def test_derived_model_passes_every_check(hal, computes):
    assert not has_errors(run_all(derive_sandbox(hal, computes=computes)))


def test_other_cluster_derives_too(twogen):
    sb = derive_sandbox(twogen, computes=2)
    assert len(sb.groups_with_role(Role.compute)) == 1 and not has_errors(run_all(sb))
    assert sb.cluster.description.startswith(f"sandbox of {twogen.cluster.name}: ")


@pytest.mark.parametrize("computes", [1, 2])
def test_cpu_only_sandbox_has_no_gpus_and_sends_the_recipe_to_cpu_partitions(hal, computes):
    """`sandbox up --cpu-only`: the compute group's profile without GPUs, only the
    cpu virtual partitions, and what named a GPU one (the recipe, its benchmark, the portal's
    apps) narrowed to them; the derived model passes every check and renders without GPUs."""
    sb = derive_sandbox(hal, computes=computes, cpu_only=True)
    assert not has_errors(run_all(sb))
    compute = sb.groups_with_role(Role.compute)[0]
    assert not sb.hardware[compute.hardware].gpus
    vps = sb.swsuite.virtual_partitions
    assert vps and {vp.kind for vp in vps} == {"cpu"}
    assert {vp.name for vp in vps} == {f"cpun{n}" for n in range(1, computes + 1)}
    kept = {vp.name for vp in vps}
    assert sb.recipes.virtual_partition in kept and set(sb.recipes.scaling_partitions) <= kept
    assert all(set(app.virtual_partitions) <= kept for app in sb.portal.apps)
    files = render_all(sb)
    conf = files["files/etc/slurm/slurm.conf"]
    node_lines = [line for line in conf.splitlines() if line.startswith("NodeName=")]
    assert node_lines and not any("Gres=" in line for line in node_lines), node_lines
    gres = files["files/etc/slurm/gres.conf"]
    assert "NodeName=" not in gres, gres
    # The full model's GPU nodes are untouched: the option changes only the sandbox's copy.
    assert hal.hardware[compute.hardware].gpus


@pytest.mark.parametrize("computes", [1, 2])
def test_sandbox_keeps_the_backup_served_by_a_host_it_does_not_back_up(hal, computes):
    """HAL's backups go to the data node's export, and the sandbox keeps no data node: the
    login node serves it in the sandbox's model (it runs no service, so backs nothing up), the
    management node mounts it at /backup as in HAL, and every backup check passes quietly.
    hal-mgmt2 is not kept, nor its own destination: the portal and its secrets move to the
    management node, whose export no other host of the sandbox may mount."""
    sb = derive_sandbox(hal, computes=computes)
    export = sb.storage.nfs.export("backup")
    assert (export.server, export.path, export.clients) == ("hal-login", "/export/backup", "hal-mgmt1")
    assert "no_root_squash" in export.options
    assert [(s.host, s.volumes) for s in sb.storage.nfs.servers] == [("hal-login", ["/export"])]
    assert sb.backup_destinations == {"hal-mgmt1": ("/backup/hal", "/backup")}
    assert sb.backup.host_destinations == {} and "backup-mgmt2" not in sb.storage.filesystem_names()
    assert {job.host for job in sb.backup_jobs} == {"hal-mgmt1"}
    assert [job.name for job in sb.backup_jobs] == [
        "accounting_db",
        "directory",
        "monitoring",
        "slurmctld_state",
        "secrets",
    ]
    assert [f for f in run_all(sb) if f.path[:1] == ("backup",) or f.path[:3] == ("storage", "nfs", "exports")] == []
    assert json.loads(render_all(sb)["files/etc/hal-provision/backup.json"])["destinations"] == {
        "hal-mgmt1": {"path": "/backup/hal", "mount_point": "/backup"}
    }
    # The full model is untouched: hal-data still serves it there.
    assert hal.storage.nfs.export("backup").server == "hal-data"


def test_sandbox_backup_server_is_a_host_without_services(hal):
    """With the portal on the login node the first compute node serves the backups; with a
    service on every kept host but the management one, no host may: the section goes. (Only
    derive's choice is looked at: these descriptions have errors of their own.)"""
    data = hal.model_dump(mode="json", exclude_none=True)
    data["services"]["portal"] = "hal-login"
    portal_on_login = type(hal).model_validate(data)
    assert derive_sandbox(portal_on_login, computes=2).storage.nfs.export("backup").server == "hal01"
    data["services"]["monitoring_db"] = "hal01"
    busy = type(hal).model_validate(data)
    sb = derive_sandbox(busy, computes=1)
    assert sb.backup is None and sb.storage.nfs.exports == []


def test_sandbox_recalculates_fair_share_every_minute(hal):
    """The description's PriorityCalcPeriod (HAL: 5 min) is the sandbox's 1: new accounts get a
    fair-share factor within a minute; the rest of the priority settings stay."""
    assert hal.slurm.priority.calc_period_minutes == 5
    sb = derive_sandbox(hal)
    assert sb.slurm.priority.calc_period_minutes == 1
    assert sb.slurm.priority.model_dump(exclude={"calc_period_minutes"}) == hal.slurm.priority.model_dump(
        exclude={"calc_period_minutes"}
    )


def test_more_computes_than_the_group_has_is_an_error(hal):
    with pytest.raises(SandboxError, match="fewer than 17 hosts"):
        derive_sandbox(hal, computes=17)


def test_a_cluster_without_login_nodes_cannot_be_sandboxed(hal):
    data = hal.model_dump(mode="json", exclude_none=True)
    data["nodes"] = [g for g in data["nodes"] if g["role"] != "login"]
    no_login = type(hal).model_validate(data)
    with pytest.raises(SandboxError, match="login group and a compute group"):
        derive_sandbox(no_login)


def test_default_subnet_is_private():
    assert IPv4Network(DEFAULT_SUBNET).is_private


# ---- overlay ----


@pytest.fixture(scope="module")
def sandbox_cluster(hal):
    return derive_sandbox(hal)


SSH = SshAccess(private_key=Path("/sb/ssh/id_ed25519"), known_hosts=Path("/sb/ssh/known_hosts"))


@pytest.fixture(scope="module")
def files(sandbox_cluster):
    return sandbox_files(sandbox_cluster, SSH)


def test_overlay_changes_only_slurm_and_cgroup_conf_and_adds_the_inventory(sandbox_cluster, files):
    production = render_all(sandbox_cluster)
    assert set(files) == set(production) | {SANDBOX_INVENTORY}
    assert {k for k in production if production[k] != files[k]} == {SLURM_CONF, CGROUP_CONF}


@pytest.mark.parametrize(
    ("path", "removed", "added"),
    [
        (SLURM_CONF, "TaskPlugin=task/cgroup,task/affinity\n", "SlurmdParameters=config_overrides\n"),
        (SLURM_CONF, "TaskPlugin=task/cgroup,task/affinity\n", "TaskPlugin=task/cgroup\n"),
        (CGROUP_CONF, "ConstrainCores=yes\n", "ConstrainCores=no\n"),
    ],
)
def test_overlay_lines(sandbox_cluster, files, path, removed, added):
    production = render_all(sandbox_cluster)[path]
    assert removed in production and added not in production
    assert removed not in files[path] and files[path].count(added) == 1
    assert files[path].count(MARK) == 1


def test_sandbox_inventory_reaches_every_host_over_ssh_with_its_own_keys(sandbox_cluster, files):
    inv = yaml.safe_load(files[SANDBOX_INVENTORY])["all"]
    assert inv["vars"]["ansible_connection"] == "ssh" and inv["vars"]["ansible_user"] == "root"
    assert inv["vars"]["ansible_ssh_private_key_file"] == "/sb/ssh/id_ed25519"
    assert inv["vars"]["ansible_ssh_common_args"] == (
        "-o UserKnownHostsFile=/sb/ssh/known_hosts -o StrictHostKeyChecking=yes"
    )
    assert inv["vars"]["slurm_fake_gpus"] is True
    # The address comes from the rendered hosts.yml (the model's); the overlay names containers only.
    assert inv["hosts"] == {h: {"hal_sandbox_container": h} for h in _hosts(sandbox_cluster)}
    assert "podman" not in files[SANDBOX_INVENTORY]


def test_shared_file_systems_are_the_models_mount_points(hal, tmp_path):
    sb = plan(hal, tmp_path)
    shared = {(m.name, m.mount_point): m.hosts for m in sb.shared}
    # GPFS halfs at /home on every GPFS member the sandbox keeps, NFS misc at /sw on its clients;
    # hal-mgmt1 is in neither, but mounts the backups' export at /backup.
    assert shared == {
        ("halfs", "/home"): ("hal01", "hal02", "hal-login"),
        ("misc", "/sw"): ("hal01", "hal02", "hal-login"),
        ("backup", "/backup"): ("hal-mgmt1",),
    }
    assert sb.backing(sb.shared[0]) == tmp_path.resolve() / "shared" / "halfs"
    assert sb.addresses == {
        "hal-mgmt1": "10.89.77.10",
        "hal-login": "10.89.77.11",
        "hal01": "10.89.77.21",
        "hal02": "10.89.77.22",
    }


def test_sandbox_inventory_sorts_after_the_rendered_hosts_file(files):
    # Ansible reads an inventory directory in name order; the sandbox's host vars must win
    # over hosts.yml's. storage.yml (the backup export's groups) sorts after it but sets none.
    assert sorted(p for p in files if p.startswith("inventory/")) == [
        "inventory/hosts.yml",
        SANDBOX_INVENTORY,
        "inventory/storage.yml",
    ]
    groups = yaml.safe_load(files["inventory/storage.yml"])["all"]["children"]
    assert all(
        set(g) <= {"hosts", "children"} and all(v is None for v in (g.get("hosts") or {}).values())
        for g in groups.values()
    )


def test_only_compute_nodes_are_privileged(sandbox_cluster):
    assert privileged_hosts(sandbox_cluster) == {"hal01", "hal02"}


def test_replace_once_refuses_missing_or_repeated_text():
    assert _replace_once("a=1\n", "a=1\n", "a=2\n", "f") == "a=2\n"
    with pytest.raises(OverlayError, match="expected exactly one"):
        _replace_once("a=1\n", "b=1\n", "b=2\n", "f")
    with pytest.raises(OverlayError, match="expected exactly one"):
        _replace_once("a=1\na=1\n", "a=1\n", "a=2\n", "f")


def test_overlay_output_is_deterministic(sandbox_cluster, files):
    assert sandbox_files(sandbox_cluster, SSH) == files and list(files) == sorted(files)


def test_sandbox_inventory_lists_the_shared_file_systems_for_the_tests(sandbox_cluster):
    inv = sandbox_files(sandbox_cluster, SSH, {"/home": ["hal01", "hal-login"]})[SANDBOX_INVENTORY]
    assert yaml.safe_load(inv)["all"]["vars"]["hal_sandbox_shared"] == {"/home": ["hal01", "hal-login"]}


def test_nodes_pip_trusts_the_host_s_ca_bundle_only_when_the_host_s_pip_has_one(sandbox_cluster, tmp_path):
    from hal_provision.sandbox.lifecycle import host_pip_cert
    from hal_provision.sandbox.overlay import NODE_PIP_CERT

    bundle = tmp_path / "bundle.crt"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\ncert = {bundle}\nfind-links = /opt/wheels\n")
    assert host_pip_cert({}, (tmp_path / "absent.conf", conf)) == bundle
    assert host_pip_cert({"PIP_CERT": str(bundle)}, ()) == bundle
    assert host_pip_cert({"PIP_CERT": str(tmp_path / "gone.crt")}, ()) is None
    assert host_pip_cert({}, (tmp_path / "absent.conf",)) is None
    with_cert = yaml.safe_load(sandbox_files(sandbox_cluster, SSH, pip_cert=True)[SANDBOX_INVENTORY])["all"]["vars"]
    assert with_cert["portal_pip_environment"] == {"PIP_CERT": NODE_PIP_CERT}
    without = yaml.safe_load(sandbox_files(sandbox_cluster, SSH)[SANDBOX_INVENTORY])["all"]["vars"]
    assert "portal_pip_environment" not in without


# ---- the Debian mirror, from the host's apt sources (node image, Apptainer script) ----------
MIRROR = "http://mirror.example.org/debian"


def test_host_mirror_skips_security_and_other_suites(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example.org/debian-security\nSuites: bookworm-security\n\n"
        f"Types: deb\nURIs: {MIRROR}\nSuites: bookworm bookworm-updates\nComponents: main\n"
    )
    (tmp_path / "sources.list").write_text("deb http://other.example.org/debian trixie main\n")
    assert image.host_mirror(tmp_path) == MIRROR


def test_host_mirror_reads_one_line_sources_or_says_none_is_there(tmp_path):
    with pytest.raises(image.ImageError, match="no Debian 'bookworm' archive"):
        image.host_mirror(tmp_path)
    (tmp_path / "sources.list").write_text(f"# comment\ndeb [signed-by=/k.gpg] {MIRROR} bookworm main\n")
    assert image.host_mirror(tmp_path) == MIRROR


def test_print_mirror_prints_it_and_builds_nothing(monkeypatch, capsys):
    monkeypatch.setattr(image, "host_mirror", lambda: MIRROR)
    monkeypatch.setattr(image, "build", lambda *a, **k: pytest.fail("--print-mirror built an image"))
    assert image.main(["--print-mirror"]) == 0
    assert capsys.readouterr().out == MIRROR + "\n"

    def no_mirror():
        raise image.ImageError("no Debian 'bookworm' archive found")

    monkeypatch.setattr(image, "host_mirror", no_mirror)
    assert image.main(["--print-mirror"]) == 2
    assert "error: no Debian 'bookworm' archive" in capsys.readouterr().err


def test_apptainer_script_names_no_archive_and_parses():
    """It upgrades a container to sid from the host's mirror, as the node image is built."""
    script = Path(__file__).resolve().parents[3] / "molecule" / "software" / "apptainer-fakeroot.sh"
    text = script.read_text()
    assert "://" not in text
    assert "python3 -m hal_provision.sandbox.image --print-mirror" in text and "deb $MIRROR sid main" in text
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True).returncode == 0


def test_directory_users_log_in_with_the_sandboxs_own_keys(hal, tmp_path):
    """The model's public keys belong to people whose private halves the sandbox cannot hold:
    it makes one pair per directory user and renders the directory with those."""
    from hal_provision.sandbox import lifecycle

    sb = lifecycle.plan(hal, tmp_path / "sb")
    lifecycle.make_user_keys(sb)
    names = [u.name for u in hal.accounts.users]
    keys = sb.ssh.user_keys
    assert sorted(p.name for p in keys.iterdir()) == sorted([*names, *(n + ".pub" for n in names)])
    assert all((keys / n).stat().st_mode & 0o777 == 0o600 for n in names)
    assert keys.stat().st_mode & 0o777 == 0o700
    lifecycle.render(sb)
    directory = json.loads((sb.rendered / "files/etc/hal-provision/ldap-directory.json").read_text())
    listed = {
        e["attributes"]["uid"][0]: e["attributes"].get("sshPublicKey")
        for e in directory["entries"]
        if "uid" in e["attributes"]
    }
    jdoe = (keys / "jdoe.pub").read_text().split()
    assert listed["jdoe"] == [" ".join(jdoe)]
    assert listed["pformer"] is None  # disabled: no key in the directory, whoever holds one
    inventory = (sb.rendered / "inventory/sandbox.yml").read_text()
    assert f'hal_sandbox_user_keys: "{keys}"' in inventory
    # The derived model is kept beside the tree, so a test can change it and render again; with
    # what `up` was given (its shared mounts among it), the same tree renders again.
    assert lifecycle.load(sb.workdir).cluster == sb.cluster
    lifecycle.record_source(sb, None, 2, "10.89.77.0/24")
    again = lifecycle.load(sb.workdir)
    assert again.shared == sb.shared and sb.shared
    assert lifecycle.rendered_files(again) == lifecycle.rendered_files(sb)


@pytest.mark.skipif(shutil.which("podman") is None, reason="destroy asks podman what the sandbox left")
def test_sandbox_down_removes_the_work_directory_but_the_tests_screenshots(tmp_path):
    from hal_provision.sandbox.lifecycle import destroy

    work = tmp_path / ".hal-sandbox"
    (work / "rendered" / "files").mkdir(parents=True)
    (work / "model.json").write_text("{}")
    (work / "screenshots").mkdir()
    (work / "screenshots" / "02-spawn-form.png").write_bytes(b"\x89PNG")
    destroy("hal-unit-no-such-sandbox", work, log=lambda m: None)
    assert sorted(p.name for p in work.iterdir()) == ["screenshots"]
    assert (work / "screenshots" / "02-spawn-form.png").exists()
    (work / "screenshots" / "02-spawn-form.png").unlink()
    (work / "screenshots").rmdir()
    (work / "model.json").write_text("{}")
    destroy("hal-unit-no-such-sandbox", work, log=lambda m: None)
    assert not work.exists()


def test_a_trixie_sandbox_renders_for_slurm_24_11_without_the_caches(hal, tmp_path):
    """sandbox up --release trixie: Debian 13's Slurm is the derived model's, the caches
    (Debian 12's packages image and wheelhouse) are not used; an unknown release is an error."""
    from hal_provision.sandbox import image, lifecycle

    sb = lifecycle.plan(hal, tmp_path, release="trixie")
    assert (sb.release, sb.caches, sb.cluster.slurm.version) == ("trixie", False, "24.11")
    assert hal.slurm.version == "22.05"
    default = lifecycle.plan(hal, tmp_path)
    assert (default.release, default.caches, default.cluster.slurm.version) == ("bookworm", True, "22.05")
    assert image.image_name("trixie") == "localhost/hal-node:trixie"
    with pytest.raises(SandboxError, match="Debian release 'sid'"):
        lifecycle.plan(hal, tmp_path, release="sid")


def test_the_sandbox_runs_the_release_of_cluster_os_unless_told_another(hal, tmp_path):
    """No --release: the nodes run the description's cluster.os (debian13: trixie, Slurm 24.11);
    --release still overrides it, and the derived model's cluster.os says what the nodes run."""
    from hal_provision.sandbox import lifecycle

    data = hal.model_dump(mode="json", exclude_none=True)
    data["cluster"]["os"] = "debian13"
    del data["slurm"]["version"]  # as a description that names no version reads
    trixie = Cluster.model_validate(data)
    assert trixie.slurm.version == "24.11"
    sb = lifecycle.plan(trixie, tmp_path)
    assert (sb.release, sb.caches, sb.cluster.cluster.os, sb.cluster.slurm.version) == (
        "trixie",
        False,
        "debian13",
        "24.11",
    )
    told = lifecycle.plan(trixie, tmp_path, release="bookworm")
    assert (told.release, told.caches, told.cluster.cluster.os, told.cluster.slurm.version) == (
        "bookworm",
        True,
        "debian12",
        "22.05",
    )
    assert not has_errors(run_all(told.cluster)) and not has_errors(run_all(sb.cluster))


def test_a_sandbox_of_a_site_building_its_own_slurm_runs_what_the_release_ships(hal, tmp_path):
    """slurm.build_own with a major no Debian ships: the sandbox's nodes install from the archive."""
    from hal_provision.sandbox import lifecycle

    data = hal.model_dump(mode="json", exclude_none=True)
    data["slurm"].update(version="25.05", build_own=True)
    sb = lifecycle.plan(Cluster.model_validate(data), tmp_path)
    assert (sb.release, sb.cluster.slurm.version) == ("bookworm", "22.05")


def test_the_image_builders_releases_are_the_models_operating_systems():
    """image.py runs under the system's Python, without the model: its copy of the table stays equal."""
    from hal_provision.model.slurm_versions import DEFAULT_OS, OPERATING_SYSTEMS, operating_system
    from hal_provision.sandbox import image

    assert image.RELEASE_SLURM == {o.release: o.slurm for o in OPERATING_SYSTEMS}
    assert image.DEFAULT_RELEASE == operating_system(DEFAULT_OS).release


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "deb http://deb.example/debian bookworm main\ndeb http://sec.example/debian-security bookworm-security main\n",
            "deb http://deb.example/debian trixie main\ndeb http://sec.example/debian-security trixie-security main\n",
        ),
        (
            "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n",
            "Types: deb\nURIs: http://deb.example/debian\nSuites: trixie trixie-updates\nComponents: main\n",
        ),
    ],
)
def test_a_trixie_image_gets_the_hosts_apt_sources_for_its_release(text, expected):
    from hal_provision.sandbox.image import apt_sources_for

    assert apt_sources_for(text, "trixie") == expected


def test_container_cpu_shares_come_from_the_environment():
    """tests/run-all.sh's side lanes start their nodes with less CPU weight (HAL_CONTAINER_CPU_SHARES)."""
    from hal_provision.sandbox.derive import SandboxError
    from hal_provision.sandbox.lifecycle import cpu_shares_args

    assert cpu_shares_args({}) == [] and cpu_shares_args({"HAL_CONTAINER_CPU_SHARES": " "}) == []
    assert cpu_shares_args({"HAL_CONTAINER_CPU_SHARES": "128"}) == ["--cpu-shares", "128"]
    for bad in ("1", "abc", "-5", "999999"):
        with pytest.raises(SandboxError, match="HAL_CONTAINER_CPU_SHARES"):
            cpu_shares_args({"HAL_CONTAINER_CPU_SHARES": bad})
    create = (Path(__file__).resolve().parents[3] / "molecule/shared/create.yml").read_text()
    assert "cpu_shares: \"{{ lookup('ansible.builtin.env', 'HAL_CONTAINER_CPU_SHARES')" in create


def test_the_packages_image_disables_every_role_service_the_packages_enable():
    """`comm` in the packages script needs both lists in byte order: the services file sorted by
    the role's service name put prometheus.service before prometheus-alertmanager.service, and
    comm then skipped Alertmanager and the node exporter, which ran in every node."""
    from hal_provision.sandbox import image

    lines = image.services_file().splitlines()
    assert lines == sorted(lines) and len(lines) == len(set(lines))
    assert {"prometheus.service", "prometheus-alertmanager.service", "prometheus-node-exporter.service"} <= set(lines)
    done = subprocess.run(["sort", "-c"], input=image.services_file(), text=True, env={"LC_ALL": "C"})
    assert done.returncode == 0
    script = image.packages_script()
    assert "export LC_ALL=C" in script and "{secrets}" not in script and "{excluded}" not in script
    # The node exporter's own textfile timers stay out (the roles install no Recommends).
    assert "prometheus-node-exporter-collectors-" in script


@pytest.mark.parametrize("packages", [False, True], ids=["bare", "packages"])
def test_a_second_image_build_waits_for_the_first_and_builds_nothing(monkeypatch, tmp_path, packages):
    """./bootstrap.sh starts the images' build beside pip; tests/run-all.sh's own build, started
    while that one runs, waits on its lock and then finds the image instead of building it again."""
    from hal_provision.sandbox import image

    monkeypatch.setenv("HAL_PROVISION_CACHE", str(tmp_path))
    built, there, started = [], threading.Event(), threading.Event()

    def slow_build(img, *_args):
        started.set()
        time.sleep(0.5)
        built.append(img)
        there.set()
        return img

    if packages:
        monkeypatch.setattr(image, "build", lambda **_kw: image.IMAGE)
        monkeypatch.setattr(image, "packages_image_exists", lambda *_a: there.is_set())
        monkeypatch.setattr(image, "_build_packages", slow_build)
        call, want = image.build_packages, image.PACKAGES_IMAGE
    else:
        monkeypatch.setattr(image, "image_exists", lambda *_a: there.is_set())
        monkeypatch.setattr(image, "_build", slow_build)
        call, want = image.build, image.IMAGE
    first = threading.Thread(target=call)
    first.start()
    assert started.wait(30)
    assert call() == want
    assert built == [want]  # the second returned only once the first had built it, and built nothing
    first.join()
    assert built == [want] and image.lock_path(want).parent == tmp_path / "image-locks"


def test_bootstrap_builds_the_images_beside_pip_for_either_job():
    text = (Path(__file__).resolve().parents[3] / "bootstrap.sh").read_text()
    start = text.index('images >"$LOGS/images" 2>&1 & images_pid=$!')
    assert start < text.index("pip install -e") and start < text.index('case "$job" in\n  demo)')
    assert 'if [ "$job" = demo ]; then\n  images_start' not in text
