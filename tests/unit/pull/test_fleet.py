"""`hal-provision fleet`: the drift rules and the folding (hal_provision.pull.fleet), the ssh_config
as ssh itself reads it, and the commands with the SSH fan-out replaced by functions returning
host -> text (each point's current.json, a release signed with a real minisign key, and each
node's last.json: the seams; a real ClusterShell run reaches a node that does not answer);
playbooks/publish.yml's structure, and the playbook run for real with this machine as a
distribution point (local connection)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hal_provision.pull import fleet as lib
from hal_provision import release
from hal_provision.cli import fleet as cli
from hal_provision.cli.main import app
from hal_provision.node import converge

V1, V2 = "1111aaaa2222bbbb", "3333cccc4444dddd"
NODES = [f"n{i:02d}" for i in range(1, 7)]


def last(version: str, state: str = "changed", **extra) -> str:
    return json.dumps(
        {
            "host": "n01",
            "version": version,
            "previous": None,
            "state": state,
            "changed": 1,
            "failed_task": None,
            "drained": False,
            **extra,
        }
    )


# last.json text (None: no answer; '': none), published version -> version, state, drift
@pytest.mark.parametrize(
    ("text", "published", "expected"),
    [
        (last(V1), V1, (V1, "changed", None)),
        (last(V1, "current"), V1, (V1, "current", None)),
        (last(V1), V2, (V1, "changed", "behind")),
        (last(V2, "failed", failed_task="Install slurmd"), V2, (V2, "failed", "failed")),
        (last(V2, "waiting"), V2, (V2, "waiting", "waiting")),
        (last(V1, "unreachable-source"), V2, (V1, "unreachable-source", "unreachable-source")),
        (last(V1, "refused", failed_task="release refused: not a signed release"), V2, (V1, "refused", "refused")),
        (last(V1), None, (V1, "changed", "unpublished")),
        (None, V1, ("?", "unreachable", "unreachable")),
        ("", V1, ("-", "never-ran", "never-ran")),
        ("\n", V1, ("-", "never-ran", "never-ran")),
        ("{not json", V1, ("?", "unreadable", "unreadable")),
        (json.dumps({"version": V1}), V1, ("?", "unreadable", "unreadable")),
        (last(V1, "exploded"), V1, (V1, "exploded", "unreadable")),
    ],
)
def test_a_node_s_drift(text, published, expected):
    result = lib.classify("n01", text, published)
    assert (result.version, result.state, result.drift) == expected
    assert (result.last is not None) == (text is not None and text.strip().startswith('{"host"'))


@pytest.mark.parametrize("state", converge.STATES)
def test_every_state_hal_converge_records_is_read_as_itself(state):
    """fleet reads hal-converge's own states: a successful one at the published version is no
    drift, any other is a drift of its name (in DRIFTS' order); none is `unreadable`."""
    result = lib.classify("n01", last(V1, state), V1)
    assert result.state == state
    assert result.drift == (None if state in converge.SUCCESSFUL else state)
    assert result.drift is None or result.drift in lib.DRIFTS


def test_results_fold_into_hostlists_by_version_state_and_drift_current_first():
    texts = {
        "n01": last(V2),
        "n02": last(V2),
        "n03": last(V2, "current"),
        "n04": last(V1),
        "n05": None,
        "n06": last(V1),
        "m1": "",
    }
    results = [lib.classify(h, t, V2) for h, t in texts.items()]
    assert [(r.version, r.state, r.drift, r.nodes, r.count) for r in lib.rows(results)] == [
        (V2, "changed", None, "n[01-02]", 2),
        (V2, "current", None, "n03", 1),
        ("?", "unreachable", "unreachable", "n05", 1),
        ("-", "never-ran", "never-ran", "m1", 1),
        (V1, "changed", "behind", "n[04,06]", 2),
    ]
    assert lib.drifted(results) == 4


def test_each_row_says_when_its_nodes_last_ran():
    texts = {
        "n01": last(V2, finished="2026-11-26T10:00:00Z"),
        "n02": last(V2, finished="2026-11-26T10:05:00Z"),
        "n03": last(V2, "current", finished="2026-11-26T10:01:00Z"),
        "n04": None,
    }
    rows = lib.rows([lib.classify(h, t, V2) for h, t in texts.items()])
    assert [(r.nodes, r.last_run) for r in rows] == [
        ("n[01-02]", "2026-11-26T10:00:00Z .. 2026-11-26T10:05:00Z"),
        ("n03", "2026-11-26T10:01:00Z"),
        ("n04", "-"),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"mode": "push"}, "deploy.mode is 'push'"),
        ({}, "deploy.mode is 'push'"),
        ({"mode": "pull", "points": [], "nodes": {}}, "missing or malformed field 'version_file'"),
        (
            {"mode": "pull", "version_file": "/x", "points": [], "nodes": {}, "bundle_root": "/b"},
            "missing or malformed field 'cluster'",
        ),
        (
            {
                "mode": "pull",
                "version_file": "/x",
                "cluster": "c",
                "bundle_root": "/b",
                "points": [{"host": "p", "url": "http://a/"}],
                "nodes": {"n01": "http://b/"},
            },
            "nodes.n01: http://b/ is no point's url",
        ),
    ],
)
def test_deploy_json_that_fleet_cannot_use_is_named(data, message):
    with pytest.raises(lib.FleetError, match="deploy.json: ") as caught:
        lib.parse_deploy(json.dumps(data))
    assert message in str(caught.value)


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client")
def test_ssh_config_is_what_ssh_itself_resolves(tmp_path):
    hostvars = {
        "n01": {
            "ansible_host": "10.0.0.11",
            "ansible_port": 2222,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": "/keys/id ed25519",
            "ansible_ssh_common_args": "-o UserKnownHostsFile=/keys/known_hosts -o StrictHostKeyChecking=yes "
            "-oConnectionAttempts=3 -J admin@gateway",
        },
        "n02": {},
    }
    config = tmp_path / "ssh_config"
    config.write_text(lib.ssh_config(hostvars))

    def resolved(host: str) -> dict[str, str]:
        text = subprocess.run(["ssh", "-G", "-F", str(config), host], capture_output=True, text=True, check=True).stdout
        return dict(line.split(" ", 1) for line in text.splitlines() if " " in line)

    n01 = resolved("n01")
    assert (n01["hostname"], n01["port"], n01["user"]) == ("10.0.0.11", "2222", "root")
    assert n01["identityfile"] == "/keys/id ed25519"
    assert n01["userknownhostsfile"] == "/keys/known_hosts"
    assert (n01["stricthostkeychecking"], n01["connectionattempts"]) == ("true", "3")
    assert n01["proxyjump"] == "admin@gateway"
    assert (resolved("n02")["hostname"], resolved("n02")["port"]) == ("n02", "22")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("-v", "'-v' has no ssh_config form"),
        ("-o", "-o without a value"),
        ("-o Compression", "-o 'Compression' is not Keyword=value"),
    ],
)
def test_common_args_without_an_ssh_config_form_are_named(args, message):
    with pytest.raises(lib.FleetError, match="n01: ansible_ssh_common_args: ") as caught:
        lib.ssh_config({"n01": {"ansible_ssh_common_args": args}})
    assert message in str(caught.value)


