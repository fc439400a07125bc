"""Node health: the checks on the model's health section (one row per mistake), the rendered
expectations, slurm.conf lines and nhc.conf, the sandbox's narrowing, and hal-healthcheck
itself on fake /proc, /sys and /dev trees with fake nvidia-smi, systemctl, sinfo and scontrol
on PATH (the drain/resume decisions it makes in Slurm)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hal_provision.findings import Level
from hal_provision.node.health import healthcheck as hc
from hal_provision.loader import load_text
from hal_provision.render import health, render_all
from hal_provision.sandbox.derive import SANDBOX_HEALTH_INTERVAL_SECONDS, derive_sandbox

PROGRAM = Path(hc.__file__)
E, W, I = Level.error, Level.warning, Level.info  # noqa: E741 - the table's three columns
CHECKS_LINE = "  memory_tolerance_pct: 5 "


# ---- checks on the model ----------------------------------------------------------------------

ROWS = [
    (
        "check-twice",
        [(CHECKS_LINE, "  checks: [gpus, mounts, gpus]\n" + CHECKS_LINE)],
        E,
        "health.checks[2]",
        "'gpus' is listed twice (first at [0])",
    ),
    (
        "nhc-gpu-model",
        [("  program: hal ", "  program: nhc ")],
        W,
        "health.checks[3]",
        "LBNL NHC has no stock GPU model check",
    ),
    (
        "long-interval",
        [("  interval_s: 300 ", "  interval_s: 900 ")],
        I,
        "health.interval_s",
        "longer than SlurmdTimeout (300 s)",
    ),
    (
        "infiniband-without-fabric",
        [
            lambda t: t[: t.index("\nfabric:\n")] + t[t.index("\nhardware:\n") :],
            lambda t: t.replace(", infiniband", ""),
            (CHECKS_LINE, "  checks: [gpus, infiniband]\n" + CHECKS_LINE),
        ],
        I,
        "health.checks[1]",
        "'infiniband' has nothing to check: there is no fabric",
    ),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


@pytest.mark.parametrize(
    ("old", "new", "dotted"),
    [
        pytest.param("  interval_s: 300 ", "  interval_s: 1 ", "health.interval_s", id="interval-too-short"),
        pytest.param("  program: hal ", "  program: nagios ", "health.program", id="unknown-program"),
        pytest.param("  node_state: [any]", "  node_state: [busy]", "health.node_state[0]", id="unknown-state"),
        pytest.param(CHECKS_LINE, "  checks: [gpus, disks]\n" + CHECKS_LINE, "health.checks[1]", id="unknown-check"),
    ],
)
def test_structural_mistakes_are_refused_by_render(render_rejects, hal_text, old, new, dotted):
    assert old in hal_text
    render_rejects(hal_text.replace(old, new), dotted)


# ---- rendering ----------------------------------------------------------------------------------


def test_hal_compute_expectation_is_the_ac922(files):
    exp = json.loads(files["files/etc/hal-provision/health/compute.json"])
    assert exp["hosts"] == "hal[01-16]" and exp["reason_prefix"] == "hal-health"
    checks = exp["checks"]
    assert checks["cpus"] == {"sockets": 2, "cores_per_socket": 20, "threads_per_core": 4, "cpus": 160}
    assert checks["memory"]["memory_gib"] == 256 and checks["memory"]["min_kib"] == int(256 * 1024 * 1024 * 0.95)
    assert checks["gpus"] == {"files": [f"/dev/nvidia{i}" for i in range(4)], "major": 195}
    assert checks["gpu_model"] == {"count": 4, "model": "NVIDIA Tesla V100-SXM2-16GB", "memory_gib": 16}
    assert checks["mounts"] == {"mount_points": ["/home", "/sw"]}  # GPFS members and NFS clients
    assert checks["services"] == {"units": ["munge", "sssd"]}
    assert checks["infiniband"] == {"ports": [{"device": "mlx5_0", "port": 1, "rate_gbps": 100}], "rate_gbps": 100}


def test_only_slurm_nodes_get_an_expectation(files):
    names = sorted(p for p in files if p.startswith("files/etc/hal-provision/health/"))
    assert names == ["files/etc/hal-provision/health/compute.json"]
    facts = json.loads(files["files/etc/hal-provision/health.json"])
    assert facts["groups"] == ["compute"] and facts["path"] == "/usr/local/sbin/hal-healthcheck"
    assert facts["interval_s"] == 300 and facts["node_expectation"] == "/etc/hal-provision/health.json"


def test_slurm_conf_names_the_program_at_the_model_interval(files):
    conf = files["files/etc/slurm/slurm.conf"]
    assert (
        "HealthCheckProgram=/usr/local/sbin/hal-healthcheck\nHealthCheckInterval=300\nHealthCheckNodeState=ANY\n"
    ) in conf


def test_without_health_nothing_is_rendered(hal_text):
    model = load_text(hal_text[: hal_text.index("\nhealth:")] + "\n", "hal.yml").model
    files = render_all(model)
    assert not [p for p in files if "health" in p or "nhc" in p]
    assert "HealthCheck" not in files["files/etc/slurm/slurm.conf"]


def test_nhc_conf_has_the_same_expectations(files):
    conf = files["files/etc/nhc/nhc.conf"]
    m = "{hal[01-16]} || "
    for line in (
        "check_hw_cpuinfo 2 40 160",
        "check_hw_physmem 256GB 256GB 5%",
        "check_file_test -c -r -w /dev/nvidia3",
        "check_fs_mount_rw -f /home",
        "check_fs_mount_rw -f /sw",
        "check_ps_service -u munge munged",
        "check_ps_service -u root sssd",
        "check_hw_ib 100 mlx5_0",
    ):
        assert f"\n{m}{line}\n" in conf, line
    assert "nvidia-smi" not in conf  # gpu_model has no stock NHC check (a warning says so with program nhc)


def test_sandbox_keeps_the_checks_a_container_can_pass(hal):
    sb = derive_sandbox(hal)
    assert sb.health.interval_s == SANDBOX_HEALTH_INTERVAL_SECONDS == 10 and sb.health.checks == [
        "gpus",
        "mounts",
        "services",
    ]
    exp = json.loads(health.render(sb)["files/etc/hal-provision/health/compute.json"])
    assert exp["hosts"] == "hal[01-02]" and sorted(exp["checks"]) == ["gpus", "mounts", "services"]
    # The sandbox's stand-in scratch (derive.SCRATCH_STANDIN) is the one mount the model renders.
    assert exp["checks"]["mounts"] == {"mount_points": ["/local"]}


def test_sandbox_overlay_lists_the_bound_mounts(hal, tmp_path):
    from hal_provision.sandbox.overlay import SshAccess, sandbox_files

    sb = derive_sandbox(hal)
    shared = {"/home": ["hal-login", "hal01", "hal02"], "/sw": ["hal01", "hal02"], "/scratch": ["hal01"]}
    files = sandbox_files(sb, SshAccess(tmp_path / "id", tmp_path / "known"), shared)
    exp = json.loads(files["files/etc/hal-provision/health/compute.json"])
    # /scratch is not on hal02; the local scratch is the model's own
    assert exp["checks"]["mounts"] == {"mount_points": ["/home", "/sw", "/local"]}


# ---- hal-healthcheck on fake trees ----------------------------------------------------------------


def fake_cpus(root: Path, sockets: int, cores: int, threads: int) -> None:
    cpu = 0
    for s in range(sockets):
        for c in range(cores):
            for _t in range(threads):
                topo = root / f"sys/devices/system/cpu/cpu{cpu}/topology"
                topo.mkdir(parents=True)
                (topo / "physical_package_id").write_text(f"{s}\n")
                (topo / "core_id").write_text(f"{c * 8}\n")  # POWER9 numbers cores sparsely
                cpu += 1


def gpu_device(root: Path, minor: int, major: int = 195) -> None:
    (root / "dev").mkdir(exist_ok=True)
    try:
        os.mknod(root / f"dev/nvidia{minor}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("mknod needs root")


def fake_command(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A healthy fake AC922 node: sysfs, meminfo, 4 GPU devices, mounts, IB port 1 ACTIVE at
    100 Gb/s; nvidia-smi, systemctl on PATH; and its expectation (HAL's compute group)."""
    root = tmp_path / "root"
    fake_cpus(root, 2, 20, 4)
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/meminfo").write_text("MemTotal:       262144000 kB\nMemFree:        1000 kB\n")
    (root / "proc/self/mounts").write_text(
        "/dev/sda2 / ext4 rw 0 0\nhome /home gpfs rw 0 0\nhal-data:/export/misc /sw nfs4 rw 0 0\n"
    )
    for i in range(4):
        gpu_device(root, i)
    port = root / "sys/class/infiniband/mlx5_0/ports/1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "rate").write_text("100 Gb/sec (4X EDR)\n")
    bin_dir = tmp_path / "bin"
    fake_command(bin_dir, "nvidia-smi", "for i in 0 1 2 3; do echo 'Tesla V100-SXM2-16GB, 16160'; done\n")
    fake_command(bin_dir, "systemctl", 'case "$2" in munge|sssd) echo active;; *) echo inactive; exit 3;; esac\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    from hal_provision.loader import load

    exp = health.expectation(load().model, load().model.nodes[-1])
    del exp["checks"]["gpu_faults"]  # nvidia-smi -q -x and the kernel log: test_health_gpu_faults.py
    del exp["checks"]["dcgm"]  # dcgmi: test_health_dcgm.py
    return root, exp, bin_dir


def test_healthy_node_passes_every_check(node):
    root, exp, _ = node
    results = hc.run_checks(exp, str(root))
    assert list(results) == ["cpus", "memory", "gpus", "gpu_model", "mounts", "services", "infiniband"]
    assert results == {name: [] for name in results}
    assert hc.drain_reason("hal-health", results) is None


@pytest.mark.parametrize(
    ("breakage", "check", "problem"),
    [
        ("rm -r sys/devices/system/cpu/cpu159 sys/devices/system/cpu/cpu158", "cpus", "cpus 158, expected 160"),
        ("sed -i s/262144000/131072000/ proc/meminfo", "memory", "125.0 GiB, expected 256 GiB (at least 243.2 GiB"),
        ("rm dev/nvidia2", "gpus", "/dev/nvidia2 missing"),
        ("sed -i /sw/d proc/self/mounts", "mounts", "/sw not mounted"),
        (
            "echo '1: DOWN' > sys/class/infiniband/mlx5_0/ports/1/state",
            "infiniband",
            "mlx5_0 port 1 DOWN at 100 Gb/sec, expected ACTIVE at 100 Gb/s",
        ),
        (
            "echo '25 Gb/sec (1X EDR)' > sys/class/infiniband/mlx5_0/ports/1/rate",
            "infiniband",
            "mlx5_0 port 1 ACTIVE at 25 Gb/sec, expected ACTIVE at 100 Gb/s",
        ),
    ],
)
def test_broken_node_fails_the_check_that_names_it(node, breakage, check, problem):
    root, exp, _ = node
    subprocess.run(["sh", "-ec", breakage], cwd=root, check=True)
    results = hc.run_checks(exp, str(root))
    assert [n for n, p in results.items() if p] == [check], results
    assert problem in results[check][0]
    assert hc.drain_reason("hal-health", results).startswith(f"hal-health: {check}: {problem}")


def test_device_of_another_driver_is_not_a_gpu(node):
    root, exp, _ = node
    (root / "dev/nvidia1").unlink()
    gpu_device(root, 1, major=1)
    assert hc.run_checks(exp, str(root))["gpus"] == ["/dev/nvidia1 is not an NVIDIA character device (major 195)"]


@pytest.mark.parametrize(
    ("script", "problems"),
    [
        ("echo 'Tesla V100-SXM2-16GB, 16160'", ["1 GPUs, expected 4"]),
        (
            "for i in 0 1 2 3; do echo 'NVIDIA H100 80GB HBM3, 81559'; done",
            [
                "GPU 0 is NVIDIA H100 80GB HBM3, expected NVIDIA Tesla V100-SXM2-16GB",
                "GPU 0 has 79.6 GiB, expected 16 GiB",
            ],
        ),
        (
            "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver' >&2; exit 9",
            [
                "nvidia-smi failed (exit 9): NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver"
            ],
        ),
    ],
)
def test_gpu_model_from_nvidia_smi(node, script, problems):
    root, exp, bin_dir = node
    fake_command(bin_dir, "nvidia-smi", script + "\n")
    got = hc.run_checks(exp, str(root))["gpu_model"]
    assert got[: len(problems)] == problems, got


def test_stopped_service_fails_the_services_check(node):
    root, exp, bin_dir = node
    fake_command(bin_dir, "systemctl", 'case "$2" in munge) echo active;; *) echo failed; exit 3;; esac\n')
    assert hc.run_checks(exp, str(root))["services"] == ["sssd is failed"]


def test_first_failed_check_names_the_reason_and_counts_the_rest():
    results = {"cpus": [], "gpus": ["/dev/nvidia2 missing", "/dev/nvidia3 missing"], "mounts": ["/sw not mounted"]}
    assert hc.drain_reason("hal-health", results) == "hal-health: gpus: /dev/nvidia2 missing (+1 more)"


# ---- what it does in Slurm -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "reason", "wanted", "action"),
    [
        ("idle", "", "hal-health: gpus: x", ("drain", "hal-health: gpus: x")),
        ("mixed", "", "hal-health: gpus: x", ("drain", "hal-health: gpus: x")),
        ("drained", "hal-health: mounts: /sw", "hal-health: gpus: x", ("drain", "hal-health: gpus: x")),
        ("drained", "hal-health: gpus: x", "hal-health: gpus: x", ("none", "already drained for this")),
        ("drained", "hal-health: gpus: x", None, ("resume", "")),
        ("draining", "hal-health: gpus: x", None, ("resume", "")),
        (
            "drained",
            "disk swap Tuesday",
            "hal-health: gpus: x",
            ("none", "drained by somebody else (disk swap Tuesday): left as it is"),
        ),
        (
            "drained",
            "disk swap Tuesday",
            None,
            ("none", "healthy, but drained by somebody else (disk swap Tuesday): not resumed"),
        ),
        (
            "drained",
            "hal-healthy admin note",
            None,
            ("none", "healthy, but drained by somebody else (hal-healthy admin note): not resumed"),
        ),
        ("idle", "", None, ("none", "healthy")),
    ],
)
def test_decision(state, reason, wanted, action):
    assert hc.decide(state, reason, wanted, "hal-health") == action


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """Fake sinfo answering from a state file, fake scontrol recording its arguments."""
    bin_dir = tmp_path / "slurm-bin"
    state = tmp_path / "state"
    calls = tmp_path / "calls"
    fake_command(bin_dir, "sinfo", f"cat {state}\n")
    fake_command(bin_dir, "scontrol", f'echo "$@" >> {calls}\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(hc, "STATE_DIR", str(tmp_path / "run"))
    return state, calls


def run_program(exp: dict, root: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    path = tmp_path / "expectation.json"
    path.write_text(json.dumps(exp))
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from hal_provision.node.health import healthcheck as h; "
            f"h.STATE_DIR = {str(tmp_path / 'run')!r}; sys.exit(h.main(sys.argv[1:]))",
            "--expectation",
            str(path),
            "--root",
            str(root),
            "--host",
            "hal16",
            *extra,
        ],
        capture_output=True,
        text=True,
        env=os.environ,
    )


