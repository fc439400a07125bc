"""Node health, gpu_faults: hal-healthcheck on the nvidia-smi -q -x recorded on a real H100
(tests/data/hardware/h100-x1/) and on copies of it with one value edited per fault
(tests/data/hardware/h100-x1-faults/, its README says which), with fake nvidia-smi and
journalctl on PATH; and the expectation the model renders for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hal_provision.loader import load_text
from hal_provision.model.health import DEFAULT_XIDS
from hal_provision.node.health import healthcheck as hc
from hal_provision.render import health

DATA = Path(__file__).resolve().parents[2] / "data" / "hardware"
HEALTHY = DATA / "h100-x1" / "nvidia-smi-q.xml"
FAULTS = DATA / "h100-x1-faults"
BUS = "00000000:00:06.0"  # the recorded GPU

# What the model renders for one H100 with NVLink, PCIe gen 5 x16 (see test_rendered_...).
WANT = {
    "count": 1,
    "max_uncorrectable_ecc": 0,
    "xids": list(DEFAULT_XIDS),
    "throttle_reasons": ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"],
    "pcie_generation": 5,
    "pcie_width": 16,
}


@pytest.fixture
def gpu_node(tmp_path, monkeypatch):
    """Fake nvidia-smi answering -q -x with a file and nvlink --status with another; fake
    journalctl printing a kernel log. Returns a function that points them at files."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")

    def point(
        xml: Path | str = HEALTHY,
        nvlink: Path | str = FAULTS / "nvlink-status.txt",
        journal: str = "",
        xml_script: str | None = None,
    ) -> None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(
            "#!/bin/sh\n" + 'case "$*" in\n'
            f'  "-q -x") {xml_script or f"cat {xml}"};;\n'
            f'  "nvlink --status") cat {nvlink};;\n'
            '  *) echo "no recording for $*" >&2; exit 2;;\nesac\n'
        )
        log = tmp_path / "kernel.log"
        log.write_text(journal)
        (bin_dir / "journalctl").write_text(f'#!/bin/sh\n[ "$*" = "-k -b --no-pager -o cat" ] || exit 2\ncat {log}\n')
        for f in ("nvidia-smi", "journalctl"):
            (bin_dir / f).chmod(0o755)

    point()
    return point


def faults(want: dict | None = None) -> list[str]:
    return hc.run_checks({"checks": {"gpu_faults": want or WANT}}, "/")["gpu_faults"]


def test_healthy_record_passes(gpu_node):
    assert faults() == []
    assert faults(dict(WANT, nvlink_links=[4])) == []  # nvlink-status.txt: 4 links up


def test_healthy_h200_record_passes(gpu_node):
    """The H200 recorded on a lent machine (tests/data/hardware/h200-x1), where the same check
    passed on the real GPU; and its link checked against a wider one."""
    gpu_node(DATA / "h200-x1" / "nvidia-smi-q.xml")
    assert faults() == []
    assert faults(dict(WANT, pcie_width=32)) == [f"GPU 0 ({BUS}) PCIe link is x16 (at most x16), expected x32"]


@pytest.mark.parametrize(
    ("fixture", "problem"),
    [
        ("ecc-uncorrectable.xml", f"GPU 0 ({BUS}) has 2 volatile uncorrectable ECC errors (at most 0)"),
        ("row-remap-pending.xml", f"GPU 0 ({BUS}) has a row remap pending (a GPU reset applies it)"),
        ("row-remap-failure.xml", f"GPU 0 ({BUS}) failed to remap a row"),
        ("retirement-pending.xml", f"GPU 0 ({BUS}) has pages pending retirement (a GPU reset retires them)"),
        ("pcie-gen3.xml", f"GPU 0 ({BUS}) PCIe link reaches gen 3, expected gen 5"),
        ("pcie-x8.xml", f"GPU 0 ({BUS}) PCIe link is x8 (at most x16), expected x16"),
        ("hw-slowdown.xml", f"GPU 0 ({BUS}) clocks slowed down: hw_slowdown active"),
        ("hw-thermal-slowdown.xml", f"GPU 0 ({BUS}) clocks slowed down: hw_thermal_slowdown active"),
        ("hw-power-brake.xml", f"GPU 0 ({BUS}) clocks slowed down: hw_power_brake_slowdown active"),
    ],
)
def test_each_fault_is_one_line(gpu_node, fixture, problem):
    gpu_node(FAULTS / fixture)
    assert faults() == [problem]
    results = hc.run_checks({"checks": {"gpu_faults": WANT}}, "/")
    assert hc.drain_reason("hal-health", results) == f"hal-health: gpu_faults: {problem}"[: hc.REASON_MAX]


