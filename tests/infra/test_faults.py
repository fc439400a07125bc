"""Fault injection: what an admin meets in real life, each test leaving the cluster healthy.

Destructive, so marked `faults` (run last; `hal-provision verify` skips them unless
--faults). In file order: slurmctld restarts with jobs queued; accounting survives a re-run of
its tiers (the accounting database and the Slurm controller); a compute node dies in the middle
of a converge of its tier (podman only: the node is a container), the monitoring's status panel
shows it down within two collection intervals, and that tier, limited to the node, heals it.
Each converges only the tier it concerns, as an admin heals one service (site.yml imports
every tier playbook, so the tasks are site.yml's).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading

import pytest

from deployed import changed_tasks, deployed, parse_recap, retry, run_site, site_cmd, tail
from monitoring_queries import FACTS as MONITORING, INTERVAL, DownWatch, nodes_down

D = deployed()
pytestmark = pytest.mark.faults

PARTITION, NODES = next(((p, n) for p, n in D.partitions().items() if n), (None, []))
# The node that dies, and where: right after its first task in the slurm role (by default),
# when common and munge are done on it and Slurm is half-configured.
VICTIM = NODES[-1] if NODES else None
FAULT_AT = re.compile(os.environ.get("HAL_FAULT_AT_TASK", r"^TASK \[slurm : "))
# The tier the victim dies in (the slurm role on compute nodes), and the tiers that keep the
# accounting (MariaDB, then slurmdbd and the accounting objects on the controller).
COMPUTE_TIER = os.environ.get("HAL_FAULT_TIER", "slurm-compute.yml")
ACCOUNTING_TIERS = ("accounting.yml", "slurm-controller.yml")


def controller_up() -> bool:
    return " is UP" in D.host(D.login).run("scontrol ping").stdout


def accounted_job_ids() -> set[str]:
    out = D.host(D.controller).check_output("sacct -a -X -n -P -o JobID -S 2000-01-01T00:00:00 -E now")
    return set(out.split())


def assert_converged(output: str, rc: int, hosts: set[str], playbook: str) -> None:
    """`playbook` ended well on exactly `hosts`."""
    recap = parse_recap(output)
    bad = {h: r for h, r in recap.items() if r.get("failed") or r.get("unreachable")}
    assert rc == 0 and set(recap) == hosts and not bad, (
        f"{playbook}: exit {rc}, recap {recap}\n" + "\n".join(changed_tasks(output)) + "\n" + tail(output)
    )


@pytest.mark.skipif(PARTITION is None, reason="the model has no partition with nodes")
def test_queued_jobs_survive_slurmctld_restart():
    held = [D.sbatch(f"--hold -p {PARTITION} -N1 --chdir=/tmp -o /dev/null --wrap true") for _ in range(2)]
    try:
        restart = D.host(D.controller).run("systemctl restart slurmctld")
        assert restart.rc == 0, f"restart slurmctld: {restart.stderr}\n{D.journal(D.controller, 'slurmctld')}"
        assert retry(controller_up, 60, 2), (
            f"slurmctld is not UP after a restart\n{D.journal(D.controller, 'slurmctld')}"
        )

        def states() -> dict[str, str]:
            queue = D.user_ok(f"squeue -h -j {','.join(held)} -o '%i %T %r'").strip()
            return dict(line.split(" ", 1) for line in queue.splitlines())

        # Until slurmctld has the associations from slurmdbd again, a recovered job's reason may
        # read InvalidAccount (seen on a loaded machine); a job that lost its hold would run
        # ('true') and leave the queue, so waiting for the reasons to settle hides no loss.
        expected = {j: "PENDING JobHeldUser" for j in held}
        assert retry(lambda: states() == expected, 60, 2), f"held jobs after the restart: {states()}"
    finally:
        D.as_user(D.login, f"scancel {' '.join(held)}", 30)


@pytest.mark.skipif(PARTITION is None, reason="the model has no partition with nodes")
def test_accounting_survives_site_rerun():
    job = D.sbatch(f"--wait -p {PARTITION} -N1 --chdir=/tmp -o /dev/null --wrap true")

    def with_job() -> set[str]:
        ids = accounted_job_ids()
        return ids if job in ids else set()

    before = retry(with_job, 30, 2)
    assert job in before, f"job {job} never reached the accounting database"
    for playbook in ACCOUNTING_TIERS:
        proc = run_site(D.inventory, playbook=playbook)
        hosts = set(parse_recap(proc.stdout))
        assert hosts and hosts <= set(D.hostvars), f"{playbook}: no host converged\n{tail(proc.stdout)}"
        assert_converged(proc.stdout, proc.returncode, hosts, playbook)
    assert retry(controller_up, 60, 2), f"slurmctld is not UP after {' and '.join(ACCOUNTING_TIERS)}"
    after = accounted_job_ids()
    assert after == before, (
        f"accounting changed across {' and '.join(ACCOUNTING_TIERS)}: lost {sorted(before - after)}, "
        f"new {sorted(after - before)}"
    )


def _podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=False)


def _booted(container: str) -> bool:
    state = _podman("exec", container, "systemctl", "is-system-running").stdout.strip()
    return state in ("running", "degraded")


def _converge_and_kill(victim: str, container: str, on_stop=None) -> tuple[str, int, bool]:
    """Run the victim's tier; stop its container right after its first task result that
    follows a task matching FAULT_AT, so it dies part-way through that role; then on_stop()."""
    cmd, env = site_cmd(D.inventory, playbook=COMPUTE_TIER)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killer = threading.Timer(1200, proc.kill)  # a hung converge must not hang the suite
    killer.start()
    result = re.compile(rf"^(ok|changed|skipping): \[{re.escape(victim)}\]")
    lines, armed, stopped = [], False, False
    try:
        for line in proc.stdout:
            lines.append(line)
            armed = armed or bool(FAULT_AT.search(line))
            if armed and not stopped and result.match(line):
                stopped = _podman("stop", "-t", "5", container).returncode == 0
                if stopped and on_stop is not None:
                    on_stop()
        return "".join(lines), proc.wait(), stopped
    finally:
        killer.cancel()


@pytest.mark.skipif(VICTIM is None or not D.container(VICTIM), reason="needs a compute node that is a podman container")
def test_node_dying_mid_converge_spares_the_others():
    container = D.container(VICTIM)
    # With monitoring, the victim's heartbeat (the system input) stops with it: the status
    # panel's Nodes-down query must say 1 within two intervals of the stop, and 0 again after
    # the recovery.
    heartbeat = "[[inputs.system]]" in (D.telegraf_conf(VICTIM) or "")
    watch = DownWatch() if MONITORING and heartbeat else None
    if watch is not None:
        assert retry(lambda: nodes_down() == 0, 2 * INTERVAL + 15, 5), f"nodes down before the fault: {nodes_down()}"
    try:
        output, rc, stopped = _converge_and_kill(VICTIM, container, watch.start if watch else None)
        assert stopped, (
            f"the converge never reached {FAULT_AT.pattern!r}, so {VICTIM} was never stopped\n{tail(output)}"
        )
        recap = parse_recap(output)
        others = {h: r for h, r in recap.items() if h != VICTIM and (r.get("failed") or r.get("unreachable"))}
        assert rc != 0 and not others and set(recap) == set(D.hosts_in("slurm_nodes")), (
            f"exit {rc}; the tier's other nodes must converge (failed=0, unreachable=0): {recap}\n{tail(output)}"
        )
        assert recap[VICTIM].get("unreachable") or recap[VICTIM].get("failed"), (
            f"{VICTIM} in the recap: {recap[VICTIM]}"
        )
        named = [ln for ln in output.splitlines() if ln.startswith("fatal: [") and f"[{VICTIM}]" in ln]
        assert named, f"no 'fatal: [{VICTIM}]' line names the dead host\n{tail(output)}"
        if watch is not None:
            watch.join()
            assert watch.seen_after is not None, (
                f"the status panel's Nodes-down query did not show {VICTIM} down within two intervals "
                f"({watch.deadline:.0f} s); it last said {watch.last!r}"
            )
    finally:
        _podman("start", container)
        retry(lambda: _booted(container), 90)
    # As an admin heals one node: the tier it died in, limited to it (the others converged above).
    proc = run_site(D.inventory, "--limit", VICTIM, playbook=COMPUTE_TIER)
    assert_converged(proc.stdout, proc.returncode, {VICTIM}, COMPUTE_TIER)
    # slurmctld saw the node vanish: an admin returns it to service once it is healthy again
    # (ReturnToService=2 usually does it alone when slurmd re-registers).
    node_idle = lambda: D.host(D.login).run("sinfo -h -n %s -o %%t", VICTIM).stdout.strip() == "idle"  # noqa: E731
    if not retry(node_idle, 30, 2):
        D.host(D.controller).run("scontrol update nodename=%s state=resume", VICTIM)
    assert retry(node_idle, 60, 2), D.host(D.login).run("scontrol show node %s", VICTIM).stdout
    ran = D.user_ok(f"srun -p {PARTITION} -w {VICTIM} -N1 --chdir=/tmp hostname -s").strip()
    assert ran == VICTIM, f"a job on {VICTIM} after its recovery printed {ran!r}"
    if watch is not None:
        assert retry(lambda: nodes_down() == 0, 2 * INTERVAL + 15, 5), f"nodes down after the recovery: {nodes_down()}"
