"""The backup drill (issue 31), on the sandbox: jobs in the accounting database, a directory
user with a password and monitoring points are there; every host with state takes its snapshots
(hal-backup.service, as its timer would start it) and they verify; then the management node's
accounting database, directory database and InfluxDB database are destroyed, and
playbooks/restore.yml brings them back: sacct shows the earlier jobs, the user binds with the
same password, a dashboard panel's query returns the same points as before, and a second
restore changes nothing. Destructive: marked `faults`, it runs after every read-only test.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time

import pytest

from deployed import deployed, parse_recap, retry, run_playbook, tail

D = deployed()
CONFIG = json.loads(D.rendered("etc/hal-provision/backup.json") or "null")
DIRECTORY = json.loads(D.rendered("etc/hal-provision/ldap-directory.json") or "null")
PLAN = json.loads(D.rendered("etc/hal-provision/slurm-accounting.json") or "{}")
KINDS = {job["kind"]: job for job in (CONFIG or {}).get("jobs", [])}

pytestmark = [pytest.mark.faults,
              pytest.mark.skipif(CONFIG is None or not {"mariadb", "slapd"} <= KINDS.keys(),
                                 reason="the model backs up no accounting database and directory")]


def root(host: str, command: str, timeout: int = 120):
    out = D.host(host).run("timeout %s bash -c %s", str(timeout), command)
    assert out.rc == 0, f"{host}: {command}\nexit {out.rc}\n{out.stdout}{out.stderr}"
    return out.stdout


def job_ids() -> set[str]:
    """Every job the accounting database holds, as the controller's sacct reads it."""
    out = root(D.controller, "sacct -a -X -n -P -S 2000-01-01T00:00:00 -E now -o JobID")
    return {line.strip() for line in out.splitlines() if line.strip()}


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
    out = D.host(host).run("timeout 60 bash -c %s", f"printf %s {shlex.quote(ldif)} | ldapmodify -Q -Y EXTERNAL -H ldapi:///")
    assert out.rc == 0 or (password is None and "No such attribute" in out.stderr), out.stderr


def panel_points(until: int) -> list:
    """A dashboard panel's query, as Grafana sends it, over the hour before `until` (epoch s)."""
    from monitoring_queries import panels, query, values

    q = next(q for _b, _t, _r, q in panels() if "$timeFilter" in q)
    return values(query(q.replace("$timeFilter", f"time > {until - 3600}s AND time <= {until}s")
                        .replace("$__interval", "60s")))


def restore(*extra: str) -> str:
    return run_playbook(D.inventory, "restore.yml", "-e", "snapshot=latest", *extra, timeout=900)


def test_a_destroyed_management_node_state_comes_back_from_the_backup():
    hosts = sorted({job["host"] for job in CONFIG["jobs"]})
    user = next((u["name"] for u in PLAN.get("users", [])), None)
    assert user, "the accounting plan has no user to give a password"
    password = secrets.token_urlsafe(18)
    set_password(user, password)
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
        assert not (before_jobs & job_ids()), "the accounting database still holds the jobs"

        # restore.yml brings everything back; a second run changes nothing.
        restore()
        assert before_jobs <= retry(lambda: (lambda ids: ids if before_jobs <= ids else None)(job_ids()), 120, 3), (
            f"sacct after the restore lacks jobs {sorted(before_jobs - job_ids())}")
        assert retry(lambda: binds(user, password), 60, 2), f"{user} cannot bind with the same password"
        if before_points is not None:
            assert panel_points(taken) == before_points, "the panel's points before the backup differ after it"
        again = restore()
        changed = {h: r["changed"] for h, r in parse_recap(again).items() if r["changed"]}
        assert not changed, f"a second restore changed {changed}\n{tail(again)}"
    finally:
        set_password(user, None)
