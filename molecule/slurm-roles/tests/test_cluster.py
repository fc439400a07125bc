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

MGMT, MGMT2, LOGIN, COMPUTE = "mol-roles-mgmt1", "mol-roles-mgmt2", "mol-roles-login", "mol-roles-c01"
NODES = [MGMT, MGMT2, LOGIN, COMPUTE]
TEST_USER, TEST_UID, TEST_ACCOUNT = "haltest", 3001, "hal"
RENDERED = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "rendered" / "files"

SERVICES = [
    (MGMT, "munge"),
    (MGMT, "mariadb"),
    (MGMT, "slurmdbd"),
    (MGMT, "slurmctld"),
    (MGMT2, "munge"),
    (MGMT2, "slurmctld"),
    (LOGIN, "munge"),
    (COMPUTE, "munge"),
    (COMPUTE, "slurmd"),
    (COMPUTE, "ssh"),
    (COMPUTE, "chrony"),  # privileged: CAP_SYS_TIME present (chronyd runs with -x here)
]


def _slurm_conf(key: str) -> str:
    """A key's value in the rendered slurm.conf."""
    return re.search(rf"^{key}=(\S+)", (RENDERED / "etc/slurm/slurm.conf").read_text(), re.M).group(1)


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


@pytest.mark.parametrize("name", [MGMT, MGMT2, LOGIN])
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
    assert re.fullmatch(r"StoragePass=[A-Za-z0-9]{32}\n", text[len(rendered) :])


def test_mariadb_has_slurm_innodb_settings():
    out = node(MGMT).check_output("mysql -N -B -e 'select @@innodb_lock_wait_timeout, @@innodb_log_file_size'")
    assert out.split() == ["900", str(64 * 1024 * 1024)]


@pytest.mark.parametrize("index", range(4))
def test_fake_gpu_is_a_character_device(index):
    # %t/%T: major and minor in hex; NVIDIA's major is 195 (0xc3).
    out = node(COMPUTE).check_output(f"stat -c '%F %t %T' /dev/nvidia{index}")
    assert out == f"character special file c3 {index:x}"


def test_both_controllers_answer_ping_in_order():
    out = node(LOGIN).check_output("scontrol ping")
    assert out.splitlines()[:2] == [f"Slurmctld(primary) at {MGMT} is UP", f"Slurmctld(backup) at {MGMT2} is UP"], out


def test_controllers_share_one_state_directory():
    """StateSaveLocation is the one directory both controllers see (the bound host directory
    standing in for the model's NFS export), made once and owned by slurm."""
    path = _slurm_conf("StateSaveLocation")
    marks = {name: node(name).check_output(f"stat -c '%U %a %i' {path} && ls {path}") for name in (MGMT, MGMT2)}
    assert marks[MGMT] == marks[MGMT2], marks
    assert marks[MGMT].startswith("slurm 755 "), marks
    assert "heartbeat" in marks[MGMT].split(), marks  # the primary's, which the backup reads


def test_compute_node_idle_with_its_gpus():
    out = poll(lambda: node(LOGIN).check_output("sinfo -N -h -o '%N %t %G'"), lambda s: " idle " in s)
    # (S:0-1): the GPUs are bound to both sockets' cores, as gres.conf's Cores= say.
    assert out.strip() == f"{COMPUTE} idle gpu:v100:4(S:0-1)"


def test_job_runs_as_test_user_with_requested_gpus():
    out = node(LOGIN).check_output(
        as_test_user("srun -N1 -n1 --gres=gpu:v100:2 -t 1 bash -c 'echo $(id -un) $(hostname) $CUDA_VISIBLE_DEVICES'")
    )
    assert out.split() == [TEST_USER, COMPUTE, "0,1"]


def test_batch_job_is_accounted_to_test_account():
    out = node(LOGIN).check_output(as_test_user("sbatch --parsable --wait -t 1 --wrap 'sleep 1'"))
    job = out.strip().split(";")[0]

    line = poll(
        lambda: node(LOGIN).check_output(as_test_user(f"sacct -n -X -P -j {job} -o State,Account,User,AllocTRES")),
        lambda r: "COMPLETED" in r,
        timeout=30,
    )
    state, account, user, tres = line.strip().split("|")
    assert (state, account, user) == ("COMPLETED", TEST_ACCOUNT, TEST_USER)
    assert "cpu=" in tres


