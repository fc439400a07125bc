"""Behaviour of the converged slurm-roles cluster: one test per concern.

Node names are those of molecule/slurm-roles/cluster.yml (they double as container names).
"""

from __future__ import annotations

import os
import re
import shlex
import time
from pathlib import Path

import pytest
import testinfra

MGMT, LOGIN, COMPUTE = "mol-roles-mgmt1", "mol-roles-login", "mol-roles-c01"
NODES = [MGMT, LOGIN, COMPUTE]
TEST_USER, TEST_UID, TEST_ACCOUNT = "haltest", 3001, "hal"
RENDERED = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "rendered" / "files"

SERVICES = [
    (MGMT, "munge"), (MGMT, "mariadb"), (MGMT, "slurmdbd"), (MGMT, "slurmctld"),
    (LOGIN, "munge"),
    (COMPUTE, "munge"), (COMPUTE, "slurmd"), (COMPUTE, "ssh"),
    (COMPUTE, "chrony"),   # privileged: CAP_SYS_TIME present (chronyd runs with -x here)
]


def node(name: str):
    return testinfra.get_host(f"podman://{name}")


def as_test_user(cmd: str) -> str:
    return f"runuser -l {TEST_USER} -c {shlex.quote(cmd)}"


def poll(fn, done, timeout: float = 60, interval: float = 1):
    """Call fn() until done(value) or timeout; return the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(interval)


@pytest.mark.parametrize(("name", "service"), SERVICES)
def test_service_running(name, service):
    host = node(name)
    unit = host.service(service)
    if not unit.is_running:
        print(host.run(f"journalctl -u {service} -n 60 --no-pager").stdout)
    assert unit.is_running
    assert unit.is_enabled


@pytest.mark.parametrize("name", [MGMT, LOGIN])
def test_chrony_enabled_but_skipped_without_cap_sys_time(name):
    host = node(name)
    assert host.service("chrony").is_enabled
    assert not host.service("chrony").is_running
    assert host.run("systemctl is-failed chrony").stdout.strip() != "failed"


@pytest.mark.parametrize("name", NODES)
def test_admin_group_may_sudo(name):
    assert "(ALL : ALL) NOPASSWD: ALL" in node(name).check_output("sudo -l -U haladmin")


@pytest.mark.parametrize("name", NODES)
def test_hosts_file_is_the_rendered_one(name):
    assert node(name).file("/etc/hosts").content_string == (RENDERED / "etc/hosts").read_text()


@pytest.mark.parametrize("name", NODES)
def test_test_user_has_fixed_ids(name):
    user = node(name).user(TEST_USER)
    assert (user.uid, user.gid) == (TEST_UID, TEST_UID)


@pytest.mark.parametrize("name", NODES)
def test_slurm_user_has_debian_ids(name):
    user = node(name).user("slurm")
    assert (user.uid, user.gid) == (64030, 64030)


def test_munge_key_is_one_protected_key():
    digests = set()
    for name in NODES:
        key = node(name).file("/etc/munge/munge.key")
        assert (key.user, key.group, key.mode) == ("munge", "munge", 0o400)
        digests.add(node(name).check_output("sha256sum /etc/munge/munge.key").split()[0])
    assert len(digests) == 1


@pytest.mark.parametrize("decoder", NODES)
def test_munge_credential_from_login_decodes(decoder):
    credential = node(LOGIN).check_output("munge -n")
    result = node(decoder).run(f"echo {credential} | unmunge")
    assert result.rc == 0, result.stderr
    assert "STATUS:          Success (0)" in result.stdout


def test_slurmdbd_conf_is_rendered_text_plus_secret():
    conf = node(MGMT).file("/etc/slurm/slurmdbd.conf")
    assert (conf.user, conf.mode) == ("slurm", 0o600)
    rendered = (RENDERED / "etc/slurm/slurmdbd.conf").read_text()
    assert "StoragePass" not in rendered.replace("# StoragePass", "")
    text = conf.content_string
    assert text.startswith(rendered)
    assert re.fullmatch(r"StoragePass=[A-Za-z0-9]{32}\n", text[len(rendered):])


def test_mariadb_has_slurm_innodb_settings():
    out = node(MGMT).check_output(
        "mysql -N -B -e 'select @@innodb_lock_wait_timeout, @@innodb_log_file_size'")
    assert out.split() == ["900", str(64 * 1024 * 1024)]


@pytest.mark.parametrize("index", range(4))
def test_fake_gpu_is_a_character_device(index):
    # %t/%T: major and minor in hex; NVIDIA's major is 195 (0xc3).
    out = node(COMPUTE).check_output(f"stat -c '%F %t %T' /dev/nvidia{index}")
    assert out == f"character special file c3 {index:x}"


def test_controller_answers_ping():
    out = node(LOGIN).check_output("scontrol ping")
    assert re.search(r"Slurmctld\(primary\) at mol-roles-mgmt1 is UP", out), out


def test_compute_node_idle_with_its_gpus():
    out = poll(lambda: node(LOGIN).check_output("sinfo -N -h -o '%N %t %G'"), lambda s: " idle " in s)
    # (S:0-1): the GPUs are bound to both sockets' cores, as gres.conf's Cores= say.
    assert out.strip() == f"{COMPUTE} idle gpu:v100:4(S:0-1)"


def test_job_runs_as_test_user_with_requested_gpus():
    out = node(LOGIN).check_output(as_test_user(
        "srun -N1 -n1 --gres=gpu:v100:2 -t 1 bash -c 'echo $(id -un) $(hostname) $CUDA_VISIBLE_DEVICES'"))
    assert out.split() == [TEST_USER, COMPUTE, "0,1"]


def test_batch_job_is_accounted_to_test_account():
    out = node(LOGIN).check_output(as_test_user("sbatch --parsable --wait -t 1 --wrap 'sleep 1'"))
    job = out.strip().split(";")[0]

    line = poll(lambda: node(LOGIN).check_output(
        as_test_user(f"sacct -n -X -P -j {job} -o State,Account,User,AllocTRES")),
        lambda r: "COMPLETED" in r, timeout=30)
    state, account, user, tres = line.strip().split("|")
    assert (state, account, user) == ("COMPLETED", TEST_ACCOUNT, TEST_USER)
    assert "cpu=" in tres


def test_qos_of_the_model_are_in_accounting():
    """cluster.yml's QOS, as sacctmgr lists them; debug was added, normal (made by slurmdbd)
    was given the model's priority, wall time and the model's description (its name)."""
    out = node(LOGIN).check_output(
        "sacctmgr --noheader --parsable2 list qos format=Name,Priority,MaxWall,MaxTRESPU,MaxJobsPU,Description")
    assert sorted(out.splitlines()) == [
        "debug|100|04:00:00|gres/gpu=1||short test jobs",   # sacctmgr lower-cases descriptions
        "normal|10|1-00:00:00|||normal",
    ]


def test_job_in_debug_qos_runs():
    out = node(LOGIN).check_output(as_test_user("srun -N1 -n1 -q debug -t 1 bash -c 'echo $SLURM_JOB_QOS'"))
    assert out.strip() == "debug"


@pytest.fixture
def test_user_ssh_key():
    """A key that lets the test user ssh from the compute node to itself."""
    host = node(COMPUTE)
    host.check_output(as_test_user(
        "test -f ~/.ssh/id_ed25519 || ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519;"
        " cp ~/.ssh/id_ed25519.pub ~/.ssh/authorized_keys"))
    return host


SSH = ("ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
       f"{COMPUTE} cat /proc/self/cgroup")


def test_ssh_without_a_job_is_refused(test_user_ssh_key):
    result = test_user_ssh_key.run(as_test_user(SSH))
    assert result.rc == 255
    assert "pam_slurm_adopt" in result.stderr or "Access denied" in result.stderr, result.stderr


def test_ssh_with_a_job_is_adopted_into_it(test_user_ssh_key):
    job = node(LOGIN).check_output(as_test_user(f"sbatch --parsable -w {COMPUTE} -t 2 --wrap 'sleep 60'"))
    job = job.strip().split(";")[0]
    try:
        state = poll(lambda: node(LOGIN).check_output(f"squeue -h -j {job} -o %T"),
                     lambda s: s == "RUNNING", timeout=30)
        assert state == "RUNNING"
        result = test_user_ssh_key.run(as_test_user(SSH))
        assert result.rc == 0, result.stderr
        assert f"job_{job}" in result.stdout
    finally:
        node(LOGIN).run(f"scancel {job}")