def test_program_drains_a_broken_node_naming_the_check(node, slurm, tmp_path):
    root, exp, _ = node
    state, calls = slurm
    state.write_text("idle|none\n")
    (root / "dev/nvidia3").unlink()
    p = run_program(exp, root, tmp_path)
    assert p.returncode == 1 and "FAIL gpus: /dev/nvidia3 missing" in p.stdout, p.stdout + p.stderr
    assert calls.read_text() == "update NodeName=hal16 State=DRAIN Reason=hal-health: gpus: /dev/nvidia3 missing\n"
    last = json.loads((tmp_path / "run/last.json").read_text())
    assert last["reason"] == "hal-health: gpus: /dev/nvidia3 missing" and last["slurm"]["action"] == "drain"


def test_program_resumes_only_what_it_drained(node, slurm, tmp_path):
    root, exp, _ = node
    state, calls = slurm
    state.write_text("drained|hal-health: gpus: /dev/nvidia3 missing\n")
    assert run_program(exp, root, tmp_path).returncode == 0
    assert calls.read_text() == "update NodeName=hal16 State=RESUME\n"
    calls.unlink()
    state.write_text("drained|replace DIMM 3\n")
    p = run_program(exp, root, tmp_path)
    assert p.returncode == 0 and not calls.exists(), p.stdout
    assert "drained by somebody else (replace DIMM 3): not resumed" in p.stdout


