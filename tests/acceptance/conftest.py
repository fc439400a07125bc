"""Fixtures for the real-Slurm acceptance tests: cluster cases and running controllers.

The tests need root and Debian's Slurm, munge, hwloc, util-linux and iproute2. Where they
are missing every test fails with the list (bootstrap.sh installs them); nothing is skipped.
Keep a run's scratch directory for debugging with HAL_PROVISION_KEEP_SCRATCH=1.

Every test that runs a daemon runs once per Slurm major (the `slurm` fixture): the host's
22.05 and 24.11 from the Debian 13 root of hal_provision.sandbox.slurmroot. Without that root
the 24.11 tests skip, naming the command that builds it; while a build runs (tests/run-all.sh
starts one beside pytest) they wait for it, and they run last so that the wait is short.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from hal_provision.loader import load
from hal_provision.model import Cluster
from hal_provision.sandbox import slurmroot

from .slurm_harness import HOST_SLURM, Controller, Scratch, SlurmInstall, for_major, missing_requirements

CLUSTERS_DIR = Path(__file__).resolve().parents[1] / "data" / "clusters"
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"

# Case name -> description file (None: the embedded HAL description).
CLUSTER_FILES: dict[str, Path | None] = {
    "hal": None,
    "x86-twogen": CLUSTERS_DIR / "x86-twogen.yml",
    "workstation": CLUSTERS_DIR / "workstation.yml",  # one node: login, controller and compute at once
    "x86-backup-controller": CLUSTERS_DIR / "x86-backup-controller.yml",  # a primary and a backup slurmctld
    "x86-composable": CLUSTERS_DIR / "x86-composable.yml",  # hosts without GPUs of their own, a GPU pool
    # Other sites' clusters, as a new admin starts from them (README: "Describe your own cluster").
    **{f"example-{p.stem}": p for p in sorted(EXAMPLES_DIR.glob("*.yml"))},
}


def load_cluster(name: str, major: str | None = None) -> Cluster:
    """The case's description; with `major`, its slurm.version set to that major."""
    loaded = load(CLUSTER_FILES[name])
    assert loaded.model is not None, "\n".join(str(f) for f in loaded.findings)
    return loaded.model if major is None else for_major(loaded.model, major)


# The majors every daemon test runs on, oldest first; the root's come after the host's.
MAJORS = [HOST_SLURM.major, slurmroot.SLURM_MAJOR]
# How long a 24.11 test waits for a root being built beside it (the build took 42-59 s here).
ROOT_BUILD_WAIT_S = 900.0


def _root_slurm() -> SlurmInstall:
    root = slurmroot.default_dir()
    if not slurmroot.is_current(root) and not slurmroot.wait_for_build(root, ROOT_BUILD_WAIT_S):
        pytest.skip(
            f"no current Slurm {slurmroot.SLURM_MAJOR} root at {root}: build it with `{slurmroot.BUILD_COMMAND}`"
        )
    return SlurmInstall(slurmroot.SLURM_MAJOR, root)


@pytest.fixture(scope="session", params=MAJORS, ids=[f"slurm{m}" for m in MAJORS])
def slurm(request) -> SlurmInstall:
    """The Slurm whose daemons a test runs: the host's 22.05, then the root's 24.11."""
    return HOST_SLURM if request.param == HOST_SLURM.major else _root_slurm()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items) -> None:
    """The root's major last (stable otherwise): its tests may wait for the root's build."""

    def major(item) -> int:
        callspec = getattr(item, "callspec", None)
        return MAJORS.index(callspec.params["slurm"]) if callspec and "slurm" in callspec.params else 0

    items.sort(key=major)


@dataclass
class Case:
    name: str
    cluster: Cluster
    controller: Controller


@pytest.fixture(scope="session", autouse=True)
def _slurm_host() -> None:
    missing = missing_requirements()
    if missing:
        pytest.fail(
            "the acceptance tests run the real Slurm daemons and cannot run here: "
            + "; ".join(missing)
            + ". Install them with ./bootstrap.sh (apt packages slurmctld slurmd slurmdbd "
            "slurm-client munge hwloc util-linux iproute2).",
            pytrace=False,
        )


class _Controllers:
    """One slurmctld per cluster case for the whole session, started on first use."""

    def __init__(self):
        self.cases: dict[tuple[str, str], Case] = {}  # by (case, major)
        self._failed: dict[tuple[str, str], BaseException] = {}
        self._scratches: list[Scratch] = []

    def get(self, name: str, slurm: SlurmInstall) -> Case:
        key = (name, slurm.major)
        if key in self._failed:  # report a failed start once per test, never retry it
            raise self._failed[key]
        if key not in self.cases:
            cluster = load_cluster(name, slurm.major)
            try:
                controller = start_controller(cluster, self._scratches, slurm=slurm)
            except AssertionError as exc:
                self._failed[key] = exc
                raise
            self.cases[key] = Case(name, cluster, controller)
        return self.cases[key]

    def close(self) -> None:
        for case in self.cases.values():
            case.controller.close()
        for scratch in self._scratches:
            scratch.remove()


def start_controller(
    cluster: Cluster,
    scratches: list[Scratch],
    edit: Callable[[Scratch], None] | None = None,
    slurm: SlurmInstall = HOST_SLURM,
) -> Controller:
    """`slurm`'s slurmctld on the tree of `cluster` rendered for it, after `edit` (negative
    controls) if given; the scratch goes into `scratches` for removal."""
    scratch = Scratch.create(cluster, slurm)
    scratches.append(scratch)
    scratch.install_harness_configs()
    if edit:
        edit(scratch)
    return Controller(scratch, cluster.controllers[0])


@pytest.fixture(scope="session")
def all_controllers():
    running = _Controllers()
    yield running
    running.close()


@pytest.fixture
def controllers(all_controllers, slurm):
    """controllers.get(name): the case's running controller of this test's major."""

    class ForMajor:
        def get(self, name: str) -> Case:
            return all_controllers.get(name, slurm)

    return ForMajor()


@pytest.fixture(params=list(CLUSTER_FILES))
def case(request, controllers) -> Case:
    """Each cluster case with its running controller."""
    return controllers.get(request.param)


@pytest.fixture
def hal(controllers) -> Case:
    return controllers.get("hal")


@pytest.fixture
def twogen(controllers) -> Case:
    return controllers.get("x86-twogen")


@pytest.fixture
def extra_controller(slurm):
    """Start controllers of this test's major on variants of a cluster (rendered for that
    major); all stopped and removed after the test."""
    started: list[Controller] = []
    scratches: list[Scratch] = []

    def start(cluster: Cluster, edit: Callable[[Scratch], None] | None = None) -> Controller:
        controller = start_controller(cluster, scratches, edit, slurm)
        started.append(controller)
        return controller

    yield start
    for controller in started:
        controller.close()
    for scratch in scratches:
        scratch.remove()


@pytest.fixture
def make_scratch(slurm):
    """Fresh trees rendered for this test's major (with harness configs), removed after the test."""
    made: list[Scratch] = []

    def make(cluster: Cluster) -> Scratch:
        scratch = Scratch.create(cluster, slurm)
        made.append(scratch)
        scratch.install_harness_configs()
        return scratch

    yield make
    for scratch in made:
        scratch.remove()
