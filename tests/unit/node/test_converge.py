"""hal-converge (hal_provision/node/converge.py) end to end on this machine.

Bundles are real tar.gz files served by a real http.server on 127.0.0.1, their releases signed
by hal_provision/release.py with a real minisign key made for the module and verified by the
real minisign; the converge is a real `ansible-playbook -c local` of a tiny pull.yml that copies
one rendered file. Only Slurm is faked, through converge.run_command (no Slurm in unit tests):
sinfo, scontrol and squeue answer from a small in-memory node.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hal_provision import release
from hal_provision.node import converge

VENV_BIN = Path(sys.executable).parent
pytestmark = [
    pytest.mark.skipif(
        not (VENV_BIN / "ansible-playbook").exists(), reason="ansible-playbook is not installed beside this Python"
    ),
    pytest.mark.skipif(
        shutil.which("minisign") is None,
        reason="minisign is not installed (Debian package minisign; ./bootstrap.sh installs it)",
    ),
]
HOST = "hal01"
CLUSTER = "hal"
KEYS: dict[str, Path] = {}  # the module's release-key directory (the `keys` fixture)


@pytest.fixture(scope="module", autouse=True)
def keys(tmp_path_factory):
    """The cluster's release key pair, as `hal-provision bundle` makes it, and another cluster's."""
    KEYS["dir"] = tmp_path_factory.mktemp("release-keys")
    release.ensure_key(CLUSTER, KEYS["dir"])
    release.ensure_key("intruder", KEYS["dir"])
    yield KEYS["dir"]
    KEYS.clear()


def signed(
    current: dict, key_of: str = CLUSTER, cluster: str = CLUSTER, serial: int | None = None, now=None, **changes
) -> bytes:
    """current.json of `current` (version, bundle, sha256, size) as a release signed with
    `key_of`'s key for `cluster`; CHANGES overwrite the document's fields before it is signed."""
    serial = serial if serial is not None else release.next_serial(CLUSTER, KEYS["dir"])
    release._record_serial(CLUSTER, serial, KEYS["dir"])
    document = {**release.release_document(cluster, current, serial, now=now), **changes}
    return release.sign(document, release.key_paths(key_of, KEYS["dir"])[0])


PULL_YML = """\
- name: Pull converge (test bundle)
  hosts: all
  gather_facts: false
  tasks:
    - name: Install the message of the day
      ansible.builtin.copy:
        src: "{{ hal_rendered_dir }}/etc/motd"
        dest: "{{ target_dir }}/motd"
        mode: "0644"
    - name: Break on purpose
      ansible.builtin.fail:
        msg: this bundle is broken
      when: break_me | default(false) | bool
"""


def make_bundle(
    out: Path, version: str, motd: str, target_dir: Path, break_me: bool = False, extra: tuple = ()
) -> dict:
    """OUT/<version>.tar.gz and OUT/current.json, the layout `hal-provision bundle` publishes;
    EXTRA: (TarInfo, bytes or None) members added after the bundle's own."""
    members = {
        "bundle/ansible.cfg": "[defaults]\nretry_files_enabled = False\n",
        "bundle/playbooks/pull.yml": PULL_YML,
        "bundle/files/etc/motd": motd,
        # The YAML inventory plugin's layout, in JSON (a static file Ansible reads as it is).
        "bundle/inventory/hosts.json": json.dumps(
            {
                "all": {
                    "children": {
                        "deploy_pull": {
                            "hosts": {
                                HOST: {
                                    "target_dir": str(target_dir),
                                    "break_me": break_me,
                                    "ansible_python_interpreter": sys.executable,
                                }
                            }
                        }
                    }
                }
            }
        ),
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in sorted(members.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for info, data in extra:
            tar.addfile(info, None if data is None else io.BytesIO(data))
    blob = buffer.getvalue()
    (out / f"{version}.tar.gz").write_bytes(blob)
    current = {
        "version": version,
        "bundle": f"{version}.tar.gz",
        "sha256": hashlib.sha256(blob).hexdigest(),
        "size": len(blob),
    }
    (out / "current.json").write_bytes(signed(current))
    return current


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Recorded(Quiet):
    """Quiet, and each GET's path in the server's `requested` list."""

    def do_GET(self):
        self.server.requested.append(self.path)
        super().do_GET()


@pytest.fixture
def point(tmp_path):
    """A distribution point: a real HTTP server over a directory; yields (directory, url,
    the paths it was asked for)."""
    root = tmp_path / "point"
    root.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Recorded, directory=str(root)))
    server.requested = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}/", server.requested
    server.shutdown()
    server.server_close()


