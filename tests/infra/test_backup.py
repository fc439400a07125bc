"""The backup drill, on the sandbox: jobs in the accounting database, a directory user with a
password and monitoring points are there; every host with state takes its snapshots
(hal-backup.service, as its timer would start it) and they verify; then the management node's
accounting database, directory database and InfluxDB database are destroyed, and
playbooks/restore.yml brings them back: sacct shows the earlier jobs, the user binds with the
same password, a dashboard panel's query returns the same points as before, and a second
restore changes nothing.

Then what the destination cannot be trusted with: a snapshot whose payload and manifest were
both rewritten there (checksums that match) is refused by `hal-backup verify` and by
restore.yml, which restores nothing; a snapshot dated in the future is reported, and neither
kept as the newest nor taken for the age; and no other host of the sandbox can read the
secret snapshots (the sandbox keeps no hal-mgmt2: every other host stands in for it).
Destructive: marked `faults`, these run after every read-only test.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import shlex
import time

import pytest

from deployed import deployed, parse_recap, retry, run_playbook, run_site, tail

D = deployed()
CONFIG = json.loads(D.rendered("etc/hal-provision/backup.json") or "null")
DIRECTORY = json.loads(D.rendered("etc/hal-provision/ldap-directory.json") or "null")
PLAN = json.loads(D.rendered("etc/hal-provision/slurm-accounting.json") or "{}")
KINDS = {job["kind"]: job for job in (CONFIG or {}).get("jobs", [])}

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(
        CONFIG is None or not {"mariadb", "slapd"} <= KINDS.keys(),
        reason="the model backs up no accounting database and directory",
    ),
]


def root(host: str, command: str, timeout: int = 120):
    out = D.host(host).run("timeout %s bash -c %s", str(timeout), command)
    assert out.rc == 0, f"{host}: {command}\nexit {out.rc}\n{out.stdout}{out.stderr}"
    return out.stdout


SACCT_ALL = "sacct -a -X -n -P -S 2000-01-01T00:00:00 -E now -o JobID"


def job_ids() -> set[str]:
    """Every job the accounting database holds, as the controller's sacct reads it."""
    out = root(D.controller, SACCT_ALL)
    return {line.strip() for line in out.splitlines() if line.strip()}


def job_ids_once_answered(timeout: int = 120) -> set[str]:
    """job_ids once sacct answers again: a restarted slurmdbd refuses connections until it has
    made its tables (seconds on a quiet machine, longer on a loaded one)."""

    def answered():
        out = D.host(D.controller).run("timeout 60 bash -c %s", SACCT_ALL)
        return (out.stdout,) if out.rc == 0 else None

    got = retry(answered, timeout, 3)
    assert got, f"sacct does not answer {timeout} s after slurmdbd's restart\n{D.journal(D.controller, 'slurmdbd')}"
    return {line.strip() for line in got[0].splitlines() if line.strip()}


def user_dn(name: str) -> str:
    return f"uid={name},{DIRECTORY['people_dn']}"


def binds(name: str, password: str) -> bool:
    """The user's simple bind with that password succeeds on the directory host."""
    host = KINDS["slapd"]["host"]
    out = D.host(host).run("ldapwhoami -x -H ldapi:/// -D %s -w %s", user_dn(name), password)
    return out.rc == 0 and name in out.stdout


def set_password(name: str, password: str | None) -> None:
    host = KINDS["slapd"]["host"]
    if password is None:
        ldif = f"dn: {user_dn(name)}\nchangetype: modify\ndelete: userPassword\n"
    else:
        hashed = root(host, f"slappasswd -s {shlex.quote(password)}").strip()
        ldif = f"dn: {user_dn(name)}\nchangetype: modify\nreplace: userPassword\nuserPassword: {hashed}\n"
    out = D.host(host).run(
        "timeout 60 bash -c %s", f"printf %s {shlex.quote(ldif)} | ldapmodify -Q -Y EXTERNAL -H ldapi:///"
    )
    assert out.rc == 0 or (password is None and "No such attribute" in out.stderr), out.stderr


