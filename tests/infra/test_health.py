"""The node health check as slurmd runs it: it drains a broken node, resumes it once healed,
and never resumes a node an admin drained.

Destructive (marked `faults`): a compute node's fake GPU device file is removed and put back
(sandbox only: its GPUs are character devices the slurm role made), and a node is drained by
hand. Every test leaves the node idle and undrained. The waits are bounded by the model's
interval (HealthCheckInterval, from the rendered health.json): slurmctld asks each slurmd to
run the check once per interval, so a change shows within about one interval.
"""

from __future__ import annotations

import json
import time

import pytest

from deployed import deployed, retry

D = deployed()
FACTS = json.loads(D.rendered("etc/hal-provision/health.json") or "null")
pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(
        FACTS is None or FACTS["program"] != "hal", reason="the model has no health section with program hal"
    ),
]
NODES = D.hosts_in("slurm_nodes") if FACTS else []
INTERVAL = FACTS["interval_s"] if FACTS else 0
WAIT = 2 * INTERVAL + 20  # one interval, a run that began just before the change, and slack


def expectation(host: str) -> dict:
    return json.loads(D.health_expectation(host))


GPU_NODE = next((h for h in reversed(NODES) if expectation(h)["checks"].get("gpus")), None)


def state(node: str) -> tuple[str, str]:
    """(sinfo state, reason) of a node, as admins read it."""
    out = D.host(D.controller).check_output("sinfo -h -N -n %s -o '%%T|%%E'", node)
    st, _, reason = out.splitlines()[0].partition("|")
    return st.strip().rstrip("*~#!%$@^-+"), "" if reason.strip() == "none" else reason.strip()


def drained(node: str) -> bool:
    return state(node)[0] in ("drained", "draining")


def last_run(node: str) -> dict:
    out = D.host(node).run("cat /run/hal-healthcheck/last.json")
    return json.loads(out.stdout) if out.rc == 0 else {}


def wait_for_run_after(node: str, since: float) -> dict:
    """The node's next health-check run that began after `since` (epoch seconds)."""
    record = retry(lambda: (r := last_run(node)) and r.get("time", 0) > since and r, WAIT, 2)
    assert record, f"{node}: no health check ran within {WAIT} s after {since:.0f} (interval {INTERVAL} s)"
    return record


def scontrol(node: str, *settings: str) -> None:
    out = D.host(D.controller).run("scontrol update NodeName=%s " + " ".join(["%s"] * len(settings)), node, *settings)
    assert out.rc == 0, f"scontrol update {node} {settings}: {out.stderr}"


def node_clock(node: str) -> float:
    return float(D.host(node).check_output("date +%s"))


@pytest.fixture
def healthy_node():
    """A GPU compute node, undrained and healthy before the test and again after it."""
    if GPU_NODE is None:
        pytest.skip("no Slurm node has GPU device files to check")
    if not D.container(GPU_NODE):
        pytest.skip("removing a GPU device needs the sandbox (its GPUs are fake character devices)")
    assert retry(lambda: not drained(GPU_NODE), WAIT, 2), f"{GPU_NODE} is drained before the test: {state(GPU_NODE)}"
    yield GPU_NODE
    for f in expectation(GPU_NODE)["checks"]["gpus"]["files"]:
        minor = f.removeprefix("/dev/nvidia")
        D.host(GPU_NODE).run("test -e %s || mknod -m 0666 %s c %s %s", f, f, "195", minor)
    if drained(GPU_NODE):
        scontrol(GPU_NODE, "State=RESUME")


def test_missing_gpu_drains_the_node_then_its_return_resumes_it(healthy_node):
    node = healthy_node
    gone = expectation(node)["checks"]["gpus"]["files"][-1]
    minor = gone.removeprefix("/dev/nvidia")
    removed_at = time.monotonic()
    assert D.host(node).run("rm -f %s", gone).rc == 0

    assert retry(lambda: drained(node), WAIT, 2), (
        f"{node} not drained {WAIT} s after {gone} went away: {state(node)}; last check {last_run(node)}"
    )
    took = time.monotonic() - removed_at
    st, reason = state(node)
    assert reason.startswith(f"{expectation(node)['reason_prefix']}: gpus:") and gone in reason, (
        f"{node}: drained with reason {reason!r}, which does not name the GPU check and {gone}"
    )
    print(f"{node}: drained {took:.0f} s after {gone} was removed (interval {INTERVAL} s): {reason}")

    back_at = time.monotonic()
    assert D.host(node).run("mknod -m 0666 %s c 195 %s", gone, minor).rc == 0
    assert retry(lambda: not drained(node), WAIT, 2), (
        f"{node} still drained {WAIT} s after {gone} came back: {state(node)}; last check {last_run(node)}"
    )
    print(f"{node}: resumed {time.monotonic() - back_at:.0f} s after {gone} came back")


def test_node_an_admin_drained_is_never_resumed(healthy_node):
    node = healthy_node
    admin = "admin: memory test (hal-provision tests)"
    gpu = expectation(node)["checks"]["gpus"]["files"][0]
    scontrol(node, "State=DRAIN", f"Reason={admin}")
    try:
        # Healthy and drained by somebody else: two runs later it is still drained, reason kept.
        since = node_clock(node)
        first = wait_for_run_after(node, since)
        second = wait_for_run_after(node, first["time"])
        assert second["slurm"]["action"] == "none" and "somebody else" in second["slurm"]["detail"], second
        assert state(node) == ("drained", admin), f"{node}: {state(node)} after two healthy runs"

        # Broken while drained by an admin: the admin's reason stays (no hal-health reason over it).
        assert D.host(node).run("rm -f %s", gpu).rc == 0
        broken = wait_for_run_after(node, node_clock(node))
        assert broken["reason"] and broken["reason"].startswith(expectation(node)["reason_prefix"] + ": gpus:"), broken
        assert broken["slurm"]["action"] == "none", broken
        assert state(node) == ("drained", admin), f"{node}: {state(node)} after a failed run"

        # Healed, still the admin's: not resumed.
        assert D.host(node).run("mknod -m 0666 %s c 195 %s", gpu, gpu.removeprefix("/dev/nvidia")).rc == 0
        healed = wait_for_run_after(node, node_clock(node))
        assert healed["reason"] is None and healed["slurm"]["action"] == "none", healed
        assert state(node) == ("drained", admin), f"{node}: {state(node)} after the GPU came back"
    finally:
        scontrol(node, "State=RESUME")