class FakeSlurm:
    """One Slurm node as sinfo, scontrol and squeue see it; every other command runs for real."""

    def __init__(self, known: bool = True, jobs: list[list[str]] | None = None):
        self.known, self.state, self.reason = known, "idle", "none"
        self.jobs = jobs or []  # squeue's answers in turn; the last one repeats
        self.calls: list[list[str]] = []
        self.playbooks: list[list[str]] = []  # each ansible-playbook run's arguments

    def __call__(self, argv, *, env=None, cwd=None, timeout=None):
        tool = argv[0]
        if tool == "ansible-playbook":
            self.playbooks.append(list(argv[1:]))
        if tool in ("sinfo", "scontrol", "squeue", "hostname"):
            self.calls.append(list(argv))
        if tool == "hostname":
            return subprocess.CompletedProcess(argv, 0, f"{HOST}\n", "")
        if tool == "sinfo":
            line = f"{self.state}|{self.reason}\n" if self.known else ""
            return subprocess.CompletedProcess(argv, 0, line, "")
        if tool == "scontrol":
            assert argv[:3] == ["scontrol", "update", f"nodename={HOST}"], argv
            settings = dict(a.split("=", 1) for a in argv[3:])
            if settings["state"] == "drain":
                self.state, self.reason = "drained", settings["reason"]
            elif settings["state"] == "resume":
                self.state, self.reason = "idle", "none"
            return subprocess.CompletedProcess(argv, 0, "", "")
        if tool == "squeue":
            answer = self.jobs.pop(0) if len(self.jobs) > 1 else (self.jobs[0] if self.jobs else [])
            return subprocess.CompletedProcess(argv, 0, "".join(f"{j}\n" for j in answer), "")
        if tool == "ansible-playbook":
            argv = [str(VENV_BIN / "ansible-playbook"), *argv[1:]]
        return subprocess.run(argv, env=env, cwd=cwd, timeout=timeout, capture_output=True, text=True)

    def updates(self) -> list[list[str]]:
        return [c[3:] for c in self.calls if c[:2] == ["scontrol", "update"]]


@pytest.fixture
def node(tmp_path, point, monkeypatch):
    """(run, slurm, paths): run(*args) runs hal-converge once as the node's timer would."""
    root, url, requested = point
    state = tmp_path / "var"
    config = tmp_path / "deploy.json"
    config.write_text(
        json.dumps(
            {
                "mode": "pull",
                "cluster": CLUSTER,
                "release_key": str(release.key_paths(CLUSTER, KEYS["dir"])[1]),
                "version_file": str(state / "converge" / "last.json"),
                "port": 8181,
                "drain_wait_s": 30,
                "points": [{"host": "hal-mgmt", "address": "127.0.0.1", "url": url, "serves": [HOST]}],
                "nodes": {HOST: url},
                "bundle_root": str(root),
            }
        )
    )
    slurm = FakeSlurm()
    monkeypatch.setattr(converge, "run_command", slurm)
    slept: list[float] = []
    monkeypatch.setattr(converge, "sleep", slept.append)
    paths = {
        "point": root,
        "target": tmp_path / "target",
        "bundles": state / "bundles",
        "last": state / "converge" / "last.json",
        "slept": slept,
        "config": config,
        "requested": requested,
    }
    paths["target"].mkdir()

    def run(*args: str) -> int:
        return converge.main(["--config", str(config), "--bundles", str(paths["bundles"]), "--poll-s", "5", *args])

    return run, slurm, paths