def panel_points(until: int) -> list:
    """A dashboard panel's query, as Grafana sends it, over the hour before `until` (epoch s)."""
    from monitoring_queries import panels, query, values

    q = next(q for _b, _t, _r, q in panels() if "$timeFilter" in q)
    return values(
        query(q.replace("$timeFilter", f"time > {until - 3600}s AND time <= {until}s").replace("$__interval", "60s"))
    )


def restore(*extra: str) -> str:
    return run_playbook(D.inventory, "restore.yml", "-e", "snapshot=latest", *extra, timeout=900)


def test_a_destroyed_management_node_state_comes_back_from_the_backup():
    hosts = sorted({job["host"] for job in CONFIG["jobs"]})
    user = next((u["name"] for u in PLAN.get("users", [])), None)
    assert user, "the accounting plan has no user to give a password"
    password = secrets.token_urlsafe(18)
    set_password(user, password)
    restored = taken_backup = False
    try:
        # What there is before the backup.
        if not job_ids():
            D.sbatch("-N1 -t 1 --chdir=/tmp -o /dev/null --wrap true")
        before_jobs = retry(job_ids, 60, 2)
        assert before_jobs and binds(user, password)
        taken = int(time.time())
        before_points = panel_points(taken) if "influxdb" in KINDS else None
        assert before_points is None or before_points, "the panel has no points to back up"

        # The backup, as the timer starts it, on every host with state; each snapshot verifies.
        for host in hosts:
            root(host, "systemctl start hal-backup.service", timeout=600)
            root(host, "hal-backup verify")
        listed = root(hosts[0], "hal-backup list")
        assert all(job["name"] in listed for job in CONFIG["jobs"] if job["host"] == hosts[0]), listed
        taken_backup = True

        # The management node loses its databases.
        db = KINDS["mariadb"]
        root(db["host"], f"mariadb -e 'DROP DATABASE {db['databases'][0]}'")
        for host in D.hosts_in("service_slurmdbd"):
            root(host, "systemctl restart slurmdbd")
        ldap = KINDS["slapd"]["host"]
        root(ldap, "systemctl stop slapd && find /var/lib/ldap -mindepth 1 -delete && systemctl start slapd")
        if "influxdb" in KINDS:
            from monitoring_queries import query

            query(f'DROP DATABASE "{KINDS["influxdb"]["databases"][0]}"', "admin")
        assert not binds(user, password), "the directory still knows the user after its database was removed"
        assert not (before_jobs & job_ids_once_answered()), "the accounting database still holds the jobs"

        # restore.yml brings everything back; a second run changes nothing.
        restored = True
        restore()
        after_jobs = retry(lambda: (lambda ids: ids if before_jobs <= ids else None)(job_ids_once_answered()), 120, 3)
        assert after_jobs, f"sacct after the restore lacks jobs {sorted(before_jobs - job_ids_once_answered())}"
        assert retry(lambda: binds(user, password), 60, 2), f"{user} cannot bind with the same password"
        if before_points is not None:
            assert panel_points(taken) == before_points, "the panel's points before the backup differ after it"
        again = restore()
        changed = {h: r["changed"] for h, r in parse_recap(again).items() if r["changed"]}
        assert not changed, f"a second restore changed {changed}\n{tail(again)}"
    finally:
        if not restored and taken_backup:  # stopped after the state was destroyed: bring it back for
            try:  # the tests after this one, whatever failed here
                restore()
            except AssertionError:
                pass
        set_password(user, None)


# ---- what the destination cannot be trusted with ------------------------------------------------

STAMP = re.compile(r"^\d{8}T\d{6}Z$")
SECRET_JOBS = [job for job in (CONFIG or {}).get("jobs", []) if job.get("secret")]


def destination(host: str) -> str:
    return CONFIG["destinations"][host]["path"]


