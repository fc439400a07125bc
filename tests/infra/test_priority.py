"""Job priority as the model sets it, seen where it acts: Slurm's scheduler.

The model's fair-share (accounts.groups[].fairshare) and QOS priorities (slurm.qos[].priority)
only take effect under priority/multifactor with weights for them (slurm.priority). Here a
directory user whose account may use two QOS of different priority holds every GPU of one
node, then submits to that node a job in the lower QOS and, after it, one in the higher:
sprio shows non-zero fair-share and QOS factors for both, and when the node frees the later,
higher-priority job starts first. Under priority/basic (first in, first out) the earlier one
would.

What the model says comes from the rendered tree: slurm.conf (PriorityType, the weights) and
etc/hal-provision/slurm-accounting.json (accounts, their QOS, users). The jobs are submitted
as the user from root on the login node (`su -`), as an admin would try it on a real cluster.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest

from deployed import deployed, retry

D = deployed()
SLURM_CONF = D.rendered("etc/slurm/slurm.conf") or ""
PLAN = json.loads(D.rendered("etc/hal-provision/slurm-accounting.json") or "{}")


def _setting(name: str) -> str | None:
    m = re.search(rf"^{name}=(\S+)", SLURM_CONF, re.M)
    return m.group(1) if m else None


def _qos_priorities() -> dict[str, int]:
    out = {}
    for q in PLAN.get("qos", []):
        prio = next((a.split("=", 1)[1] for a in q["add"] if a.startswith("Priority=")), "0")
        out[q["name"]] = int(prio)
    return out


def _subject() -> tuple[str, str, str] | None:
    """(user, low QOS, high QOS): an active user whose default account may use two QOS of
    different priority, the account with a fair-share of its own."""
    prios = _qos_priorities()
    accounts = {a["name"]: a for a in PLAN.get("accounts", [])}
    for user in PLAN.get("users", []):
        account = accounts.get(user.get("default_account"))
        if account is None:
            continue
        _, _, share, qos, _ = account["association"].split("|")
        ranked = sorted((prios.get(q, 0), q) for q in qos.split(",") if q)
        if share and int(share) > 0 and len(ranked) >= 2 and ranked[0][0] < ranked[-1][0]:
            return user["name"], ranked[0][1], ranked[-1][1]
    return None


SUBJECT = _subject()
NODE = next((n for p in D.compute_partitions() for n in D.partitions()[p]), None)

pytestmark = [
    pytest.mark.skipif(
        _setting("PriorityType") != "priority/multifactor", reason="the model leaves Slurm at priority/basic"
    ),
    pytest.mark.skipif(SUBJECT is None, reason="no user whose account may use two QOS of different priority"),
    pytest.mark.skipif(NODE is None, reason="no GPU partition"),
]


def as_subject(script: str, timeout: int = 120) -> str:
    user = SUBJECT[0]
    out = D.host(D.login).run("timeout %s su - %s -c %s", str(timeout), user, f"cd /tmp && {script}")
    assert out.rc == 0, f"as {user} on {D.login}: {script}\nexit {out.rc}\n{out.stdout}{out.stderr}"
    return out.stdout


def sbatch(args: str) -> str:
    return as_subject(f"sbatch --parsable {args}").strip().split(";")[0]


def sprio_long(*jobs: str) -> dict[str, dict[str, str]]:
    """sprio -l for the jobs: job id -> column -> value (the columns by sprio's own header)."""
    out = as_subject(f"sprio -l -j {','.join(jobs)}")
    lines = [line.split() for line in out.splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    # PARTITION twice: the partition's name, then its factor (the second is PARTITION#2).
    header = [name if name not in header[:i] else f"{name}#2" for i, name in enumerate(header)]
    return {row[0]: dict(zip(header, row)) for row in rows}


def fair_share(user: str) -> float:
    """The user's fair-share factor in their default account (sshare), 0 until computed."""
    out = as_subject(f"sshare -n -P -u {user} -o Account,User,FairShare")
    values = [float(f or 0) for a, u, f in (line.split("|") for line in out.splitlines()) if u == user]
    return max(values, default=0.0)


def state(job: str) -> str:
    """The job's state as sacct records it (PENDING, RUNNING, COMPLETED, ...)."""
    return as_subject(f"sacct -n -P -X -j {job} -o State").strip()


def start(job: str) -> str:
    return as_subject(f"sacct -n -P -X -j {job} -o Start").strip()


def test_a_higher_qos_submitted_later_starts_first_and_sprio_shows_fairshare_and_qos():
    user, low, high = SUBJECT
    # slurmctld computes fair-share factors every PriorityCalcPeriod (and at its start): an
    # account added after it started (the accounts play runs after the controller's) has a
    # factor of 0 until then. As on a real cluster, wait for it.
    period_s = int(_setting("PriorityCalcPeriod") or 5) * 60
    assert retry(lambda: fair_share(user) > 0, period_s + 90, 10), (
        f"sshare shows no fair-share factor for {user} after PriorityCalcPeriod ({period_s} s):\n"
        + as_subject("sshare -a -l")
    )
    # Each job takes the whole node: all its GPUs, or on a CPU-only node all of it.
    whole = f"--gres={D.gpu_request([NODE])}" if D.gpus(NODE) else "--exclusive"
    partition = next(p for p in D.compute_partitions() if NODE in D.partitions()[p])
    common = f"-p {partition} -w {NODE} -N1 -n1 {whole} -t 0:10"
    holder = sbatch(f"{common} --qos={low} -J hold --wrap 'sleep 600'")
    jobs = [holder]
    try:
        assert retry(lambda: state(holder) == "RUNNING", 60, 1), f"job {holder} holding {NODE}: {state(holder)}"
        # Same user, account, node and size; only the QOS and the submission order differ.
        earlier = sbatch(f"{common} --qos={low} -J earlier-{low} --wrap 'sleep 5'")
        jobs.append(earlier)
        later = sbatch(f"{common} --qos={high} -J later-{high} --wrap 'sleep 5'")
        jobs.append(later)

        shown = retry(
            lambda: (lambda s: s if {earlier, later} <= s.keys() else None)(sprio_long(earlier, later)), 30, 1
        )
        assert shown, f"sprio -l lists neither pending job: {as_subject('sprio -l')}"
        for job in (earlier, later):
            row = shown[job]
            assert float(row["FAIRSHARE"]) > 0, f"job {job}: no fair-share factor for {user}'s account: {row}"
            assert float(row["QOS"]) > 0, f"job {job}: no QOS factor: {row}"
        assert float(shown[later]["QOS"]) > float(shown[earlier]["QOS"]), f"QOS {high} over {low}: {shown}"
        assert int(shown[later]["PRIORITY"]) > int(shown[earlier]["PRIORITY"]), f"priorities: {shown}"
        assert shown[later]["FAIRSHARE"] == shown[earlier]["FAIRSHARE"], f"one user, one account: {shown}"

        as_subject(f"scancel {holder}")
        # Both need every GPU of the node: one runs, the other waits for it to end.
        assert retry(lambda: state(earlier) == state(later) == "COMPLETED", 180, 2), (
            f"jobs {earlier} ({low}) and {later} ({high}) did not both run: {state(earlier)} {state(later)}"
        )
        starts = {job: start(job) for job in (earlier, later)}
        assert starts[later] < starts[earlier], (
            f"job {later} (QOS {high}, submitted second) started {starts[later]}, job {earlier} (QOS {low}, "
            f"submitted first) {starts[earlier]}: the queue is first in, first out"
        )
    finally:
        as_subject(f"scancel {' '.join(shlex.quote(j) for j in jobs)} || true")