def last(paths) -> dict:
    return json.loads(paths["last"].read_text())


def test_a_new_version_is_downloaded_verified_unpacked_and_converged_around_a_drain(node):
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    slurm.jobs = [["101"], ["101"], []]  # a job that ends while the node is drained
    assert run() == 0
    assert (paths["target"] / "motd").read_text() == "hello\n"
    assert (paths["bundles"] / "v1" / "bundle" / "playbooks" / "pull.yml").is_file()
    assert slurm.updates() == [["state=drain", "reason=hal-provision converge: version v1"], ["state=resume"]]
    assert paths["slept"] == [5.0, 5.0]  # polled until the job was gone
    result = last(paths)
    assert (result["state"], result["version"], result["previous"], result["changed"]) == ("changed", "v1", None, 1)
    assert (result["failed_task"], result["drained"], result["drained_for_change"]) == (None, False, True)
    assert len(result["changed_tasks"]) == 1, result
    assert oct(paths["last"].stat().st_mode & 0o777) == "0o644"


def test_result_json_layout(node):
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    assert run() == 0
    result = last(paths)
    assert sorted(result) == sorted(
        [
            "host",
            "version",
            "previous",
            "state",
            "changed",
            "changed_tasks",
            "failed_task",
            "drained",
            "drained_for_change",
            "serial",
            "expires",
            "image",
            "started",
            "finished",
            "seconds",
        ]
    )
    assert isinstance(result["serial"], int) and result["expires"].endswith("Z")
    assert result["host"] == HOST
    assert result["image"] is None  # this host did not boot a network image
    assert result["started"].endswith("Z") and result["finished"] >= result["started"]
    assert isinstance(result["seconds"], float) and result["seconds"] >= 0


def test_an_up_to_date_node_does_nothing(node):
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    assert run() == 0
    slurm.calls.clear()
    (paths["target"] / "motd").write_text("edited by hand\n")
    assert run() == 0
    assert [c[0] for c in slurm.calls] == ["hostname", "sinfo"]  # no ansible-playbook, no drain
    assert (paths["target"] / "motd").read_text() == "edited by hand\n"
    result = last(paths)
    assert (result["state"], result["version"], result["previous"], result["changed"]) == ("current", "v1", "v1", 0)
    # --force converges the same version again.
    assert run("--force") == 0
    assert (paths["target"] / "motd").read_text() == "hello\n"
    assert last(paths)["state"] == "changed"


def test_a_new_version_that_changes_nothing_is_current_without_a_drain(node):
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    assert run() == 0
    slurm.calls.clear()
    make_bundle(paths["point"], "v2", "hello\n", paths["target"])
    assert run() == 0
    assert slurm.updates() == []
    result = last(paths)
    assert (result["state"], result["version"], result["previous"], result["changed"]) == ("current", "v2", "v1", 0)


def test_a_corrupted_bundle_is_refused_and_nothing_is_unpacked(node):
    run, slurm, paths = node
    current = make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    blob = (paths["point"] / "v1.tar.gz").read_bytes()
    (paths["point"] / "v1.tar.gz").write_bytes(blob[:-10] + b"0123456789")
    assert run() == 1
    assert not (paths["bundles"] / "v1").exists()
    assert not paths["bundles"].exists() or list(paths["bundles"].iterdir()) == []  # no staging left either
    assert not (paths["target"] / "motd").exists() and slurm.updates() == []
    result = last(paths)
    assert result["state"] == "failed" and result["version"] == "v1" and result["previous"] is None
    assert f"not the published {current['sha256']}" in result["failed_task"]


def test_the_two_newest_bundles_are_kept(node):
    run, slurm, paths = node
    for number in (1, 2, 3):
        make_bundle(paths["point"], f"v{number}", f"hello {number}\n", paths["target"])
        assert run() == 0
    assert sorted(p.name for p in paths["bundles"].iterdir()) == ["v2", "v3"]
    assert last(paths)["previous"] == "v2"


