"""Hardware and node state against the model: the health check's expectations as tests.

Each Slurm node's expectation is its group's rendered files/etc/hal-provision/health/<group>.json
(the file the healthcheck role installs and hal-healthcheck reads). Here every check it names
is made again with testinfra's own means (sysfs, /proc, stat, systemctl, nvidia-smi), so
`verify` on a real cluster reports hardware drift even where the check program is broken;
then the installed program itself must find the node healthy, and slurmd must run it at the
model's interval. Read-only.
"""

from __future__ import annotations

import json

import pytest

from deployed import deployed, run_site

D = deployed()
FACTS = json.loads(D.rendered("etc/hal-provision/health.json") or "null")
pytestmark = pytest.mark.skipif(FACTS is None, reason="the model has no health section")
NODES = D.hosts_in("slurm_nodes") if FACTS else []


def expectation(host: str) -> dict:
    return json.loads(D.health_expectation(host))


CASES = [(host, name) for host in NODES for name in expectation(host)["checks"]]


def _cpus(host, want):
    out = D.host(host).check_output("lscpu -p=SOCKET,CORE,CPU | grep -v '^#'")
    rows = [line.split(",") for line in out.splitlines()]
    sockets = {r[0] for r in rows}
    cores = {(r[0], r[1]) for r in rows}
    have = {
        "sockets": len(sockets),
        "cores_per_socket": len(cores) // len(sockets),
        "threads_per_core": len(rows) // len(cores),
        "cpus": len(rows),
    }
    assert have == {k: want[k] for k in have}, f"{host}: lscpu says {have}, the model {want}"


def _memory(host, want):
    kib = int(D.host(host).check_output("awk '/^MemTotal:/ {print $2}' /proc/meminfo"))
    assert kib >= want["min_kib"], (
        f"{host}: MemTotal {kib} kB, the model {want['memory_gib']} GiB (at least {want['min_kib']} kB)"
    )


def _gpus(host, want):
    for path in want["files"]:
        f = D.host(host).run("stat -c '%%F %%t' %s", path)
        assert f.rc == 0, f"{host}: {path} is missing ({f.stderr.strip()})"
        kind, major = f.stdout.strip().rsplit(" ", 1)
        assert kind == "character special file" and int(major, 16) == want["major"], (
            f"{host}: {path} is a {kind} of major {int(major, 16)}, not an NVIDIA device (major {want['major']})"
        )


def _gpu_model(host, want):
    out = D.host(host).check_output("nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits")
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    assert [r[0] for r in rows] == [want["model"]] * want["count"], f"{host}: nvidia-smi lists {rows}, the model {want}"


def _mounts(host, want):
    missing = [p for p in want["mount_points"] if not D.host(host).mount_point(p).exists]
    assert not missing, f"{host}: not mounted: {missing}"


def _services(host, want):
    down = [u for u in want["units"] if not D.host(host).service(u).is_running]
    assert not down, f"{host}: not running: {down}\n" + "\n".join(D.journal(host, u) for u in down)


def _infiniband(host, want):
    for port in want["ports"]:
        out = (
            D.host(host)
            .run(
                "grep -H . /sys/class/infiniband/*/ports/%s/state /sys/class/infiniband/*/ports/%s/rate",
                str(port),
                str(port),
            )
            .stdout
        )
        active = [line for line in out.splitlines() if line.endswith("ACTIVE")]
        assert active, f"{host}: no InfiniBand port {port} is ACTIVE:\n{out}"


CHECK = {
    "cpus": _cpus,
    "memory": _memory,
    "gpus": _gpus,
    "gpu_model": _gpu_model,
    "mounts": _mounts,
    "services": _services,
    "infiniband": _infiniband,
}


@pytest.mark.parametrize("host,check", CASES)
def test_node_matches_the_model(host, check):
    CHECK[check](host, expectation(host)["checks"][check])


@pytest.mark.parametrize("host", NODES)
def test_installed_expectation_and_program(host):
    h = D.host(host)
    installed = h.file(FACTS["node_expectation"])
    assert installed.exists and installed.mode == 0o644 and installed.user == "root", (
        f"{host}: {FACTS['node_expectation']}"
    )
    assert json.loads(installed.content_string) == expectation(host), (
        f"{host}: the installed expectation is not its group's"
    )
    if FACTS["program"] == "hal":
        program = h.file(FACTS["path"])
        assert program.mode == 0o755 and program.user == "root", f"{host}: {FACTS['path']} mode {oct(program.mode)}"