def python(host: str, script: str, timeout: int = 300) -> str:
    """Run a Python script as root on `host` (its own python3), passed whole, unquoted."""
    encoded = base64.b64encode(script.encode()).decode()
    return root(host, f"echo {encoded} | base64 -d | python3 -", timeout=timeout)


def newest(host: str, job: str) -> str:
    out = root(host, f"ls {shlex.quote(destination(host) + '/' + job)}")
    return sorted(name for name in out.split() if STAMP.match(name))[-1]


def test_a_snapshot_rewritten_on_the_destination_is_refused_and_nothing_restored():
    """What root on another client of the export, or on the file server, could do: the dump
    gets a client command and a statement of its own, and the manifest checksums that match.
    Checksums alone pass it; the host's verify (its key) and restore.yml refuse it; slurmdbd
    stays up, the statement and the command never ran, and the restore record is unchanged."""
    db = KINDS["mariadb"]
    host = db["host"]
    root(host, "hal-backup run --job accounting_db", timeout=600)
    stamp = newest(host, "accounting_db")
    snap = f"{destination(host)}/accounting_db/{stamp}"
    record = D.host(host).run("cat /var/lib/hal-backup/restored-accounting_db").stdout
    try:
        python(
            host,
            f"""
import hashlib, json, pathlib
snap = pathlib.Path({snap!r})
dump = snap / "accounting_db.sql"
data = dump.read_bytes() + b"\\n\\\\! touch /tmp/hal-backup-forged\\nCREATE DATABASE hal_backup_forged;\\n"
dump.write_bytes(data)
manifest = json.loads((snap / "MANIFEST.json").read_text())
manifest["files"] = [{{"name": "accounting_db.sql", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}]
(snap / "MANIFEST.json").write_text(json.dumps(manifest))
""",
        )
        assert "\\! touch /tmp/hal-backup-forged" in root(host, f"tail -n 3 {snap}/accounting_db.sql")
        checksums = D.host(host).run("hal-backup verify --dest %s accounting_db/%s", destination(host), stamp)
        assert checksums.rc == 0 and "checksums only" in checksums.stdout, checksums.stdout + checksums.stderr
        own = D.host(host).run("hal-backup verify accounting_db/%s", stamp)
        assert (
            own.rc == 1
            and (
                f"FAIL accounting_db/{stamp}: MANIFEST.json does not match its HMAC: changed after "
                "the snapshot was written"
            )
            in own.stdout
        ), own.stdout + own.stderr

        refused = run_site(
            D.inventory, "-e", f"snapshot={stamp}", "-e", "jobs=accounting_db", playbook="restore.yml", timeout=900
        )
        assert refused.returncode != 0, tail(refused.stdout)
        assert (
            f"accounting_db/{stamp} does not verify, nothing restored" in refused.stdout
            and "does not match its HMAC" in refused.stdout
        ), tail(refused.stdout)
        assert D.host(host).run("systemctl is-active slurmdbd").rc == 0, D.journal(host, "slurmdbd")
        assert "hal_backup_forged" not in root(host, "mariadb -N -e 'SHOW DATABASES'")
        assert not D.host(host).file("/tmp/hal-backup-forged").exists
        assert D.host(host).run("cat /var/lib/hal-backup/restored-accounting_db").stdout == record
        assert job_ids(), "sacct answers no more after the refused restore"
    finally:
        root(host, f"rm -rf {shlex.quote(snap)}")


FUTURE = "2100-01-01T00:00:00"