# The commands, against a rendered tree written here; what the point publishes and the nodes'
# last.json come through the SSH seams.

URL = "http://127.0.0.1:8181/"


def signed_release(version: str, keys: Path, key_of: str = "fl") -> str:
    """current.json publishing `version`, signed with `key_of`'s key in `keys`."""
    current = {"version": version, "bundle": f"{version}.tar.gz", "sha256": "0" * 64, "size": 1}
    release.ensure_key(key_of, keys)
    text = release.sign(
        release.release_document("fl", current, release.next_serial(key_of, keys)), release.key_paths(key_of, keys)[0]
    )
    return text.decode()


def fake_published(monkeypatch, texts: dict[str, str | None]) -> list:
    """The points' seam: each point's current.json text as given (absent: no answer)."""
    calls = []

    def read_published(fleet, timeout):
        calls.append(sorted({p.host for p in fleet.deploy.points}))
        return {p.host: texts.get(p.host) for p in fleet.deploy.points}

    monkeypatch.setattr(cli, "read_published", read_published)
    return calls


@pytest.fixture
def published(tmp_path, monkeypatch):
    """The point mgmt publishing V2, signed with the cluster's key on this controller
    (HAL_RELEASE_KEYS); the point's URL."""
    keys = tmp_path / "release-keys"
    monkeypatch.setenv(release.KEYS_ENV, str(keys))
    fake_published(monkeypatch, {"mgmt": signed_release(V2, keys)})
    return URL