def test_jobs_still_running_at_drain_wait_leave_the_node_drained_and_waiting(node, monkeypatch):
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    clock = iter(range(0, 10_000, 20))
    monkeypatch.setattr(converge.time, "monotonic", lambda: next(clock))
    slurm.jobs = [["7", "8"]]
    assert run() == 0
    assert not (paths["target"] / "motd").exists()  # not converged under the jobs
    assert slurm.state == "drained" and slurm.reason == "hal-provision converge: version v1"
    result = last(paths)
    assert (result["state"], result["drained"], result["version"], result["previous"]) == ("waiting", True, "v1", None)
    # The next run goes on: the drain is its own, so it does not drain again, and resumes after.
    slurm.calls.clear()
    slurm.jobs = [[]]
    assert run() == 0
    assert slurm.updates() == [["state=resume"]]
    assert (paths["target"] / "motd").read_text() == "hello\n"
    assert (last(paths)["state"], last(paths)["drained"]) == ("changed", False)
    assert last(paths)["changed_tasks"] and not last(paths)["drained_for_change"]  # drained by the run before


def test_a_failed_converge_drains_the_node_with_the_task_and_exits_1(node, capsys):
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"], break_me=True)
    assert run() == 1
    assert slurm.state == "drained"
    assert slurm.reason == "hal-provision converge failed: version v1: Break on purpose"
    result = last(paths)
    assert (result["state"], result["failed_task"], result["drained"]) == ("failed", "Break on purpose", True)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "Break on purpose" in err
    # A fixed bundle converges the node and lifts the drain hal-converge left.
    make_bundle(paths["point"], "v2", "fixed\n", paths["target"])
    assert run() == 0
    assert (slurm.state, last(paths)["state"], last(paths)["previous"]) == ("idle", "changed", None)


def test_an_administrator_s_drain_is_left_alone(node):
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    slurm.state, slurm.reason = "drained", "bad DIMM"
    assert run() == 0
    assert slurm.updates() == [] and slurm.reason == "bad DIMM"
    assert (last(paths)["state"], last(paths)["drained"]) == ("changed", True)


def test_a_node_slurm_does_not_know_yet_converges_without_a_drain(node):
    run, slurm, paths = node
    slurm.known = False
    make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    assert run() == 0
    assert slurm.updates() == [] and not any(c[0] == "squeue" for c in slurm.calls)
    assert last(paths)["state"] == "changed"
    # Never converged and unknown to Slurm (a freshly booted stateless node): no check run first.
    assert len(slurm.playbooks) == 1 and "--check" not in slurm.playbooks[0]


def test_a_node_slurm_knows_checks_first_even_on_its_first_converge(node):
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    assert run() == 0
    assert ["--check" in p for p in slurm.playbooks] == [True, False]


def test_an_unreachable_source_is_recorded_and_exits_1(node, capsys):
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    assert run() == 0
    (paths["point"] / "current.json").unlink()
    assert run() == 1
    result = last(paths)
    assert (result["state"], result["version"], result["previous"]) == ("unreachable-source", "v1", "v1")
    assert "HTTP 404" in result["failed_task"]
    assert "Traceback" not in capsys.readouterr().err