def test_a_future_dated_snapshot_is_reported_and_not_kept_as_the_newest():
    """A genuine snapshot (sealed with the host's key) made while the clock was set to 2100, by
    the installed hal-backup with only its clock changed. Then, with keep=1, a run keeps the
    snapshot it writes (before, the future one counted as the newest and the run pruned its
    own), reports the future one and leaves it; `age` counts from the run's snapshot (seconds,
    not a clamped 0) and says why it passed the other over; `list` marks it."""
    job = next(j for j in CONFIG["jobs"] if j["kind"] == "files")
    host, name = job["host"], job["name"]
    jobdir = f"{destination(host)}/{name}"
    future_stamp = FUTURE.replace("-", "").replace(":", "") + "Z"
    try:
        python(
            host,
            f"""
import datetime as dt, importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("hal_backup", "/usr/local/sbin/hal-backup")
spec = importlib.util.spec_from_loader("hal_backup", loader)
program = importlib.util.module_from_spec(spec)
sys.modules["hal_backup"] = program  # its dataclasses look their module up there
loader.exec_module(program)
real = program.run_job
program.run_job = lambda *a, **k: real(*a, now=lambda: dt.datetime.fromisoformat({FUTURE!r}).replace(
    tzinfo=dt.timezone.utc), **k)
sys.exit(program.main(["run", "--job", {name!r}]))
""",
        )
        assert future_stamp in root(host, f"ls {shlex.quote(jobdir)}")
        python(
            host,
            """
import json
doc = json.load(open("/etc/hal-provision/backup.json"))
json.dump(dict(doc, keep=1), open("/tmp/backup-keep1.json", "w"))
""",
        )
        ran = D.host(host).run("hal-backup run --config /tmp/backup-keep1.json --job %s", name)
        assert ran.rc == 0, ran.stdout + ran.stderr
        written = re.search(rf"{re.escape(jobdir)}/(\d{{8}}T\d{{6}}Z)", ran.stdout)[1]
        assert (
            f"warning: job {name}: {name}/{future_stamp}: dated in the future (made {FUTURE}Z" in ran.stderr
            and "not counted as the newest, not removed" in ran.stderr
        ), ran.stderr
        stamps = sorted(n for n in root(host, f"ls {shlex.quote(jobdir)}").split() if STAMP.match(n))
        assert stamps == [written, future_stamp], stamps
        age = D.host(host).run("hal-backup age")
        assert age.rc == 0 and f"{name}/{future_stamp}: dated in the future" in age.stderr, age.stderr
        seconds = int(re.search(rf"^{re.escape(name)} (\d+)$", age.stdout, re.M)[1])
        assert 0 <= seconds < 600, age.stdout
        listed = root(host, "hal-backup list")
        assert re.search(rf"^{re.escape(name)}\s+{future_stamp}\s.*-\d+d \d\dh\s+.*future", listed, re.M), listed
    finally:
        root(host, f"rm -rf {shlex.quote(jobdir + '/' + future_stamp)} /tmp/backup-keep1.json")


@pytest.mark.parametrize("job", [j["name"] for j in SECRET_JOBS])
def test_no_other_host_can_read_the_secret_snapshots(job):
    """A job's secret snapshots lie on an export only its host mounts (the model's check; HAL's
    hal-mgmt2 has its own): from every other host, root finds neither the export mounted nor the
    snapshots; on the host itself they are root's alone (0700)."""
    entry = next(j for j in SECRET_JOBS if j["name"] == job)
    host = entry["host"]
    mount_point, path = CONFIG["destinations"][host]["mount_point"], destination(host)
    assert newest(host, job)  # the drill above took one
    mounts = json.loads(D.rendered("nfs/nfs.json") or '{"mounts": []}')["mounts"]
    [mount] = [m for m in mounts if m["mount_point"] == mount_point]
    assert D.hosts_in(mount["group"]) == [host], f"{mount_point} is mounted by {D.hosts_in(mount['group'])}"
    others = [h for h in D.hostvars if h != host]
    assert others
    for other in others:
        found = D.host(other).run("findmnt --noheadings --mountpoint %s; ls -d %s", mount_point, f"{path}/{job}")
        assert found.rc != 0 and not found.stdout.strip(), f"{other}: {found.stdout}"
    mode = root(host, f"stat -c %a {shlex.quote(path + '/' + job)}").strip()
    assert mode == "700", mode
    denied = D.host(host).run("runuser -u nobody -- ls %s", f"{path}/{job}")
    assert denied.rc != 0 and "Permission denied" in denied.stderr, denied.stdout + denied.stderr
