"""Fixtures for the real-Slurm acceptance tests: cluster cases and running controllers.

The tests need root and Debian's Slurm, munge, hwloc, util-linux and iproute2. Where they
are missing every test fails with the list (bootstrap.sh installs them); nothing is skipped.
Keep a run's scratch directory for debugging with HAL_PROVISION_KEEP_SCRATCH=1.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from hal_provision.loader import load
from hal_provision.model import Cluster

from .slurm_harness import Controller, Scratch, missing_requirements

CLUSTERS_DIR = Path(__file__).resolve().parents[1] / "data" / "clusters"
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"

# Case name -> description file (None: the embedded HAL description).
CLUSTER_FILES: dict[str, Path | None] = {
    "hal": None,
    "x86-twogen": CLUSTERS_DIR / "x86-twogen.yml",
    "workstation": CLUSTERS_DIR / "workstation.yml",  # one node: login, controller and compute at once
    "x86-backup-controller": CLUSTERS_DIR / "x86-backup-controller.yml",  # a primary and a backup slurmctld
    # Other sites' clusters, as a new admin starts from them (README: "Describe your own cluster").
    **{f"example-{p.stem}": p for p in sorted(EXAMPLES_DIR.glob("*.yml"))},
}


def load_cluster(name: str) -> Cluster:
    loaded = load(CLUSTER_FILES[name])
    assert loaded.model is not None, "\n".join(str(f) for f in loaded.findings)
    return loaded.model


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
        self.cases: dict[str, Case] = {}
        self._failed: dict[str, BaseException] = {}
        self._scratches: list[Scratch] = []

    def get(self, name: str) -> Case:
        if name in self._failed:  # report a failed start once per test, never retry it
            raise self._failed[name]
        if name not in self.cases:
            cluster = load_cluster(name)
            try:
                controller = start_controller(cluster, self._scratches)
            except AssertionError as exc:
                self._failed[name] = exc
                raise
            self.cases[name] = Case(name, cluster, controller)
        return self.cases[name]

    def close(self) -> None:
        for case in self.cases.values():
            case.controller.close()
        for scratch in self._scratches:
            scratch.remove()


def start_controller(
    cluster: Cluster, scratches: list[Scratch], edit: Callable[[Scratch], None] | None = None
) -> Controller:
    """slurmctld on the rendered tree of `cluster`, after `edit` (negative controls) if given;
    the scratch goes into `scratches` for removal."""
    scratch = Scratch.create(cluster)
    scratches.append(scratch)
    scratch.install_harness_configs()
    if edit:
        edit(scratch)
    return Controller(scratch, cluster.controllers[0])


@pytest.fixture(scope="session")
def controllers():
    running = _Controllers()
    yield running
    running.close()


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
def extra_controller():
    """Start controllers on variants of a cluster; all stopped and removed after the test."""
    started: list[Controller] = []
    scratches: list[Scratch] = []

    def start(cluster: Cluster, edit: Callable[[Scratch], None] | None = None) -> Controller:
        controller = start_controller(cluster, scratches, edit)
        started.append(controller)
        return controller

    yield start
    for controller in started:
        controller.close()
    for scratch in scratches:
        scratch.remove()


@pytest.fixture
def make_scratch():
    """Fresh rendered trees (with harness configs) that are removed after the test."""
    made: list[Scratch] = []

    def make(cluster: Cluster) -> Scratch:
        scratch = Scratch.create(cluster)
        made.append(scratch)
        scratch.install_harness_configs()
        return scratch

    yield make
    for scratch in made:
        scratch.remove()
