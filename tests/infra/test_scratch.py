"""Node-local scratch as jobs see it: mounted from its device, each job's /tmp private to the
job (another user's job on the same node at the same time cannot see it), on the scratch's job
base, and gone when the job ends; the health check drains a node whose scratch is unmounted.

In the sandbox the "NVMe" is a host loop device over a sparse file, bound into each compute
container at derive.SCRATCH_STANDIN (outside /dev, where systemd would wait for a udev that
containers lack); the role made its file system and mounts it with the rendered unit, as on a
real node. Slurm's job_container/tmpfs (namespace/linux from 25.11) makes each job's /tmp.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from deployed import TEST_USER, deployed, retry
from hal_provision.hostlist import nodeset

D = deployed()
FACTS = json.loads(D.rendered("etc/hal-provision/scratch.json") or "null")
pytestmark = pytest.mark.skipif(FACTS is None, reason="no hardware profile of the model has a local scratch")
NODES = [h for h in D.hosts_in("slurm_nodes") if FACTS and D.hostvars[h]["hal_node_group"] in FACTS["groups"]]
ACCOUNTING = json.loads(D.rendered("etc/hal-provision/slurm-accounting.json") or "{}")
JOB_TIMEOUT = 120


def scratch(host: str) -> dict:
    return FACTS["profiles"][FACTS["groups"][D.hostvars[host]["hal_node_group"]]]


def job_base(host: str) -> str | None:
    """The node's job /tmp base, from the rendered job_container.conf (BasePath=) or namespace.yaml."""
    conf = D.rendered("etc/slurm/job_container.conf")
    if conf is not None:
        for line in conf.splitlines():
            m = re.match(r"NodeName=(\S+) .*BasePath=(\S+)", line)
            if m and host in nodeset(m.group(1)):
                return m.group(2)
    doc = D.rendered("etc/slurm/namespace.yaml")
    if doc is not None:
        import yaml

        for conf in yaml.safe_load(doc).get("node_confs", []):
            if any(host in nodeset(n) for n in conf["nodes"]):
                return conf["options"]["base_path"]
    return None


BASE_NODES = [h for h in NODES if job_base(h)]


def other_user() -> str | None:
    """An active directory user with a Slurm account, not the test user: the second user."""
    for user in ACCOUNTING.get("users", []):
        if user["name"] != TEST_USER and user.get("default_account"):
            return user["name"]
    return None


def as_user(user: str, script: str, timeout: int = JOB_TIMEOUT):
    return D.host(D.login).run("timeout %s su - %s -c %s", str(timeout), user, f"cd /tmp && {script}")


def job_state(job: str) -> str:
    return D.host(D.controller).run("squeue -h -j %s -o %%T", job).stdout.strip()


@pytest.mark.parametrize("node", NODES)
def test_scratch_is_mounted_from_its_device_by_its_unit(node):
    want = scratch(node)
    out = D.host(node).run("findmnt -n -o SOURCE,FSTYPE --mountpoint %s", want["mount_point"])
    assert out.rc == 0, f"{node}: nothing mounted at {want['mount_point']}"
    source, fstype = out.stdout.split()
    assert (source, fstype) == (want["source"], want["filesystem"]), f"{node}: {out.stdout}"
    assert D.host(node).run("systemctl is-enabled %s", want["unit"]).stdout.strip() == "enabled"
    assert D.host(node).run("systemctl is-active %s", want["unit"]).stdout.strip() == "active"