def test_two_runs_never_overlap(node, capsys):
    run, slurm, paths = node
    import fcntl

    paths["last"].parent.mkdir(parents=True)
    with open(paths["last"].parent / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert run() == 0
    assert not paths["last"].exists() and slurm.calls == []
    assert "another run holds the lock" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "cannot read"),
        ("{", "is not JSON"),
        (
            '{"version_file": "/x", "nodes": {}, "drain_wait_s": 1, "release_key": "/k", "cluster": "c"}',
            "hal01 is not a pull node",
        ),
        ('{"nodes": {}, "drain_wait_s": 1}', "version_file is missing"),
        ('{"version_file": "/x", "nodes": {}, "drain_wait_s": 1, "cluster": "c"}', "release_key is missing"),
    ],
)
def test_configuration_errors_are_one_line_with_status_2(node, tmp_path, capsys, text, message):
    run, slurm, paths = node
    config = tmp_path / "bad.json"
    if text is not None:
        config.write_text(text.replace("/x", str(tmp_path / "x" / "last.json")))
    assert converge.main(["--config", str(config), "--bundles", str(paths["bundles"])]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_program_runs_as_a_script_with_the_standard_library_only(tmp_path):
    """What the role installs is the program and drains.py beside it: they import nothing of
    hal_provision (-E -s: the standard library and the program's own directory only)."""
    program = tmp_path / "hal-converge"
    program.write_text(Path(converge.__file__).read_text())
    shutil.copy(Path(converge.__file__).parent / "drains.py", tmp_path / "drains.py")
    done = subprocess.run(
        [sys.executable, "-E", "-s", str(program), "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
    )
    assert done.returncode == 0 and "--force" in done.stdout


@pytest.mark.parametrize("python_has_filter", [True, False])
@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("bundle/../escape", tarfile.REGTYPE),
        ("/etc/passwd", tarfile.REGTYPE),
        ("elsewhere/file", tarfile.REGTYPE),
        ("bundle/link", tarfile.SYMTYPE),
    ],
)
def test_a_member_outside_bundle_or_not_a_file_is_refused(tmp_path, monkeypatch, python_has_filter, name, kind):
    """Debian 12's Python (3.11.2) has no tarfile filter: hal-converge refuses what the "data"
    filter would, and more (anything but files and directories under bundle/), either way."""
    if not python_has_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        member = tarfile.TarInfo(name)
        member.type = kind
        if kind == tarfile.SYMTYPE:
            member.linkname = "/etc/shadow"
        tar.addfile(member, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
    data.seek(0)
    with (
        tarfile.open(fileobj=data, mode="r:gz") as tar,
        pytest.raises(tarfile.TarError, match="not a file or directory"),
    ):
        converge._extract(tar, tmp_path / "into")
    assert not (tmp_path / "into").exists() and not (tmp_path / "escape").exists()


# ---- crafted bundles: each refused, or unpacked with its danger taken out, and last.json says so --


def crafted(name: str, kind=tarfile.REGTYPE, data: bytes | None = b"", **attrs) -> tuple:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if data is not None and kind == tarfile.REGTYPE else 0
    for key, value in attrs.items():
        setattr(info, key, value)
    return info, data if kind == tarfile.REGTYPE else None


@pytest.mark.parametrize(
    "member",
    [
        crafted("bundle/../escape"),
        crafted("/etc/escape"),
        crafted("bundle/link", tarfile.SYMTYPE, linkname="/etc/shadow"),
        crafted("bundle/hard", tarfile.LNKTYPE, linkname="bundle/ansible.cfg"),
        crafted("bundle/dev/sda", tarfile.BLKTYPE, devmajor=8, devminor=0),
        crafted("bundle/tty", tarfile.CHRTYPE, devmajor=5, devminor=0),
        crafted("bundle/fifo", tarfile.FIFOTYPE),
    ],
    ids=["traversal", "absolute", "symlink", "hard-link", "block-device", "char-device", "fifo"],
)
def test_a_crafted_member_refuses_the_bundle_and_last_json_says_why(node, member):
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"], extra=(member,))
    assert run() == 1
    result = last(paths)
    assert result["state"] == "failed" and result["previous"] is None
    assert f"member {member[0].name!r} is not a file or directory under bundle/" in result["failed_task"]
    assert not paths["bundles"].exists() or list(paths["bundles"].iterdir()) == []  # nothing unpacked
    assert not (paths["target"] / "motd").exists() and slurm.updates() == []
    assert not (paths["point"].parent / "escape").exists() and not Path("/etc/escape").exists()


@pytest.mark.parametrize("python_has_filter", [True, False])
def test_setuid_world_writable_and_foreign_owners_are_neutralised(node, monkeypatch, python_has_filter):
    if not python_has_filter:  # Debian 12's Python 3.11.2
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    run, slurm, paths = node
    make_bundle(
        paths["point"],
        "v1",
        "hello\n",
        paths["target"],
        extra=(
            crafted(
                "bundle/bin/setuid-shell",
                data=b"#!/bin/sh\n",
                mode=0o6755,
                uid=1234,
                gid=1234,
                uname="mallory",
                gname="mallory",
            ),
            crafted("bundle/open", tarfile.DIRTYPE, mode=0o1777, uid=1234, gid=1234),
            crafted("bundle/open/writable", data=b"x", mode=0o666),
        ),
    )
    assert run() == 0 and last(paths)["state"] == "changed"
    unpacked = paths["bundles"] / "v1" / "bundle"
    for rel, mode in (("bin/setuid-shell", 0o755), ("open", 0o755), ("open/writable", 0o644)):
        st = (unpacked / rel).stat()
        assert oct(st.st_mode & 0o7777) == oct(mode), rel
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), rel  # root's, where hal-converge runs