def test_ecc_threshold_and_unchecked_values(gpu_node):
    gpu_node(FAULTS / "ecc-uncorrectable.xml")
    assert faults(dict(WANT, max_uncorrectable_ecc=2)) == []
    gpu_node(FAULTS / "pcie-gen3.xml")  # no PCIe link in the profile: not compared
    assert faults({k: v for k, v in WANT.items() if not k.startswith("pcie")}) == []
    gpu_node(FAULTS / "hw-slowdown.xml")
    assert faults(dict(WANT, throttle_reasons=["sw_power_cap"])) == []


def test_idle_gpu_downtrained_generation_passes(gpu_node, tmp_path):
    """An idle GPU's link drops to a lower generation to save power: only max_link_gen counts."""
    idle = tmp_path / "idle.xml"
    idle.write_text(HEALTHY.read_text().replace("<current_link_gen>5<", "<current_link_gen>1<"))
    gpu_node(idle)
    assert faults() == []


def test_clock_reasons_under_the_older_drivers_name(gpu_node, tmp_path):
    old = tmp_path / "throttle.xml"
    old.write_text((FAULTS / "hw-slowdown.xml").read_text().replace("clocks_event_reason", "clocks_throttle_reason"))
    gpu_node(old)
    assert faults() == [f"GPU 0 ({BUS}) clocks slowed down: hw_slowdown active"]


def test_lost_gpu_and_missing_gpus(gpu_node):
    gpu_node(xml_script=f"cat {FAULTS / 'nvidia-smi-gpu-lost.txt'} >&2; exit 15")
    assert faults() == ["GPU lost: Unable to determine the device handle for GPU0000:9A:00.0: Unknown Error"]
    gpu_node(xml_script="echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver'; exit 9")
    assert faults() == [
        "nvidia-smi -q -x failed (exit 9): NVIDIA-SMI has failed because it could not communicate "
        "with the NVIDIA driver"
    ]
    gpu_node(HEALTHY)
    assert faults(dict(WANT, count=2)) == ["1 GPUs answer nvidia-smi, expected 2"]


def test_inactive_nvlink_links_are_named(gpu_node):
    gpu_node(nvlink=FAULTS / "nvlink-status-inactive.txt")
    assert faults(dict(WANT, nvlink_links=[4])) == [
        f"GPU 0 ({BUS}) has 2 NVLink links active, expected 4 (inactive: link 1, 3)"
    ]
    assert faults(dict(WANT, nvlink_links=[2])) == []  # links the profile does not count may be down
    assert faults() == []  # no NVLink in the profile: nvlink --status is not asked


def test_xids_since_boot_name_the_gpu_by_bus_id(gpu_node):
    gpu_node(journal=(FAULTS / "journal-xid.txt").read_text())
    assert faults() == [
        f"GPU 0 ({BUS}) had Xid 63 (row remap or page retirement recorded) 2 times since boot",
        "GPU at PCI 0000:9a:00 had Xid 79 (fallen off the bus) 1 time since boot",
    ]
    assert faults(dict(WANT, xids=[13])) == [f"GPU 0 ({BUS}) had Xid 13 1 time since boot"]
    assert faults(dict(WANT, xids=[])) == []  # no XIDs listed: the kernel log is not read


def test_unreadable_kernel_log_is_a_problem(gpu_node, tmp_path):
    (tmp_path / "bin/journalctl").write_text("#!/bin/sh\necho 'No journal files were found.' >&2; exit 1\n")
    assert faults() == ["kernel log unreadable (journalctl exit 1): No journal files were found."]


def test_kernel_log_from_dmesg_without_journalctl(gpu_node, tmp_path, monkeypatch):
    """A node without journald (a minimal image, a microVM) has dmesg: the XIDs are read there."""
    bin_dir = tmp_path / "bin"
    (bin_dir / "journalctl").unlink()
    (bin_dir / "cat").symlink_to("/bin/cat")
    monkeypatch.setenv("PATH", str(bin_dir))  # neither the host's journalctl nor its dmesg
    dmesg = bin_dir / "dmesg"
    dmesg.write_text(f"#!/bin/sh\n[ $# = 0 ] || exit 2\ncat {FAULTS / 'journal-xid.txt'}\n")
    dmesg.chmod(0o755)
    assert faults(dict(WANT, xids=[79])) == ["GPU at PCI 0000:9a:00 had Xid 79 (fallen off the bus) 1 time since boot"]
    dmesg.write_text("#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1\n")
    assert faults() == [
        "kernel log unreadable (dmesg exit 1): dmesg: read kernel buffer failed: Operation not permitted"
    ]


