"""`hal-provision health deep` against a real slurmctld: the reservation it makes, the wait, the
drain and the deletion run on the daemon as hal_provision.health_deep writes them (the
diagnostic's answers come from tests/data/dcgm/, there is no GPU here). The harness's nodes
have no slurmd, so they run no job: the wait ends at once."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from hal_provision import health_deep as deep
from hal_provision.hostlist import expand

from .conftest import load_cluster
from .slurm_harness import Controller, records

pytestmark = pytest.mark.acceptance

DATA = Path(__file__).resolve().parents[1] / "data" / "dcgm"


def slurm_commands(controller: Controller):
    """run(argv): stdout of a Slurm client command talking to `controller`; DeepError on failure."""

    def run(argv: list[str]) -> str:
        done = controller.service.ns.run(*controller.scratch.slurm.argv(argv[0], *argv[1:]), env=controller.env)
        if done.returncode != 0:
            raise deep.DeepError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    return run


def test_reservation_drain_and_cleanup_on_a_real_slurmctld(extra_controller, slurm):
    cluster = load_cluster("hal", slurm.major)
    controller = extra_controller(cluster)
    hosts = sorted(records(controller.scontrol("-o", "show", "node"), "NodeName"))[:2]
    run = slurm_commands(controller)
    seen: dict[str, str] = {}

    def diag(argv, nodes):
        # While the diagnostic runs: the reservation as slurmctld holds it.
        seen["reservation"] = controller.scontrol("-o", "show", "reservation")
        return {
            nodes[0]: (DATA / "diag-r3-one-failed.json").read_text(),
            nodes[1]: (DATA / "diag-r2-pass.json").read_text(),
        }

    shown: list[str] = []
    report = deep.run_deep(run, diag, hosts, 3, shown.append, now=datetime(2026, 11, 28, 12, 0, 0))

    [reservation] = records(seen["reservation"], "ReservationName").values()
    assert reservation["ReservationName"] == "hal-deep-20261128T120000"
    assert set(expand(reservation["Nodes"])) == set(hosts)
    assert {"MAINT", "IGNORE_JOBS"} <= set(reservation["Flags"].split(",")), reservation["Flags"]
    assert reservation["Users"] == "root"

    nodes = records(controller.scontrol("-o", "show", "node", ",".join(hosts)), "NodeName")
    assert "DRAIN" in nodes[hosts[0]]["State"]
    line = controller.scontrol("-o", "show", "node", hosts[0])  # Reason= holds spaces: records() cuts it
    assert (
        "Reason=hal-deep: dcgm diag -r 3: memory failed on GPU 1: Found 2 faulty memory elements on GPU 1 [" in line
    ), line
    assert "DRAIN" not in nodes[hosts[1]]["State"]
    assert [n.passed for n in report.nodes] == [False, True]

    assert "No reservations in the system" in controller.scontrol("show", "reservation")
    assert shown[-1] == "reservation hal-deep-20261128T120000 deleted"


def test_reservation_deleted_when_the_diagnostic_fails(extra_controller, slurm):
    controller = extra_controller(load_cluster("hal", slurm.major))
    host = sorted(records(controller.scontrol("-o", "show", "node"), "NodeName"))[0]

    def diag(argv, nodes):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        deep.run_deep(slurm_commands(controller), diag, [host], 2, lambda line: None)
    assert "No reservations in the system" in controller.scontrol("show", "reservation")
    assert "DRAIN" not in records(controller.scontrol("-o", "show", "node", host), "NodeName")[host]["State"]