def write_tree(root: Path, url: str, mode: str = "pull", nodes: list[str] = NODES, port: int = 1) -> Path:
    """A rendered tree's inventory (the deploy groups, SSH settings) and deploy.json."""
    inventory = root / "inventory"
    inventory.mkdir(parents=True)
    lines = [
        "all:\n  vars:\n    ansible_user: root\n  children:\n    deploy_points:\n      hosts:\n",
        "        mgmt: {ansible_host: 127.0.0.1}\n    deploy_pull:\n      hosts:\n",
    ]
    lines += [f"        {n}: {{ansible_host: 127.0.0.1, ansible_port: {port}}}\n" for n in nodes]
    (inventory / "hosts.yml").write_text("".join(lines))
    deploy = root / "files" / lib.DEPLOY_JSON
    deploy.parent.mkdir(parents=True)
    deploy.write_text(
        json.dumps(
            {
                "mode": mode,
                "cluster": "fl",
                "version_file": "/var/lib/hal-provision/converge/last.json",
                "port": 8181,
                "drain_wait_s": 3600,
                "bundle_root": "/srv/hal-provision/bundles",
                "points": [{"host": "mgmt", "address": "127.0.0.1", "url": url, "serves": nodes}],
                "nodes": {n: url for n in nodes},
            }
        )
    )
    return inventory


def fake_last(monkeypatch, texts: dict[str, str | None]) -> list:
    """The fan-out seam: each node's last.json text as given (absent: no answer)."""
    calls = []

    def read_last(fleet, hosts, timeout):
        calls.append(list(hosts))
        return {h: texts.get(h) for h in hosts}

    monkeypatch.setattr(cli, "read_last", read_last)
    return calls