def test_no_slurm_reports_without_touching_slurm(node, slurm, tmp_path):
    root, exp, _ = node
    state, calls = slurm
    (root / "proc/self/mounts").write_text("/dev/sda2 / ext4 rw 0 0\n")
    p = run_program(exp, root, tmp_path, "--no-slurm")
    assert p.returncode == 1 and "FAIL mounts: /home not mounted; /sw not mounted" in p.stdout
    assert not calls.exists() and not (tmp_path / "run/last.json").exists()


def installed(tmp_path: Path) -> Path:
    """The program as the healthcheck role installs it: hal-healthcheck, drains.py beside it."""
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    shutil.copy(PROGRAM, sbin / "hal-healthcheck")
    shutil.copy(PROGRAM.parent.parent / "drains.py", sbin / "drains.py")
    return sbin / "hal-healthcheck"


def test_unreadable_expectation_is_a_one_line_error(tmp_path):
    # -E -s: the standard library and the program's own directory only, as slurmd runs it
    p = subprocess.run(
        [
            sys.executable,
            "-E",
            "-s",
            str(installed(tmp_path)),
            "--expectation",
            str(tmp_path / "none.json"),
            "--no-slurm",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert p.returncode == 2 and p.stderr.startswith("hal-healthcheck: cannot read") and "Traceback" not in p.stderr


@pytest.mark.parametrize("path", [PROGRAM, PROGRAM.parent.parent / "drains.py"], ids=lambda p: p.name)
def test_program_uses_the_standard_library_only(path):
    """And drains.py, the one module it imports that the role installs beside it."""
    import ast

    tree = ast.parse(path.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__", "drains"}, imported


def test_default_checks_with_nothing_to_compare_are_not_reported(check_file, edited):
    """Every check is the default; one with nothing to compare (no fabric) simply does nothing."""
    _file, loaded = check_file(
        edited(
            lambda t: t[: t.index("\nfabric:\n")] + t[t.index("\nhardware:\n") :],
            lambda t: t.replace(", infiniband", ""),
        )
    )
    assert not [f for f in loaded.findings if f.dotted.startswith("health")], [f.format() for f in loaded.findings]