def test_qos_of_the_model_are_in_accounting():
    """cluster.yml's QOS, as sacctmgr lists them; debug was added, normal (made by slurmdbd)
    was given the model's priority, wall time and the model's description (its name)."""
    out = node(LOGIN).check_output(
        "sacctmgr --noheader --parsable2 list qos format=Name,Priority,MaxWall,MaxTRESPU,MaxJobsPU,Description"
    )
    assert sorted(out.splitlines()) == [
        "debug|100|04:00:00|gres/gpu=1||short test jobs",  # sacctmgr lower-cases descriptions
        "normal|10|1-00:00:00|||normal",
    ]


def test_job_in_debug_qos_runs():
    out = node(LOGIN).check_output(as_test_user("srun -N1 -n1 -q debug -t 1 bash -c 'echo $SLURM_JOB_QOS'"))
    assert out.strip() == "debug"


@pytest.fixture
def test_user_ssh_key():
    """A key that lets the test user ssh from the compute node to itself."""
    host = node(COMPUTE)
    host.check_output(
        as_test_user(
            "test -f ~/.ssh/id_ed25519 || ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519;"
            " cp ~/.ssh/id_ed25519.pub ~/.ssh/authorized_keys"
        )
    )
    return host


SSH = (
    f"ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null {COMPUTE} cat /proc/self/cgroup"
)


def test_ssh_without_a_job_is_refused(test_user_ssh_key):
    result = test_user_ssh_key.run(as_test_user(SSH))
    assert result.rc == 255
    assert "pam_slurm_adopt" in result.stderr or "Access denied" in result.stderr, result.stderr


def test_ssh_with_a_job_is_adopted_into_it(test_user_ssh_key):
    job = node(LOGIN).check_output(as_test_user(f"sbatch --parsable -w {COMPUTE} -t 2 --wrap 'sleep 60'"))
    job = job.strip().split(";")[0]
    try:
        state = poll(
            lambda: node(LOGIN).check_output(f"squeue -h -j {job} -o %T"), lambda s: s == "RUNNING", timeout=30
        )
        assert state == "RUNNING"
        result = test_user_ssh_key.run(as_test_user(SSH))
        assert result.rc == 0, result.stderr
        assert f"job_{job}" in result.stdout
    finally:
        node(LOGIN).run(f"scancel {job}")


SERVED = ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf")  # what the compute node fetches


def test_configless_compute_node_keeps_no_slurm_files_and_runs_on_the_fetched_ones():
    """slurm.configless: slurmd on the compute node was started with --conf-server naming both
    controllers, primary first, and keeps no local copy; /run/slurm/conf holds what the
    controller sent, byte for byte the rendered files. The login node keeps its pushed copy."""
    compute = node(COMPUTE)
    for name in SERVED:
        assert not compute.file(f"/etc/slurm/{name}").exists, f"{COMPUTE} has /etc/slurm/{name}"
        assert compute.file(f"/run/slurm/conf/{name}").content_string == (RENDERED / "etc/slurm" / name).read_text(), (
            name
        )
    port = _slurm_conf("SlurmctldPort")
    assert f"--conf-server {MGMT}:{port},{MGMT2}:{port}" in compute.check_output("ps -o args= -C slurmd")
    assert node(LOGIN).file("/etc/slurm/slurm.conf").content_string == (RENDERED / "etc/slurm/slurm.conf").read_text()


def _show_config(name: str) -> dict[str, str]:
    """`scontrol show config` on a host: key -> value, without its first line (the time)."""
    lines = node(name).check_output("scontrol show config").splitlines()[1:]
    return dict((k.strip(), v.strip()) for k, sep, v in (line.partition("=") for line in lines) if sep)