def test_a_gzip_bomb_is_refused_before_it_is_unpacked(node, monkeypatch):
    """1 MiB of unpacked bytes allowed here, a member of 8 MiB of zeros (about 8 KiB gzipped)."""
    monkeypatch.setattr(converge, "MAX_UNPACKED_BYTES", 1 << 20)
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"], extra=(crafted("bundle/zeros", data=bytes(8 << 20)),))
    assert (paths["point"] / "v1.tar.gz").stat().st_size < 64 << 10
    assert run() == 1
    result = last(paths)
    assert result["state"] == "failed" and "1,048,576 bytes unpacked" in result["failed_task"]
    assert not paths["bundles"].exists() or list(paths["bundles"].iterdir()) == []


def test_an_oversized_bundle_is_cut_off_while_it_downloads(node, monkeypatch):
    monkeypatch.setattr(converge, "MAX_BUNDLE_BYTES", 64 << 10)
    run, slurm, paths = node
    make_bundle(
        paths["point"], "v1", "hello\n", paths["target"], extra=(crafted("bundle/noise", data=os.urandom(256 << 10)),)
    )
    assert run() == 1
    result = last(paths)
    assert result["state"] == "failed" and "more than 65,536 bytes: refused" in result["failed_task"]
    assert not paths["bundles"].exists() or list(paths["bundles"].iterdir()) == []  # the partial file is gone


def test_an_oversized_current_json_is_refused(node):
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    doc = json.loads((paths["point"] / "current.json").read_text())
    (paths["point"] / "current.json").write_text(json.dumps({**doc, "padding": "x" * (1 << 20)}))  # signed, but huge
    assert run() == 1
    result = last(paths)
    assert result["state"] == "unreachable-source" and "more than 65,536 bytes: refused" in result["failed_task"]


# ---- signed releases: what a node refuses before it downloads anything --------------------------


def _refused(run, paths, capsys, reason: str) -> dict:
    """One run that refuses the published release: exit 1, one line on stderr, last.json says
    why, no bundle asked for, nothing unpacked, the node's file as it was."""
    before = (paths["target"] / "motd").read_text() if (paths["target"] / "motd").exists() else None
    paths["requested"].clear()
    capsys.readouterr()
    assert run() == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "refused" in err, err
    result = last(paths)
    assert result["state"] == "refused" and result["failed_task"].startswith("release refused: "), result
    assert reason in result["failed_task"], result
    assert paths["requested"] == ["/current.json"], paths["requested"]  # the bundle was never fetched
    after = (paths["target"] / "motd").read_text() if (paths["target"] / "motd").exists() else None
    assert after == before
    return result


