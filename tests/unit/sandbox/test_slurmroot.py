"""The Slurm 24.11 root's cache logic: when a root counts as built, and how the tests wait for a
build running beside them (the build itself, debootstrap, runs in tests/run-all.sh)."""

from __future__ import annotations

import fcntl
import threading
import time

import pytest

from hal_provision.sandbox import slurmroot


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.delenv("HAL_PROVISION_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return slurmroot.default_dir()


def test_root_lives_in_the_users_cache(root, tmp_path):
    assert root == tmp_path / "hal-provision" / "slurm-root-trixie"


def test_only_a_root_of_this_recipe_is_current(root):
    assert not slurmroot.is_current(root)  # missing
    root.mkdir(parents=True)
    assert not slurmroot.is_current(root)  # a half-made tree has no recipe file (never renamed into place)
    (root / slurmroot.RECIPE_FILE).write_text("0123456789abcdef\n")
    assert not slurmroot.is_current(root)  # an older recipe: rebuilt
    (root / slurmroot.RECIPE_FILE).write_text(slurmroot.recipe() + "\n")
    assert slurmroot.is_current(root)


def test_recipe_names_suite_and_packages(monkeypatch):
    before = slurmroot.recipe()
    monkeypatch.setattr(slurmroot, "PACKAGES", [*slurmroot.PACKAGES, "slurm-wlm-basic-plugins"])
    assert slurmroot.recipe() != before


def test_the_tests_wait_for_a_build_that_holds_the_lock(root):
    """A build holds the lock file while it runs; wait_for_build returns when it lets go and
    the root is there, or at its timeout."""
    root.parent.mkdir(parents=True)
    assert not slurmroot.build_running(root)
    with open(slurmroot.lock_path(root), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert slurmroot.build_running(root)
        started = time.monotonic()
        assert not slurmroot.wait_for_build(root, timeout=0.3, poll=0.05)  # still building: gives up
        assert 0.3 <= time.monotonic() - started < 2

        def finish():
            time.sleep(0.3)
            root.mkdir()
            (root / slurmroot.RECIPE_FILE).write_text(slurmroot.recipe() + "\n")
            fcntl.flock(lock, fcntl.LOCK_UN)

        builder = threading.Thread(target=finish)
        builder.start()
        assert slurmroot.wait_for_build(root, timeout=10, poll=0.05)
        builder.join()
    assert not slurmroot.build_running(root)


def test_a_current_root_is_not_rebuilt(root, capsys):
    root.mkdir(parents=True)
    (root / slurmroot.RECIPE_FILE).write_text(slurmroot.recipe() + "\n")
    assert slurmroot.build(root) == root  # no debootstrap, no root needed
    assert "is current" in capsys.readouterr().out