@pytest.mark.parametrize("host", NODES)
def test_health_check_finds_the_node_healthy(host):
    if FACTS["program"] != "hal":
        pytest.skip("health.program is nhc: LBNL NHC is not installed in the sandbox")
    out = D.host(host).run("%s --no-slurm", FACTS["path"])
    assert out.rc == 0 and "FAIL" not in out.stdout, (
        f"{host}: {FACTS['path']} --no-slurm: exit {out.rc}\n{out.stdout}{out.stderr}"
    )
    ran = set(line.split()[1].rstrip(":") for line in out.stdout.splitlines() if line.startswith("ok"))
    assert ran == set(expectation(host)["checks"]), f"{host}: checks run {sorted(ran)}"


def test_slurmd_runs_the_check_at_the_model_interval():
    config = D.host(D.controller).check_output("scontrol show config")
    values = dict(line.split(" = ", 1) for line in config.splitlines() if " = " in line)
    values = {k.strip(): v.strip() for k, v in values.items()}
    assert values.get("HealthCheckProgram") == FACTS["path"], values.get("HealthCheckProgram")
    assert values.get("HealthCheckInterval") == f"{FACTS['interval_s']} sec", values.get("HealthCheckInterval")
    if FACTS["program"] == "hal":
        # slurmd ran it (at start and every interval): each node keeps its last result.
        for host in NODES:
            last = D.host(host).run("cat /run/hal-healthcheck/last.json")
            assert last.rc == 0, f"{host}: slurmd has not run {FACTS['path']} (no /run/hal-healthcheck/last.json)"
            record = json.loads(last.stdout)
            assert record["host"] == host and record["reason"] is None and "error" not in record.get("slurm", {}), (
                f"{host}: last health check {record}"
            )


def test_discover_playbook_reads_every_slurm_node(tmp_path):
    """playbooks/discover.yml collects each Slurm node's raw outputs on the controller and
    `hal-provision discover` reads them: the CPU topology it finds is the one lscpu shows on the
    node, and its GPUs are the ones the node's nvidia-smi lists. (Sandbox containers are not
    the model's hardware, so the last task, "matches the model", fails there: expected.)"""
    import subprocess
    import xml.etree.ElementTree as ET

    workdir = D.hostvars[NODES[0]].get("hal_sandbox_workdir") if NODES else None
    if not workdir:
        pytest.skip("needs the description the cluster was rendered from (the sandbox's model.json)")
    run = run_site(
        D.inventory,
        "-e",
        "discover_hosts=slurm_nodes",
        "-e",
        f"discover_dir={tmp_path}",
        "-e",
        f"discover_cluster_file={workdir}/model.json",
        playbook="discover.yml",
        timeout=600,
    )
    assert "unreachable=1" not in run.stdout, run.stdout[-3000:]
    for host in NODES:
        records = tmp_path / host
        assert (records / "lscpu.json").is_file() and (records / "meminfo-head.txt").is_file(), sorted(
            records.iterdir()
        )
        found = subprocess.run(
            ["hal-provision", "discover", f"{workdir}/model.json", "--records", str(records), "--host", host, "--json"],
            capture_output=True,
            text=True,
        )
        assert found.returncode in (0, 1), found.stderr
        profile = next(iter(json.loads(found.stdout)["hardware"].values()))
        out = D.host(host).check_output("lscpu -p=SOCKET,CORE,CPU | grep -v '^#'")
        rows = [line.split(",") for line in out.splitlines()]
        assert (profile["sockets"], profile["sockets"] * profile["cores_per_socket"] * profile["threads_per_core"]) == (
            len({r[0] for r in rows}),
            len(rows),
        ), f"{host}: discovered {profile}, lscpu -p says {rows}"
        smi = D.host(host).run("nvidia-smi -q -x")  # the call the sandbox's fake nvidia-smi also answers
        names = [g.findtext("product_name") for g in ET.fromstring(smi.stdout).findall("gpu")] if smi.rc == 0 else []
        assert (
            [profile["gpus"]["model"]] * len(profile["gpus"]["devices"]) == names if names else not profile.get("gpus")
        ), f"{host}: discovered GPUs {profile.get('gpus')}, nvidia-smi lists {names}"