def test_an_unsigned_release_with_a_valid_sha256_is_refused(node, capsys):
    run, slurm, paths = node
    current = make_bundle(paths["point"], "v1", "owned\n", paths["target"])
    (paths["point"] / "current.json").write_text(json.dumps(current))  # what a forger can write: no signature
    result = _refused(run, paths, capsys, "not a signed release")
    assert (result["version"], result["previous"], result["serial"]) == (None, None, None)
    assert not (paths["target"] / "motd").exists() and slurm.updates() == []


@pytest.mark.parametrize(
    ("signing", "reason"),
    [
        ({"key_of": "intruder"}, "the signature does not verify"),
        ({"cluster": "other"}, "cluster 'other'"),
        ({"days_ago": 31}, "expired at"),
    ],
    ids=["another-key", "another-cluster", "expired"],
)
def test_a_release_signed_with_another_key_for_another_cluster_or_expired_is_refused(node, capsys, signing, reason):
    import datetime as dt

    run, slurm, paths = node
    current = make_bundle(paths["point"], "v1", "owned\n", paths["target"])
    days_ago = signing.pop("days_ago", None)
    if days_ago is not None:
        signing["now"] = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=days_ago)
    (paths["point"] / "current.json").write_bytes(signed(current, **signing))
    _refused(run, paths, capsys, reason)


def test_a_release_rewritten_after_signing_is_refused(node, capsys):
    """The signed document and its signature kept, one field of the document changed (another
    bundle's sha256, say)."""
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "owned\n", paths["target"])
    envelope = json.loads((paths["point"] / "current.json").read_text())
    envelope["release"] = envelope["release"].replace('"size":', '"size":1', 1)
    (paths["point"] / "current.json").write_text(json.dumps(envelope))
    _refused(run, paths, capsys, "the signature does not verify")


def test_an_older_signed_release_is_refused_as_a_rollback(node, capsys):
    """v1 signed first (a smaller serial), v2 after; the node takes v2, then refuses v1 when the
    point publishes it again, and keeps running v2 with v2's serial."""
    run, slurm, paths = node
    make_bundle(paths["point"], "v1", "one\n", paths["target"])
    old_release = (paths["point"] / "current.json").read_bytes()
    make_bundle(paths["point"], "v2", "two\n", paths["target"])
    assert run() == 0
    taken = last(paths)
    assert (taken["state"], taken["version"]) == ("changed", "v2")
    (paths["point"] / "current.json").write_bytes(old_release)
    result = _refused(run, paths, capsys, "a rollback, refused")
    assert (result["version"], result["previous"], result["serial"]) == ("v2", "v2", taken["serial"])
    assert (paths["target"] / "motd").read_text() == "two\n"
    # The same release again is not a rollback: the node is current.
    make_bundle(paths["point"], "v3", "three\n", paths["target"])
    assert run() == 0 and last(paths)["version"] == "v3"


def test_a_point_that_sends_more_than_the_signed_size_is_cut_off(node, capsys):
    run, slurm, paths = node
    current = make_bundle(paths["point"], "v1", "hello\n", paths["target"])
    (paths["point"] / "current.json").write_bytes(signed({**current, "size": current["size"] // 2}))
    assert run() == 1
    result = last(paths)
    assert result["state"] == "failed" and f"more than {current['size'] // 2:,} bytes: refused" in result["failed_task"]
    assert not (paths["target"] / "motd").exists()


def test_the_record_names_the_network_boot_image_the_node_runs(tmp_path):
    from hal_provision.images.recipe import IMAGE_RECORD
    from hal_provision.node import converge

    assert str(converge.IMAGE_RECORD) == IMAGE_RECORD  # where images/build.py writes it
    record = tmp_path / "image.json"
    record.write_text('{"name": "compute", "version": "1b4e0f63d936", "release": "bookworm"}\n')
    assert converge.booted_image(record) == "compute@1b4e0f63d936"
    record.write_text("{not json")
    assert converge.booted_image(record) is None
    assert converge.booted_image(tmp_path / "absent.json") is None
