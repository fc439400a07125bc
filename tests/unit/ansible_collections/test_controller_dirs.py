"""Nothing outside the repository is assumed to exist on the controller: every directory that
ssh or Ansible must find, named by ansible.cfg or the molecule configuration, is made by the run
that needs it (the strategy's plugin_utils/controller_dirs.py) or is a search path Ansible skips
when it is missing. Each test runs with a HOME that starts empty, as CI does."""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from hal_provision import tools
from hal_provision.cli import runner

REPO = runner.REPO
PLUGIN_UTILS = REPO / "hal_provision/ansible_collections/hal/provision/plugins/plugin_utils/controller_dirs.py"
SSH = shutil.which("ssh")
needs_ssh = pytest.mark.skipif(SSH is None, reason="the ssh client (openssh-client, a bootstrap package) is missing")

# Paths under the home that Ansible only searches: a missing one is skipped, never an error.
SEARCHED_ONLY = {"~/.ansible/collections": "collections_path: a search path, skipped when missing"}


def _controller_dirs():
    spec = importlib.util.spec_from_file_location("controller_dirs", PLUGIN_UTILS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ansible_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None)  # Ansible reads the file raw
    cfg.read(REPO / "ansible.cfg")
    return cfg


def _ssh_control_path(ssh_args: str, home: Path) -> str:
    """The ControlPath real ssh makes of these arguments for some host (ssh -G resolves it)."""
    proc = subprocess.run(
        [SSH, "-G", "-F", "/dev/null", *ssh_args.split(), "node.invalid"],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(home)},
        timeout=30,
        check=True,
    )
    [path] = [line.split(" ", 1)[1] for line in proc.stdout.splitlines() if line.lower().startswith("controlpath ")]
    return path


def _run_a_play(home: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """A one-task play through the repository's ansible.cfg (and so its strategy) in HOME."""
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.command: 'true'\n      changed_when: false\n"
    )
    env = runner.ansible_env({**os.environ, "HOME": str(home)})
    env.pop("XDG_CACHE_HOME", None)
    return subprocess.run(
        [tools.find("ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def empty_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    return home


@needs_ssh
def test_ssh_finds_its_control_socket_directory_after_a_run_in_an_empty_home(empty_home, tmp_path):
    """The first run on a machine that never ran Ansible: the directory ssh binds the control
    socket in (as ssh itself resolves ansible.cfg's ssh_args) exists, private to the user, and
    lies in this HOME, not in one an earlier run left."""
    ssh_args = _ansible_cfg().get("ssh_connection", "ssh_args")
    socket_dir = Path(_ssh_control_path(ssh_args, empty_home)).parent
    assert empty_home in socket_dir.parents, f"ssh binds its control sockets in {socket_dir}, outside HOME={empty_home}"
    assert not socket_dir.exists()
    proc = _run_a_play(empty_home, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert socket_dir.is_dir(), f"nothing made {socket_dir}: ssh would fail 'unix_listener: cannot bind to path'"
    assert stat.S_IMODE(socket_dir.stat().st_mode) == 0o700


def test_every_home_path_the_configs_name_is_made_by_the_run_or_only_searched(empty_home, tmp_path):
    """Every ~ or $HOME path in ansible.cfg and the molecule configuration exists after one run
    in an empty HOME, or is a search path Ansible skips when missing (SEARCHED_ONLY)."""
    texts = [(REPO / "ansible.cfg").read_text()]
    texts += [p.read_text() for p in sorted((REPO / "molecule").glob("*/*.yml"))]
    found = set()
    for text in texts:
        for word in re.split(r"[\s:,=\"']+", text):
            if word.startswith("~/") or word.startswith("${HOME}/") or word.startswith("$HOME/"):
                found.add(re.sub(r"^(\$\{HOME\}|\$HOME)", "~", word))
    assert "~/.ansible/cp" in found  # the sweep sees the paths this test is about
    proc = _run_a_play(empty_home, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    missing = []
    for path in sorted(found):
        if path in SEARCHED_ONLY:
            continue
        real = empty_home / path[2:]
        if "%" in real.name:  # a socket or file named per connection: its directory must exist
            real = real.parent
        if not real.exists():
            missing.append(path)
    assert not missing, f"named by the configuration, made by nothing: {missing}"


@needs_ssh
@pytest.mark.parametrize(
    "control_path",
    [
        "${HOME}/.ansible/cp/%C",
        "~/.ansible/cp/%C",
        "%d/.ssh/cm-%C",
        "/run/hal-ssh/%r@%h:%p",
    ],
)
def test_the_directory_is_the_one_ssh_binds_in(control_path, empty_home):
    """control_dir expands a ControlPath's directory exactly as real ssh does (ssh -G)."""
    module = _controller_dirs()
    expected = str(Path(_ssh_control_path(f"-o ControlPath={control_path}", empty_home)).parent)
    assert module.control_dir(control_path, {"HOME": str(empty_home)}) == expected


@pytest.mark.parametrize("control_path", ["none", "", "/tmp/%h/sock"])
def test_no_directory_where_ssh_binds_none_or_one_per_host(control_path):
    assert _controller_dirs().control_dir(control_path, {}) is None


@pytest.mark.parametrize(
    "ssh_args, expected",
    [
        ("-o ControlMaster=auto -o ControlPath=~/a/%C", "~/a/%C"),
        ("-oControlPath=/x/%C -o ControlPath=/y/%C", "/x/%C"),  # ssh keeps an option's first value
        ("-o controlpath=/z/%C", "/z/%C"),
        ("-o ControlPersist=60s", None),
    ],
)
def test_the_control_path_ssh_takes_from_ssh_args(ssh_args, expected):
    assert _controller_dirs().ssh_control_path(ssh_args) == expected


def test_made_private_and_an_existing_directory_left_as_it_is(tmp_path):
    module = _controller_dirs()
    made = module.ensure_control_dirs("-o ControlPath=${HOME}/cp/%C", "~/ctl", {"HOME": str(tmp_path)})
    assert made[1] == str(tmp_path / "ctl")
    assert made[0] == str(tmp_path / "cp") and stat.S_IMODE(os.stat(made[0]).st_mode) == 0o700
    os.chmod(made[0], 0o750)
    module.ensure_control_dirs("-o ControlPath=${HOME}/cp/%C", None, {"HOME": str(tmp_path)})
    assert stat.S_IMODE(os.stat(made[0]).st_mode) == 0o750


def test_the_molecule_base_needs_nothing_in_the_home():
    """The shared molecule base points at the repository's ansible.cfg and the scenario's own
    ephemeral directory for keys and known hosts: nothing under ~."""
    base = yaml.safe_load((REPO / "molecule/shared/config.yml").read_text())
    text = yaml.safe_dump(base)
    assert "~/" not in text and "$HOME" not in text and "${HOME}" not in text
