"""`hal-provision health deep` on the deployed cluster, end to end as an admin runs it: the
rendered inventory, Ansible to slurmctld's host and to the nodes, a real maintenance
reservation, real drains. DCGM cannot be installed in the sandbox: each node gets a stand-in
`dcgmi` that answers `dcgmi diag -r 3 --json` with a written fixture (tests/data/dcgm: hal01's
all passed, the other node's with a failed memory test on GPU 1), and nothing else.

Marked `faults`: it drains a node (resumed after), so it runs last, with the fault tests.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from deployed import deployed, retry
from hal_provision import tools

D = deployed()
NODES = sorted(D.hosts_in("role_compute"))[:2]
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "dcgm"
STAND_IN = "/usr/local/bin/dcgmi"
ANSWER = "/usr/local/share/hal-test/dcgm-diag.json"

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(
        len(NODES) < 2 or not D.container(NODES[0]),
        reason="needs two sandbox compute nodes (stand-in dcgmi put in their containers)",
    ),
]


def put(host: str, local: Path, remote: str, mode: str) -> None:
    D.host(host).check_output(f"mkdir -p {Path(remote).parent}")
    proc = subprocess.run(
        ["podman", "cp", str(local), f"{D.container(host)}:{remote}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    D.host(host).check_output(f"chmod {mode} {remote}")


def slurm_state(host: str) -> tuple[str, str]:
    out = D.host(D.controller).check_output(f"sinfo -h -N -n {host} -o '%T|%E'")
    state, _, reason = out.splitlines()[0].partition("|")
    reason = reason.strip()
    return state.strip().rstrip("*~#!%$@^-+"), "" if reason == "none" else reason  # sinfo: "none" for no reason


def reservations() -> str:
    return D.host(D.controller).check_output("scontrol -o show reservation")


@pytest.fixture()
def stand_ins(tmp_path):
    script = tmp_path / "dcgmi"
    script.write_text(
        "#!/bin/sh\n# Stand-in written by tests/infra/test_health_deep.py: DCGM cannot be installed here.\n"
        f'[ "$1 $2 $3 $4" = "diag -r 3 --json" ] || {{ echo "dcgmi stand-in: $*" >&2; exit 2; }}\n'
        f"cat {ANSWER}\n"
        f"grep -q '\"Fail\"' {ANSWER} && exit 226\nexit 0\n"
    )
    for host, fixture in zip(NODES, ("diag-r2-pass.json", "diag-r3-one-failed.json")):
        put(host, script, STAND_IN, "0755")
        put(host, FIXTURES / fixture, ANSWER, "0644")
    yield
    for host in NODES:
        D.host(host).run(f"rm -f {STAND_IN} {ANSWER}")
        if slurm_state(host)[1].startswith("hal-deep:"):
            D.host(D.controller).check_output(f"scontrol update nodename={host} state=resume")
    for line in reservations().splitlines():
        if line.startswith("ReservationName=hal-deep-"):
            D.host(D.controller).run(f"scontrol delete {line.split()[0]}")


def test_health_deep_drains_the_node_whose_gpu_failed_and_removes_its_reservation(stand_ins):
    good, bad = NODES
    assert retry(lambda: all(slurm_state(h)[0] == "idle" for h in NODES), 120, 2), [slurm_state(h) for h in NODES]
    proc = subprocess.run(
        [
            tools.self_command(),
            "health",
            "deep",
            ",".join(NODES),
            "-i",
            str(D.inventory),
            "--level",
            "3",
            "--max-wait",
            "5",
        ],
        env=tools.child_env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    assert proc.returncode == 1, output  # a test failed
    assert "memory" in proc.stdout and "Found 2 faulty memory elements on GPU 1" in proc.stdout, output
    state, reason = slurm_state(bad)
    assert state in ("drained", "draining") and reason.startswith("hal-deep: dcgm diag -r 3: memory failed on GPU 1"), (
        state,
        reason,
    )
    assert slurm_state(good) == ("idle", ""), slurm_state(good)
    assert "hal-deep-" not in reservations(), reservations()  # deleted after the run
    # The periodic health check lifts only its own drains: this one stays.
    check = D.host(bad).run("/usr/local/sbin/hal-healthcheck")
    assert "drained by somebody else" in check.stdout, check.stdout + check.stderr
    assert slurm_state(bad)[1].startswith("hal-deep:"), slurm_state(bad)