def test_scontrol_show_config_on_the_configless_node_is_the_controllers():
    """scontrol runs there with no /etc/slurm/slurm.conf (it finds the controllers in slurmd's
    fetched copy) and shows the running configuration, every key as on the controller."""
    assert not node(COMPUTE).file("/etc/slurm/slurm.conf").exists
    here, there = _show_config(COMPUTE), _show_config(MGMT)
    differ = {k: (here.get(k), there.get(k)) for k in here.keys() | there.keys() if here.get(k) != there.get(k)}
    assert differ == {}, differ
    assert len(here) > 100 and here["SlurmctldParameters"] == "enable_configless", here


def _partition_max_time(name: str) -> str:
    out = node(name).check_output("scontrol show partition gpu")
    return re.search(r"MaxTime=(\S+)", out).group(1)


def test_a_limit_changed_on_the_controllers_reaches_the_configless_node_through_reconfigure():
    """What a converge does for a reconfigure-only change (the role copies slurm.conf to the
    controllers and runs `scontrol reconfigure`): the compute node gets the new limit with no
    file copied there. The file is put back the same way."""
    conf = "/etc/slurm/slurm.conf"
    original = node(MGMT).file(conf).content_string
    assert "PartitionName=gpu " in original and " MaxTime=1-00:00:00 " in original
    changed = original.replace(" MaxTime=1-00:00:00 ", " MaxTime=12:00:00 ")
    try:
        for name in (MGMT, MGMT2):
            node(name).check_output(
                f"sed -i 's/^\\(PartitionName=gpu .*\\) MaxTime=1-00:00:00 /\\1 MaxTime=12:00:00 /' {conf}"
            )
            assert node(name).file(conf).content_string == changed, name
        node(MGMT).check_output("scontrol reconfigure")
        fetched = poll(
            lambda: node(COMPUTE).file("/run/slurm/conf/slurm.conf").content_string,
            lambda text: text == changed,
            timeout=30,
        )
        assert fetched == changed, "the compute node's slurmd did not get the reconfigured slurm.conf"
        assert _partition_max_time(COMPUTE) == "12:00:00"
        assert not node(COMPUTE).file(conf).exists
    finally:
        for name in (MGMT, MGMT2):
            node(name).run(f"sed -i 's/^\\(PartitionName=gpu .*\\) MaxTime=12:00:00 /\\1 MaxTime=1-00:00:00 /' {conf}")
        node(MGMT).run("scontrol reconfigure")
    assert (
        poll(
            lambda: node(COMPUTE).file("/run/slurm/conf/slurm.conf").content_string,
            lambda text: text == original,
            timeout=30,
        )
        == original
    )
    assert _partition_max_time(COMPUTE) == "1-00:00:00"


def _log_count(name: str, text: str) -> int:
    """How many lines of slurmctld's log on `name` contain `text`."""
    log = shlex.quote(_slurm_conf("SlurmctldLogFile"))
    return int(node(name).check_output(f"grep -cF {shlex.quote(text)} {log} || true") or 0)


# The backup's log line when it takes control, and the one it writes each time it stands by
# (at its start, and when it hands control back to the primary): Slurm's src/slurmctld/backup.c.
TAKING_OVER = "not responding, BackupController1 mol-roles-mgmt2 taking over"
STANDING_BY = "slurmctld running in background mode"


def say(line: str) -> None:
    """The failover's figures: printed, and shown for passed tests too (-rP, molecule.yml)."""
    print(line, flush=True)