def run(*args: str):
    result = CliRunner().invoke(app, ["fleet", *args], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def table(output: str) -> list[str]:
    """The output's lines with Rich's column padding folded to one space."""
    return [" ".join(line.split()) for line in output.splitlines()]


def test_status_exit_0_when_every_node_runs_the_published_version(tmp_path, published, monkeypatch):
    inventory = write_tree(tmp_path, published)
    calls = fake_last(monkeypatch, {n: last(V2) for n in NODES})
    result = run("status", str(inventory))
    assert result.exit_code == 0, result.output
    assert calls == [NODES]
    assert any(line.startswith(f"mgmt {published} {V2} verified, serial ") for line in table(result.output)), (
        result.output
    )
    assert f"{V2} changed - - 6 n[01-06]" in table(result.output)
    assert "6 of 6 nodes current" in result.output


def test_status_exit_1_on_drift_and_json_lists_rows_and_nodes(tmp_path, published, monkeypatch):
    inventory = write_tree(tmp_path, published)
    fake_last(
        monkeypatch,
        {
            "n01": last(V2),
            "n02": last(V2),
            "n03": last(V1),
            "n04": last(V2, "failed", failed_task="Install slurmd"),
            "n05": "",
        },
    )
    result = run("status", str(inventory))
    assert result.exit_code == 1, result.output
    assert "2 of 6 nodes current, 4 drifted" in result.output
    assert "? unreachable unreachable - 1 n06" in table(result.output)
    assert f"{V1} changed behind - 1 n03" in table(result.output)

    result = run("status", str(inventory), "--json")
    assert result.exit_code == 1
    report = json.loads(result.output)
    [point] = report["points"]
    assert {k: point[k] for k in ("host", "url", "version", "error")} == {
        "host": "mgmt",
        "url": published,
        "version": V2,
        "error": None,
    }
    assert point["signature"].startswith("verified, serial "), point
    assert [(r["nodes"], r["drift"]) for r in report["rows"]] == [
        ("n[01-02]", None),
        ("n06", "unreachable"),
        ("n05", "never-ran"),
        ("n04", "failed"),
        ("n03", "behind"),
    ]
    assert report["drift"] == 4
    assert report["nodes"]["n04"]["last"]["failed_task"] == "Install slurmd"
    assert report["nodes"]["n03"] == {
        "version": V1,
        "state": "changed",
        "published": V2,
        "drift": "behind",
        "last": json.loads(last(V1)),
    }


def test_status_with_its_point_down_reports_the_nodes_unpublished(tmp_path, monkeypatch):
    inventory = write_tree(tmp_path, URL)
    fake_published(monkeypatch, {"mgmt": None})
    fake_last(monkeypatch, {n: last(V2) for n in NODES})
    report = json.loads(run("status", str(inventory), "--json", "--timeout", "2").output)
    assert report["points"][0]["version"] is None
    assert report["points"][0]["error"] == "cannot read /srv/hal-provision/bundles/current.json over SSH"
    assert [(r["nodes"], r["drift"]) for r in report["rows"]] == [("n[01-06]", "unpublished")]


def test_status_says_when_a_points_release_does_not_verify_and_why_nodes_refused_it(tmp_path, monkeypatch):
    """A point publishing a release signed with another key (or none): its row says so in red;
    the nodes that refused it show as drift `refused`, with their reason."""
    keys = tmp_path / "release-keys"
    monkeypatch.setenv(release.KEYS_ENV, str(keys))
    release.ensure_key("fl", keys)
    inventory = write_tree(tmp_path, URL)
    fake_published(monkeypatch, {"mgmt": signed_release(V2, tmp_path / "intruder-keys")})
    why = "release refused: the signature does not verify with /etc/hal-provision/release.pub: ..."
    fake_last(monkeypatch, {n: last(V1, "refused", failed_task=why) for n in NODES})
    result = run("status", str(inventory))
    assert result.exit_code == 1, result.output
    assert f"{V1} refused refused - 6 n[01-06]" in table(result.output)
    assert f"n[01-06]: {why}" in table(result.output)
    report = json.loads(run("status", str(inventory), "--json").output)
    assert report["points"][0]["signature"].startswith("DOES NOT VERIFY: the signature does not verify")
    fake_published(monkeypatch, {"mgmt": json.dumps({"version": V2, "bundle": f"{V2}.tar.gz", "sha256": "0" * 64})})
    report = json.loads(run("status", str(inventory), "--json").output)
    assert report["points"][0]["error"] == "current.json is no release (unsigned or malformed)"


def test_points_are_read_over_ssh_from_their_bundle_root(tmp_path, monkeypatch):
    inventory = write_tree(tmp_path, URL)
    commands = []

    def fan_out(fleet, hosts, command, timeout, command_timeout=0):
        commands.append((list(hosts), command))
        return {h: None for h in hosts}

    monkeypatch.setattr(cli, "fan_out", fan_out)
    fleet = cli.load(inventory)
    assert cli.read_published(fleet, 5) == {"mgmt": None}
    assert commands == [(["mgmt"], "cat /srv/hal-provision/bundles/current.json")]


def test_status_of_a_push_cluster_or_a_bad_directory_is_one_error(tmp_path, published):
    push = write_tree(tmp_path / "push", published, mode="push")
    result = run("status", str(push))
    assert result.exit_code == 2
    assert "deploy.mode is 'push'" in result.output and len(result.output.strip().splitlines()) == 1

    old = write_tree(tmp_path / "old", published)
    (old.parent / "files" / lib.DEPLOY_JSON).unlink()
    result = run("status", str(old))
    assert result.exit_code == 2 and "deploy.mode is push (the default)" in result.output

    for bad, message in ((tmp_path / "nowhere", "does not exist"), (tmp_path, "is not a rendered inventory")):
        result = run("status", str(bad))
        assert result.exit_code == 2 and message in result.output, result.output
        assert "Traceback" not in result.output


def test_status_names_pull_nodes_the_inventory_lacks(tmp_path, published):
    inventory = write_tree(tmp_path, published)
    deploy = inventory.parent / "files" / lib.DEPLOY_JSON
    data = json.loads(deploy.read_text())
    data["nodes"]["n99"] = published
    deploy.write_text(json.dumps(data))
    result = run("status", str(inventory))
    assert result.exit_code == 2 and "nodes n99 are not in the inventory" in result.output


def test_converge_starts_the_unit_on_the_chosen_pull_nodes(tmp_path, published, monkeypatch):
    inventory = write_tree(tmp_path, published)
    commands = []

    def fan_out(fleet, hosts, command, timeout, command_timeout=0):
        commands.append((list(hosts), command))
        return {h: ("" if h != "n03" else None) for h in hosts}

    monkeypatch.setattr(cli, "fan_out", fan_out)
    result = run("converge", "n[01-02]", "-i", str(inventory))
    assert result.exit_code == 0, result.output
    assert commands == [(["n01", "n02"], "systemctl start --no-block hal-converge.service")]
    assert "started hal-converge.service on n[01-02]" in result.output

    result = run("converge", "-i", str(inventory))
    assert result.exit_code == 1 and "did not start on n03" in result.output

    result = run("converge", "n[01-02],mgmt", "-i", str(inventory))
    assert result.exit_code == 2 and "HOSTS: mgmt are not pull nodes" in result.output


def test_converge_wait_runs_the_unit_then_reports_the_status(tmp_path, published, monkeypatch):
    inventory = write_tree(tmp_path, published)
    monkeypatch.setattr(
        cli, "fan_out", lambda fleet, hosts, command, timeout, command_timeout=0: {h: "" for h in hosts}
    )
    fake_last(monkeypatch, {"n01": last(V2), "n02": last(V1, "failed")})
    result = run("converge", "n[01-02]", "--wait", "-i", str(inventory))
    assert result.exit_code == 1, result.output
    assert "ran hal-converge.service on n[01-02]" in result.output
    assert "1 of 2 nodes current, 1 drifted" in result.output


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client")
def test_the_real_fan_out_reaches_nodes_as_the_inventory_says_and_reports_silence_as_unreachable(tmp_path, published):
    """ClusterShell runs ssh with the written ssh_config: both nodes' connections arrive at the
    inventory's address and port, where something that is not sshd hangs up."""
    arrived = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(10)

        def hang_up() -> None:
            for _ in range(2):
                connection, _address = listener.accept()
                arrived.append(connection.recv(64))
                connection.close()

        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        inventory = write_tree(tmp_path, published, nodes=["n01", "n02"], port=listener.getsockname()[1])
        fleet = cli.load(inventory)
        assert cli.read_last(fleet, fleet.nodes, timeout=3) == {"n01": None, "n02": None}
        thread.join(10)
    assert len(arrived) == 2 and all(greeting.startswith(b"SSH-2.0-") for greeting in arrived)

    result = run("status", str(write_tree(tmp_path / "closed", published, nodes=["n01", "n02"])), "--timeout", "3")
    assert result.exit_code == 1 and "? unreachable unreachable - 2 n[01-02]" in table(result.output)


# playbooks/publish.yml: its structure, then run for real on this machine as a point.

REPO = Path(__file__).resolve().parents[3]
PUBLISH = REPO / "playbooks" / "publish.yml"
ANSIBLE_PLAYBOOK = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")


def test_publish_runs_on_the_points_and_replaces_current_json_after_the_bundle():
    [play] = yaml.safe_load(PUBLISH.read_text())
    assert play["hosts"] == "deploy_points" and play["gather_facts"] is False
    names = [task["name"] for task in play["tasks"]]
    copies = [task for task in play["tasks"] if "ansible.builtin.copy" in task]
    assert [c["ansible.builtin.copy"]["dest"] for c in copies] == [
        "{{ __publish_root }}/{{ item }}",
        "{{ __publish_root }}/current.json",
    ]
    # current.json goes last of the copies, and only after the bundle was checked against it.
    assert names.index("Check the bundle and its manifest against current.json") < names.index(copies[0]["name"])
    assert all(c["ansible.builtin.copy"]["mode"] == "0644" for c in copies)
    assert "publish_keep | default(3)" in play["vars"]["__publish_keep"]
    assert "/etc/hal-provision/deploy.json" in play["vars"]["__publish_deploy"]  # bundle_root from the rendered tree
    assert "publish.yml" not in [
        e["ansible.builtin.import_playbook"] for e in yaml.safe_load((REPO / "playbooks" / "site.yml").read_text())
    ]


@pytest.mark.skipif(not Path(ANSIBLE_PLAYBOOK).exists(), reason="ansible-playbook is not installed")
def test_publish_keeps_the_three_newest_bundles_and_a_second_run_changes_nothing(tmp_path):
    import hashlib

    bundles, root = tmp_path / "out", tmp_path / "srv" / "bundles"
    bundles.mkdir()
    (tmp_path / "files" / "etc" / "hal-provision").mkdir(parents=True)
    (tmp_path / "files" / lib.DEPLOY_JSON).write_text(json.dumps({"mode": "pull", "bundle_root": str(root)}))
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "hosts.yml").write_text(
        "all:\n  children:\n    deploy_points:\n      hosts:\n        point:\n"
        f"          ansible_connection: local\n          ansible_python_interpreter: {sys.executable}\n"
        "          hal_rendered_dir: '{{ inventory_dir }}/../files'\n"
    )

    def publish(version: str | None = None) -> str:
        if version:
            data = f"bundle {version}\n".encode()
            (bundles / f"{version}.tar.gz").write_bytes(data)
            (bundles / f"{version}.json").write_text(json.dumps({"version": version}))
            current = {
                "version": version,
                "bundle": f"{version}.tar.gz",
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
            }
            (bundles / "current.json").write_bytes(
                release.sign_outputs({"current.json": json.dumps(current).encode()}, "fl", directory=tmp_path / "keys")[
                    "current.json"
                ]
            )
        done = subprocess.run(
            [ANSIBLE_PLAYBOOK, "-i", str(tmp_path / "inventory"), str(PUBLISH), "-e", f"bundle_dir={bundles}"],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return re.search(r"changed=(\d+)", done.stdout).group(1)

    # The point holds three earlier bundles (as three earlier publishes left them, oldest first:
    # "newest" is by modification time there); a fourth is published.
    root.mkdir(parents=True)
    for age, version in enumerate((V1, V2, "5555eeee6666ffff")):
        for ext in (".tar.gz", ".json"):
            (root / f"{version}{ext}").write_text(version)
            os.utime(root / f"{version}{ext}", (1_700_000_000 + age, 1_700_000_000 + age))
    assert publish("7777aaaa8888bbbb") != "0"
    assert publish() == "0"
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [
            "current.json",
            *(f"{v}{ext}" for v in (V2, "5555eeee6666ffff", "7777aaaa8888bbbb") for ext in (".tar.gz", ".json")),
        ]
    )
    assert (
        release.verify((root / "current.json").read_text(), tmp_path / "keys/fl.pub")["version"] == "7777aaaa8888bbbb"
    )

    # A bundle that is not what current.json says is never published.
    (bundles / "7777aaaa8888bbbb.tar.gz").write_bytes(b"tampered")
    (root / "current.json").unlink()
    with pytest.raises(AssertionError, match="its sha256 is not current.json's"):
        publish()
    assert not (root / "current.json").exists()

    # Nor is an unsigned current.json (the nodes would refuse it).
    data = b"bundle unsigned\n"
    (bundles / "9999aaaa0000bbbb.tar.gz").write_bytes(data)
    (bundles / "9999aaaa0000bbbb.json").write_text("{}")
    (bundles / "current.json").write_text(
        json.dumps(
            {
                "version": "9999aaaa0000bbbb",
                "bundle": "9999aaaa0000bbbb.tar.gz",
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
            }
        )
    )
    with pytest.raises(AssertionError, match="is not a signed release"):
        publish()
    assert not (root / "current.json").exists()
