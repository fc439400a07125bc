"""Accounts from the directory: users who exist in no /etc/passwd log in over SSH with the key
the model lists, see their directory groups, run jobs under the model's Slurm account, meet
the model's QOS limits; anyone else is refused by sshd and by Slurm; nobody but the entry
itself and the admin reads a password hash; a user disabled in the model is locked out after
a re-converge (and let back in by the next).

What the model says comes from the rendered tree: etc/hal-provision/ldap-directory.json (the
entries) and slurm-accounting.json (accounts and users). Logging in needs the users' private
keys, which only the sandbox has (inventory/sandbox.yml: hal_sandbox_user_keys).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest

from deployed import deployed, retry, run_playbook, tail

D = deployed()
DIRECTORY = json.loads(D.rendered("etc/hal-provision/ldap-directory.json") or "null")
PLAN = json.loads(D.rendered("etc/hal-provision/slurm-accounting.json") or "{}")
HV = D.hostvars[D.login]
KEYS = Path(HV["hal_sandbox_user_keys"]) if HV.get("hal_sandbox_user_keys") else None
LDAP = D.hosts_in("service_ldap")
CA = "/etc/ssl/hal-provision/cluster-ca.crt"

pytestmark = pytest.mark.skipif(DIRECTORY is None or not LDAP, reason="the model has no accounts section")


def _people() -> dict[str, dict]:
    return {
        e["attributes"]["uid"][0]: e["attributes"]
        for e in (DIRECTORY or {}).get("entries", [])
        if "posixAccount" in e["attributes"]["objectClass"]
    }


PEOPLE = _people()
ACTIVE = [n for n, a in PEOPLE.items() if "shadowExpire" not in a]
USERS = {u["name"]: u for u in PLAN.get("users", [])}
# A user who can log in and has a Slurm account: the one the tests act as.
USER = next((n for n in ACTIVE if n in USERS), None)
needs_keys = pytest.mark.skipif(KEYS is None or USER is None, reason="only the sandbox holds the users' private keys")


def dn(name: str) -> str:
    return f"uid={name},{DIRECTORY['people_dn']}"


def ssh(
    user: str, command: str, key_of: str | None = None, host: str | None = None, timeout: int = 120
) -> subprocess.CompletedProcess:
    """ssh from this machine as `user`, with the sandbox's private key of `key_of` (default: the user's)."""
    host = host or D.login
    known_hosts = re.search(r"UserKnownHostsFile=(\S+)", D.hostvars[host]["ansible_ssh_common_args"]).group(1)
    argv = [
        "ssh",
        "-i",
        str(KEYS / (key_of or user)),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "ConnectTimeout=15",
        "-o",
        "ControlMaster=no",
        "-o",
        "ControlPath=none",
        f"{user}@{D.hostvars[host]['ansible_host']}",
        command,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def ssh_ok(user: str, command: str, timeout: int = 120) -> str:
    out = ssh(user, command, timeout=timeout)
    assert out.returncode == 0, f"ssh {user}@{D.login} {command!r}: exit {out.returncode}\n{out.stdout}{out.stderr}"
    return out.stdout


def expected_groups(name: str) -> set[str]:
    attrs = PEOPLE[name]
    groups = set()
    for e in DIRECTORY["entries"]:
        a = e["attributes"]
        if "posixGroup" in a["objectClass"] and (
            name in a.get("memberUid", []) or a["gidNumber"] == attrs["gidNumber"]
        ):
            groups.add(a["cn"][0])
    return groups


def root(host: str, command: str, timeout: int = 60):
    return D.host(host).run("timeout %s bash -c %s", str(timeout), command)


# ---- logging in ---------------------------------------------------------------------------


@needs_keys
def test_directory_user_in_no_passwd_file_logs_in_with_the_model_key_and_sees_directory_groups():
    passwd = root(D.login, f"grep -c '^{USER}:' /etc/passwd")
    assert passwd.stdout.strip() == "0", f"{USER} is in {D.login}'s /etc/passwd: the test proves nothing"
    out = ssh_ok(USER, "id -un; id -u; id -gn; id -Gn; echo $HOME; pwd")
    name, uid, primary, groups, home, pwd = out.split("\n")[:6]
    attrs = PEOPLE[USER]
    assert (name, uid) == (USER, attrs["uidNumber"][0])
    assert set(groups.split()) == expected_groups(USER), f"id -Gn: {groups}"
    assert home == pwd == attrs["homeDirectory"][0], "the home directory is the directory's, created at first login"


@needs_keys
def test_directory_user_submits_with_swrun_and_sacct_shows_the_model_account():
    vps = json.loads(D.rendered("etc/swsuite/virtual-partitions.json"))["virtual_partitions"]
    # The smallest virtual partition: one GPU, or one node where the cluster has no GPUs.
    smallest = next((n for n, v in vps.items() if v["kind"] == "gpu" and v["gpus"] == 1), None) or next(
        n for n, v in vps.items() if v["kind"] == "cpu" and v.get("nodes") == 1
    )
    out = ssh_ok(USER, f"cd /tmp && swrun -p {smallest} -t 0:05 -- bash -c 'echo job=$SLURM_JOB_ID'")
    job = re.search(r"job=(\d+)", out).group(1)
    row = retry(lambda: ssh_ok(USER, f"sacct -n -P -X -j {job} -o User,Account,State").strip(), 60, 2)
    assert row.split("|")[:2] == [USER, USERS[USER]["default_account"]], f"sacct: {row!r}"


@needs_keys
def test_a_name_the_model_does_not_have_is_refused_by_sshd():
    out = ssh("nosuchuser", "true", key_of=USER, timeout=60)
    assert out.returncode == 255 and "Permission denied" in out.stderr, out.stderr


@needs_keys
def test_a_users_key_opens_no_other_account():
    other = next((n for n in ACTIVE if n != USER), None)
    if other is None:
        pytest.skip("one active user only")
    out = ssh(other, "true", key_of=USER, timeout=60)
    assert out.returncode == 255 and "Permission denied" in out.stderr, out.stderr


def test_a_local_user_not_in_the_model_is_refused_by_slurm():
    """Same node, a real local account (nobody), no association: AccountingStorageEnforce
    refuses it. (No useradd here: shadow's userdel rewrites /etc/subuid in its own order.)"""
    if "associations" not in (D.rendered("etc/slurm/slurm.conf") or ""):
        pytest.skip("the model does not enforce associations")
    out = root(
        D.login,
        "cd /tmp && setpriv --reuid=nobody --regid=nogroup --clear-groups srun -t 0:01 -n1 true 2>&1",
        timeout=60,
    )
    assert out.rc != 0, out.stdout
    assert re.search(r"Invalid account|invalid association", out.stdout, re.I), out.stdout


# ---- limits -------------------------------------------------------------------------------


def _allowed_qos(user: str) -> list[str]:
    account = next((a for a in PLAN.get("accounts", []) if a["name"] == USERS[user]["default_account"]), None)
    return account["association"].split("|")[3].split(",") if account else []


def _qos_gpu_limit(user: str) -> tuple[str, int] | None:
    """(QOS, its MaxTRESPerUser gres/gpu) for a QOS the user's account may use. A GPU limit,
    not MaxWall: the partition's QOS sets MaxWall, and a partition QOS's limits take
    precedence over the job QOS's (Slurm's OverPartQOS is not set)."""
    for q in PLAN.get("qos", []):
        gpus = q["listed"].split("|")[3]
        if q["name"] in _allowed_qos(user) and gpus.startswith("gres/gpu="):
            return q["name"], int(gpus.split("=")[1])
    return None


@needs_keys
def test_a_qos_limit_from_the_model_stops_a_job_that_exceeds_it():
    found = _qos_gpu_limit(USER)
    per_node = D.gpus(D.hosts_in("slurm_nodes")[0])
    if found is None or found[1] + 1 > per_node * len(D.hosts_in("slurm_nodes")):
        pytest.skip("no QOS with a GPU limit the sandbox's GPUs can exceed is open to the test user's account")
    qos, limit = found
    nodes = -(-(limit + 1) // per_node)
    gres = -(-(limit + 1) // nodes)
    job = ssh_ok(USER, f"cd /tmp && sbatch --parsable --qos={qos} -N{nodes} --gres=gpu:{gres} -t 0:05 --wrap true")
    job = job.strip().split(";")[0]
    try:

        def pending_reason() -> str:  # "None" until the scheduler has looked at the job
            shown = ssh_ok(USER, f"squeue -h -j {job} -o %r").strip()
            return "" if shown == "None" else shown

        reason = retry(pending_reason, 30, 1)
        assert reason == "QOSMaxGRESPerUser", f"job {job}: {nodes}x{gres} GPUs, QOS {qos} allows {limit}: {reason!r}"
        held = ssh_ok(USER, f"sleep 3; squeue -h -j {job} -o %T").strip()
        assert held == "PENDING", f"job {job} is {held}"
    finally:
        ssh(USER, f"scancel {job}")


@needs_keys
def test_a_qos_the_account_may_not_use_is_refused():
    for user in (u for u in ACTIVE if u in USERS and (KEYS / u).is_file()):
        other = next((q["name"] for q in PLAN.get("qos", []) if q["name"] not in _allowed_qos(user)), None)
        if other is not None:
            break
    else:
        pytest.skip("every active user's account may use every QOS")
    out = ssh(user, f"cd /tmp && srun --qos={other} -t 0:01 -n1 true")
    assert out.returncode != 0 and re.search(r"Invalid qos", out.stderr, re.I), out.stderr


# ---- password hashes ----------------------------------------------------------------------


def test_no_anonymous_or_ordinary_search_reads_a_password_hash():
    server = LDAP[0]
    base = DIRECTORY["base_dn"]
    if len(ACTIVE) < 2:
        pytest.skip("two active directory users are needed")
    a, b = ACTIVE[:2]
    uri = f"ldaps://{server}.{D.hostvars[server]['hal_cluster_domain']}"
    admin = f"-x -H ldapi:/// -D {shlex.quote(DIRECTORY['admin_dn'])} -y /etc/hal-provision/secrets/ldap_admin_pass"
    secrets = {a: "pw-" + a + "-Xk29", b: "pw-" + b + "-Qm71"}
    for name, password in secrets.items():
        set_pw = root(server, f"ldappasswd {admin} -s {password} {shlex.quote(dn(name))}")
        assert set_pw.rc == 0, set_pw.stderr
    try:
        env = f"LDAPTLS_CACERT={CA}"
        search = f"ldapsearch -LLL -H {uri} -b {shlex.quote(base)}"
        # From the directory host to its own LDAPS name: the clients' path, and ldap-utils are there.
        anonymous = root(server, f"{env} {search} -x '(uid=*)' userPassword uid")
        assert anonymous.rc == 0 and f"uid: {a}" in anonymous.stdout, anonymous.stderr
        assert "userPassword" not in anonymous.stdout, anonymous.stdout
        as_b = root(server, f"{env} {search} -x -D {shlex.quote(dn(b))} -w {secrets[b]} '(uid={a})' userPassword")
        assert as_b.rc == 0 and dn(a) in as_b.stdout.replace("\n ", ""), as_b.stderr
        assert "userPassword" not in as_b.stdout, f"{b} reads {a}'s hash:\n{as_b.stdout}"
        own = root(server, f"{env} {search} -x -D {shlex.quote(dn(b))} -w {secrets[b]} '(uid={b})' userPassword")
        assert "userPassword:: " in own.stdout or "userPassword: " in own.stdout, (
            f"{b} cannot read its own:\n{own.stdout}"
        )
    finally:
        for name in secrets:
            root(server, f"printf 'dn: {dn(name)}\\nchangetype: modify\\ndelete: userPassword\\n' | ldapmodify {admin}")


def test_plain_ldap_listens_only_on_the_loopback_and_the_cluster_address():
    """slapd's plain (unencrypted) listener: an anonymous bind and search answer on the host's
    cluster address and on the loopback; on any other address of the host nothing listens.
    127.0.0.2 (on the loopback device, not the cluster network) stands in for an interface on
    another network: the sandbox's nodes have no second one."""
    server = LDAP[0]
    address = D.hostvars[server]["ansible_host"]
    search = f"ldapsearch -x -LLL -b {shlex.quote(DIRECTORY['base_dn'])} -s base dn -H"
    for uri in (f"ldap://{address}/", "ldap://127.0.0.1/"):
        inside = root(server, f"{search} {uri}")
        assert inside.rc == 0 and DIRECTORY["base_dn"] in inside.stdout, f"{uri}: {inside.stderr}"
    # ldapsearch exits 255 when it reaches no server, which testinfra takes for ssh's own failure: 254
    outside = root(server, f"{search} ldap://127.0.0.2/; rc=$?; [ $rc -ne 255 ] || rc=254; exit $rc")
    assert outside.rc == 254 and "Can't contact LDAP server" in outside.stderr, (
        outside.rc,
        outside.stdout,
        outside.stderr,
    )
    listening = root(server, "ss -Hltn 'sport = :389'")
    bound = {line.split()[3].rsplit(":", 1)[0] for line in listening.stdout.splitlines()}
    assert bound == {"127.0.0.1", address}, listening.stdout


# ---- disabling a user in the model ----------------------------------------------------------


def converge_with(rendered: Path) -> str:
    """The directory tier and the Slurm accounting of site.yml, on another rendered tree."""
    outputs = []
    for playbook, extra in (("directory.yml", []), ("slurm-controller.yml", ["--tags", "slurm_accounting"])):
        outputs.append(
            run_playbook(
                D.inventory,
                playbook,
                *extra,
                "-e",
                f"hal_rendered_dir={rendered / 'files'}",
                "--diff",
                timeout=600,
                inventories=[D.inventory],
            )
        )
    return "\n".join(outputs)


@needs_keys
@pytest.mark.changes
def test_disabling_a_user_in_the_model_locks_them_out_of_ssh_and_slurm():
    from hal_provision.render.writer import write_tree
    from hal_provision.sandbox import lifecycle

    workdir = Path(HV["hal_sandbox_workdir"])
    sb = lifecycle.load(workdir)
    users = [u.model_copy(update={"state": "disabled"}) if u.name == USER else u for u in sb.cluster.accounts.users]
    disabled = sb.cluster.model_copy(update={"accounts": sb.cluster.accounts.model_copy(update={"users": users})})
    with tempfile.TemporaryDirectory(prefix="hal-disabled-") as tmp:
        rendered = Path(tmp) / "rendered"
        write_tree(lifecycle.rendered_files(lifecycle.Sandbox(sb.name, workdir, disabled)), rendered)
        try:
            output = converge_with(rendered)
            # The diff of the directory: exactly the user's entry changed, nothing else.
            assert set(re.findall(r"^--- before: (\S+=\S+)$", output, re.M)) == {dn(USER)}, tail(output, 200)
            refused = ssh(USER, "true", timeout=60)
            assert refused.returncode == 255, f"{USER} still logs in:\n{refused.stdout}{refused.stderr}"
            assocs = root(D.controller, f"sacctmgr -n -P list association user={USER} format=Account,User")
            assert assocs.stdout.strip() == "", f"{USER} keeps associations: {assocs.stdout!r}"
            job = root(
                D.login,
                f"setpriv --reuid={PEOPLE[USER]['uidNumber'][0]} --regid={PEOPLE[USER]['gidNumber'][0]} "
                "--clear-groups srun -t 0:01 -n1 true 2>&1",
                timeout=60,
            )
            assert job.rc != 0 and re.search(r"Invalid account|invalid association", job.stdout, re.I), job.stdout
        finally:
            restored = converge_with(D.inventory.parent)  # the model as it was: the user is back
    assert set(re.findall(r"^--- before: (\S+=\S+)$", restored, re.M)) == {dn(USER)}, tail(restored, 200)
    assert retry(lambda: ssh(USER, "true", timeout=60).returncode == 0, 60, 3), f"{USER} was not let back in"