def test_backup_controller_takes_over_a_running_job_and_hands_control_back():
    """The primary slurmctld stops with a job running: the backup takes over from the shared
    state within SlurmctldTimeout of the primary's last sign of life (it asks every third of
    the timeout, so at most a third later than that, counted from the stop), the running job
    completes under it, a new job is accepted and runs; the primary starts again and takes
    control back (the backup stands by again), and jobs run under it. Runs last: it leaves the
    cluster as it found it."""
    timeout = int(_slurm_conf("SlurmctldTimeout"))
    login, mgmt, backup = node(LOGIN), node(MGMT), node(MGMT2)
    flag = f"/home/{TEST_USER}/failover-go"  # /home is shared by the login and compute nodes
    login.check_output(as_test_user(f"rm -f {flag}"))
    job = (
        login.check_output(as_test_user(f"sbatch --parsable -t 5 --wrap 'while [ ! -e {flag} ]; do sleep 1; done'"))
        .strip()
        .split(";")[0]
    )
    standbys = _log_count(MGMT2, STANDING_BY)
    try:
        assert (
            poll(lambda: login.check_output(f"squeue -h -j {job} -o %T"), lambda s: s == "RUNNING", timeout=30)
            == "RUNNING"
        )
        assert _log_count(MGMT2, TAKING_OVER) == 0, "the backup took over before the primary stopped"

        stopped = time.monotonic()
        mgmt.check_output("systemctl stop slurmctld")
        took_over = poll(lambda: _log_count(MGMT2, TAKING_OVER), lambda n: n > 0, timeout=timeout * 2)
        takeover_s = time.monotonic() - stopped
        say(
            f"failover: the backup took control {takeover_s:.1f} s after the primary stopped "
            f"(SlurmctldTimeout {timeout} s)"
        )
        assert took_over, f"no takeover {timeout * 2} s after the primary stopped:\n" + backup.check_output(
            f"tail -n 30 {_slurm_conf('SlurmctldLogFile')}"
        )
        assert takeover_s <= timeout + timeout / 3 + 3, f"takeover after {takeover_s:.1f} s"
        # It answers once it has read the shared state (the log line comes first).
        backup_up = [f"Slurmctld(primary) at {MGMT} is DOWN", f"Slurmctld(backup) at {MGMT2} is UP"]
        ping = poll(lambda: login.run("scontrol ping").stdout.splitlines(), lambda p: p[:2] == backup_up, timeout=30)
        assert ping[:2] == backup_up, ping

        # The running job, recovered from the shared state, completes under the backup.
        assert login.check_output(f"squeue -h -j {job} -o %T") == "RUNNING"
        node(COMPUTE).check_output(as_test_user(f"touch {flag}"))
        assert poll(lambda: login.check_output(f"squeue -h -j {job} -o %T"), lambda s: s == "", timeout=60) == "", (
            f"job {job} did not end under the backup"
        )
        assert (
            poll(
                lambda: login.check_output(f"sacct -n -X -P -j {job} -o State"), lambda s: s == "COMPLETED", timeout=30
            )
            == "COMPLETED"
        )
        # A new job is accepted and runs.
        out = login.check_output(as_test_user("srun -N1 -n1 -t 1 bash -c 'echo $SLURM_JOB_ID $(hostname)'"))
        assert out.split()[1:] == [COMPUTE], out

        say(
            f"failover: the job completed and a new one ran under the backup "
            f"{time.monotonic() - stopped:.1f} s after the primary stopped"
        )
        started = time.monotonic()
        mgmt.check_output("systemctl start slurmctld")
        say(f"failover: systemctl start slurmctld on the primary returned after {time.monotonic() - started:.1f} s")
        assert poll(lambda: _log_count(MGMT2, STANDING_BY), lambda n: n > standbys, timeout=60) > standbys, (
            "the backup did not stand by again when the primary came back:\n"
            + backup.check_output(f"tail -n 30 {_slurm_conf('SlurmctldLogFile')}")
        )
        ping = poll(
            lambda: login.run("scontrol ping").stdout.splitlines(),
            lambda p: p[:2] == [f"Slurmctld(primary) at {MGMT} is UP", f"Slurmctld(backup) at {MGMT2} is UP"],
            timeout=30,
        )
        assert ping[:2] == [f"Slurmctld(primary) at {MGMT} is UP", f"Slurmctld(backup) at {MGMT2} is UP"], ping
        out = login.check_output(as_test_user("srun -N1 -n1 -t 1 hostname"))
        assert out.strip() == COMPUTE
        say(
            f"failover: the primary took control back and ran a job {time.monotonic() - started:.1f} s "
            "after it was started"
        )
    finally:
        mgmt.run("systemctl start slurmctld")
        node(COMPUTE).run(as_test_user(f"touch {flag}"))
        login.run(f"scancel {job}")