@pytest.mark.parametrize("node", BASE_NODES)
def test_a_jobs_tmp_is_private_on_the_scratch_and_gone_after_it(node):
    second = other_user()
    if second is None:
        pytest.skip("the model has no second active user with a Slurm account")
    base = job_base(node)
    tag = f"hal-scratch-probe-{int(time.time())}"
    # The test user's job writes a file into its /tmp and stays.
    out = as_user(
        TEST_USER,
        f"sbatch --parsable -w {node} -N1 -n1 --mem=64M -t 5 -o /dev/null --wrap 'echo mine > /tmp/{tag}; sleep 120'",
    )
    assert out.rc == 0, out.stdout + out.stderr
    job = out.stdout.strip().split(";")[0]
    try:
        found = retry(lambda: D.host(node).run("find %s -name %s", base, tag).stdout.split(), JOB_TIMEOUT, 2)
        assert found, f"{node}: job {job}'s /tmp/{tag} is not under {base} ({job_state(job)})"
        print(f"{node}: job {job} of {TEST_USER} wrote {found[0]}")
        # The job's own directory under the base (Debian's 22.05 adds the node's name: <base>/<node>/<job>/.<job>).
        assert found[0].startswith(base.rstrip("/") + "/") and f"/{job}/" in found[0][len(base) :], found
        assert D.host(node).run("test -e /tmp/%s", tag).rc != 0, f"{node}: the node's own /tmp has {tag}"

        # Another user's job on the same node, at the same time: its /tmp is its own.
        assert job_state(job) == "RUNNING"
        seen = as_user(
            second,
            f"srun -w {node} -N1 -n1 --mem=64M -t 2 bash -c "
            f"'ls -A /tmp; test ! -e /tmp/{tag} && echo private; findmnt -n -o SOURCE --target /tmp'",
        )
        assert seen.rc == 0, seen.stdout + seen.stderr
        assert "private" in seen.stdout and tag not in seen.stdout, f"{second} on {node}:\n{seen.stdout}"
        assert job_state(job) == "RUNNING", f"job {job} ended before {second}'s job looked"
        print(f"{second}'s job on {node} saw /tmp as:\n{seen.stdout}")
    finally:
        as_user(TEST_USER, f"scancel {job}", 30)
    # Gone with the job: the file and the job's directory under the base.
    job_dir = found[0][: found[0].index(f"/{job}/", len(base)) + len(job) + 1]
    gone = retry(
        lambda: (
            D.host(node).run("find %s -name %s", base, tag).stdout.strip() == ""
            and D.host(node).run("test -e %s", job_dir).rc != 0
        ),
        JOB_TIMEOUT,
        2,
    )
    assert gone, (
        f"{node}: {job_dir} or {tag} still there after job {job} ended: " + D.host(node).run("ls -laR %s", base).stdout
    )


# ---- the health check expects the scratch (destructive: marked faults) ----------------------------

HEALTH = json.loads(D.rendered("etc/hal-provision/health.json") or "null")


def node_state(node: str) -> tuple[str, str]:
    out = D.host(D.controller).check_output("sinfo -h -N -n %s -o '%%T|%%E'", node)
    st, _, reason = out.splitlines()[0].partition("|")
    return st.strip().rstrip("*~#!%$@^-+"), "" if reason.strip() == "none" else reason.strip()


def drained(node: str) -> bool:
    return node_state(node)[0] in ("drained", "draining")


def expectation(node: str) -> dict:
    return json.loads(D.health_expectation(node) or "{}")


def expects_scratch(node: str) -> bool:
    return scratch(node)["mount_point"] in expectation(node).get("checks", {}).get("mounts", {}).get("mount_points", [])


CHECKED = [h for h in NODES if HEALTH and HEALTH["program"] == "hal" and expects_scratch(h)]


@pytest.mark.faults
@pytest.mark.skipif(
    not CHECKED or not D.container(CHECKED[-1]),
    reason="unmounting a node's scratch needs the sandbox and a health check that expects it",
)
def test_a_node_whose_scratch_is_not_mounted_is_drained_and_resumed_once_it_is():
    node = CHECKED[-1]
    want = scratch(node)
    wait = 2 * HEALTH["interval_s"] + 20  # one interval, a run that began just before, and slack
    assert retry(lambda: not drained(node), wait, 2), f"{node} is drained before the test: {node_state(node)}"
    took = time.monotonic()
    # Lazily: slurmd and the jobs' directories hold mounts under it.
    assert D.host(node).run("umount -l %s", want["mount_point"]).rc == 0
    try:
        assert retry(lambda: drained(node), wait, 2), f"{node} not drained {wait} s after its scratch went away"
        st, reason = node_state(node)
        assert reason.startswith(f"{expectation(node)['reason_prefix']}: mounts:") and want["mount_point"] in reason, (
            reason
        )
        print(f"{node}: drained {time.monotonic() - took:.0f} s after {want['mount_point']} was unmounted: {reason}")
    finally:
        started = D.host(node).run("systemctl start %s", want["unit"])
    assert started.rc == 0, started.stderr
    back = time.monotonic()
    assert retry(lambda: not drained(node), wait, 2), f"{node} still drained {wait} s after its scratch came back"
    print(f"{node}: resumed {time.monotonic() - back:.0f} s after {want['unit']} mounted it again")
    out = as_user(TEST_USER, f"srun -w {node} -N1 -n1 --mem=64M -t 2 findmnt -n -o SOURCE --target /tmp")
    assert out.rc == 0 and want["source"] in out.stdout, out.stdout + out.stderr  # jobs get their /tmp again
