"""The infiniband health check on today's GPU nodes: several single-port adapters, each checked
on its own device for state and rate, as the model's hardware profile names them
(HardwareProfile.ib_ports). The node is examples/ailab.yml's rail-optimised HGX H100 (eight
single-port NDR ConnectX-7, one per rail); its sysfs is written here as the mlx5 driver lays it
out (/sys/class/infiniband/mlx5_N/ports/1/{state,rate}), with the values ibstat and sysfs show
on such a node ("4: ACTIVE", "400 Gb/sec (4X NDR)").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hal_provision.loader import load
from hal_provision.node.health import healthcheck as hc
from hal_provision.render import health

AILAB = Path(__file__).resolve().parents[3] / "examples" / "ailab.yml"


@pytest.fixture(scope="module")
def gpu_expectation():
    model = load(AILAB).model
    group = next(g for g in model.nodes if g.name == "gpu")
    return health.expectation(model, group)


def sysfs(root: Path, ports: dict[str, tuple[str, str]]) -> None:
    for device, (state, rate) in ports.items():
        port = root / "sys/class/infiniband" / device / "ports/1"
        port.mkdir(parents=True)
        (port / "state").write_text(f"{state}\n")
        (port / "rate").write_text(f"{rate}\n")


HEALTHY = {f"mlx5_{i}": ("4: ACTIVE", "400 Gb/sec (4X NDR)") for i in range(8)}


def infiniband(exp: dict, root: Path) -> list[str]:
    return hc.check_infiniband(exp["checks"]["infiniband"], str(root))


def test_the_expectation_names_each_adapter(gpu_expectation):
    assert gpu_expectation["checks"]["infiniband"]["ports"] == [
        {"device": f"mlx5_{i}", "port": 1, "rate_gbps": 400} for i in range(8)
    ]


def test_eight_active_adapters_pass(gpu_expectation, tmp_path):
    sysfs(tmp_path, HEALTHY)
    assert infiniband(gpu_expectation, tmp_path) == []


@pytest.mark.parametrize(
    ("device", "state", "problem"),
    [
        ("mlx5_5", ("1: DOWN", "10 Gb/sec (4X SDR)"), "mlx5_5 port 1 DOWN at 10 Gb/sec, expected ACTIVE at 400 Gb/s"),
        (
            "mlx5_2",
            ("4: ACTIVE", "200 Gb/sec (2X NDR)"),
            "mlx5_2 port 1 ACTIVE at 200 Gb/sec, expected ACTIVE at 400 Gb/s",
        ),
        ("mlx5_7", None, "mlx5_7 port 1 missing (no /sys/class/infiniband/mlx5_7/ports/1)"),
    ],
)
def test_the_one_adapter_down_slow_or_gone_is_named(gpu_expectation, tmp_path, device, state, problem):
    ports = dict(HEALTHY)
    if state is None:
        del ports[device]
    else:
        ports[device] = state
    sysfs(tmp_path, ports)
    assert infiniband(gpu_expectation, tmp_path) == [problem]
    results = {"infiniband": [problem]}
    assert hc.drain_reason("hal-health", results) == f"hal-health: infiniband: {problem}"


def test_another_adapters_port_does_not_stand_in(gpu_expectation, tmp_path):
    """Before: port 1 ACTIVE on any adapter passed every expected port 1 (and ports 2-8 were looked
    for on one adapter, so such a node failed). Now each device answers for itself."""
    ports = {"mlx5_0": HEALTHY["mlx5_0"]}
    sysfs(tmp_path, ports)
    problems = infiniband(gpu_expectation, tmp_path)
    assert [p.split()[0] for p in problems] == [f"mlx5_{i}" for i in range(1, 8)], problems


def test_an_expectation_of_port_numbers_alone_still_checks(tmp_path):
    """An expectation written before devices were named (a node not yet converged): port N on any device."""
    sysfs(tmp_path, {"mlx5_3": ("4: ACTIVE", "100 Gb/sec (4X EDR)")})
    assert hc.check_infiniband({"ports": [1], "rate_gbps": 100}, str(tmp_path)) == []
    assert hc.check_infiniband({"ports": [2], "rate_gbps": 100}, str(tmp_path)) == [
        "no port 2 ACTIVE at 100 Gb/s (no InfiniBand adapter)"
    ]


def test_nhc_checks_each_device(gpu_expectation):
    model = load(AILAB).model
    conf = health.nhc_conf(model, {"gpu": gpu_expectation})
    for i in range(8):
        assert f"|| check_hw_ib 400 mlx5_{i}\n" in conf