# ---- the expectation the model renders --------------------------------------------------------------


def _with_gpus(hal_text: str, gpus_extra: str = "", faults_yaml: str = "") -> str:
    text = hal_text.replace(
        "      memory_gib: 16\n      devices:", f"      memory_gib: 16\n{gpus_extra}      devices:", 1
    )
    return text.replace("  memory_tolerance_pct: 5 ", faults_yaml + "  memory_tolerance_pct: 5 ", 1)


def test_rendered_expectation_has_the_thresholds(hal_text):
    text = _with_gpus(
        hal_text,
        "      pcie_generation: 3\n      pcie_width: 16\n",
        "  gpu_faults: {max_uncorrectable_ecc: 1, xids: [79, 48], throttle_reasons: [hw_slowdown]}\n",
    )
    exp = health.expectation(model := load_text(text, "hal.yml").model, model.nodes[-1])
    assert exp["checks"]["gpu_faults"] == {
        "count": 4,
        "max_uncorrectable_ecc": 1,
        "xids": [48, 79],
        "throttle_reasons": ["hw_slowdown"],
        "nvlink_links": [3, 3, 3, 3],
        "pcie_generation": 3,
        "pcie_width": 16,
    }
    assert list(exp["checks"]).index("gpu_faults") == list(exp["checks"]).index("gpu_model") + 1


def test_default_thresholds_without_pcie(hal_text):
    model = load_text(
        _with_gpus(hal_text, "      pcie_generation: 3\n", "  gpu_faults: {check_pcie: false}\n"), "hal.yml"
    ).model
    want = health.expectation(model, model.nodes[-1])["checks"]["gpu_faults"]
    assert want == {
        "count": 4,
        "max_uncorrectable_ecc": 0,
        "xids": sorted(DEFAULT_XIDS),
        "throttle_reasons": ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"],
        "nvlink_links": [3, 3, 3, 3],
    }


def test_no_gpus_no_gpu_faults_entry(hal_text):
    start = hal_text.index("    gpus:\n      type: v100")
    end = hal_text.index("    ib_adapters:", start)
    text = hal_text[:start] + hal_text[end:]
    text = text.replace("  memory_tolerance_pct: 5 ", "  checks: [cpus, gpu_faults]\n  memory_tolerance_pct: 5 ", 1)
    model = load_text(text, "hal.yml").model
    assert "gpu_faults" in model.health.checks
    exp = json.loads(health.render(model)["files/etc/hal-provision/health/compute.json"])
    assert sorted(exp["checks"]) == ["cpus"]


def test_nhc_conf_has_no_gpu_faults_line(files):
    conf = files["files/etc/nhc/nhc.conf"]
    assert "nvidia-smi" not in conf and "Xid" not in conf


def test_sandbox_fake_nvidia_smi_is_healthy(hal, gpu_node, tmp_path):
    """The sandbox runs gpu_faults on its fake nvidia-smi (role telegraf's fake-nvidia-smi, one
    recorded H100 per fake /dev/nvidiaN): its answers pass the sandbox's expectation."""
    from hal_provision.sandbox.derive import derive_sandbox

    fake = Path(__file__).resolve().parents[3] / "roles/telegraf/files/fake-nvidia-smi"
    sb = derive_sandbox(hal)
    assert "gpu_faults" not in sb.health.checks  # only a sandbox with monitoring has the fake
    want = health.expectation(hal, next(g for g in hal.nodes if g.name == "compute"))["checks"]["gpu_faults"]
    assert want["count"] == 4 and want["nvlink_links"] == [3, 3, 3, 3]
    wrapper = tmp_path / "bin/nvidia-smi"  # the fake, its records here and four /dev/nvidiaN
    wrapper.write_text(
        f"#!{__import__('sys').executable}\nimport glob\n"
        "glob.glob = lambda pattern: [f'/dev/nvidia{i}' for i in range(4)]\n"
        f"src = open({str(fake)!r}).read().replace('/usr/local/share/hal-sandbox/nvidia-smi', {str(HEALTHY.parent)!r})\n"
        f"exec(compile(src, {str(fake)!r}, 'exec'), {{'__name__': '__main__'}})\n"
    )
    assert hc.run_checks({"checks": {"gpu_faults": want}}, "/")["gpu_faults"] == []
    assert faults(dict(want, count=5)) == ["4 GPUs answer nvidia-smi, expected 5"]
    assert faults(dict(want, nvlink_links=[18, 18, 18, 19])) == [
        "GPU 3 (00000000:09:00.0) has 18 NVLink links active, expected 19"
    ]  # renumbered: minor 3, bus 09
