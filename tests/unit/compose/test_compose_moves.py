"""The moves playbooks/compose.yml makes (hal_provision.compose.moves), from the drivers' `list`
answers to a layout of the rendered composable.json, and the driver command lines."""

from __future__ import annotations

import pytest

from hal_provision.compose.moves import ComposeError, driver_argv, moves

CONFIG = {
    "active": "training",
    "pools": [
        {
            "name": "chassis1",
            "gpu_type": "v100",
            "count": 8,
            "hosts": ["hal01", "hal02"],
            "slots_per_host": 6,
            "driver": "sandbox",
            "driver_url": None,
        },
        {
            "name": "chassis2",
            "gpu_type": "a100",
            "count": 4,
            "hosts": ["hal02", "hal03"],
            "slots_per_host": 4,
            "driver": "rest",
            "driver_url": "https://fm.example/api",
        },
    ],
    "layouts": {"even": {"hal01": 4, "hal02": 4, "hal03": 2}, "training": {"hal01": 6, "hal02": 2, "hal03": 4}},
}


def listed(c1: dict, c2: dict) -> list[dict]:
    return [
        {"pool": "chassis2", "gpu_type": "a100", "total": 4, "hosts": c2, "free": 4 - sum(c2.values())},
        {"pool": "chassis1", "gpu_type": "v100", "total": 8, "hosts": c1, "free": 8 - sum(c1.values())},
    ]


@pytest.mark.parametrize(
    "c1, c2, layout, hosts, steps",
    [
        # even -> training: hal02 gives two to hal01 (detach first), hal03 takes two more from chassis2;
        # hal02 is cabled to chassis2 too but takes from its first pool, chassis1.
        (
            {"hal01": 4, "hal02": 4},
            {"hal02": 0, "hal03": 2},
            "training",
            ["hal01", "hal02", "hal03"],
            [
                ("detach", "chassis1", "hal02", 2),
                ("attach", "chassis1", "hal01", 2),
                ("attach", "chassis2", "hal03", 2),
            ],
        ),
        # already in place: nothing moves
        ({"hal01": 6, "hal02": 2}, {"hal02": 0, "hal03": 4}, "training", [], []),
        # a run stopped after its detach: only the attach is left
        (
            {"hal01": 4, "hal02": 2},
            {"hal02": 0, "hal03": 4},
            "training",
            ["hal01"],
            [("attach", "chassis1", "hal01", 2)],
        ),
        # back to even
        (
            {"hal01": 6, "hal02": 2},
            {"hal02": 0, "hal03": 4},
            "even",
            ["hal01", "hal02", "hal03"],
            [
                ("detach", "chassis1", "hal01", 2),
                ("detach", "chassis2", "hal03", 2),
                ("attach", "chassis1", "hal02", 2),
            ],
        ),
    ],
)
def test_moves_from_the_deployed_counts(c1, c2, layout, hosts, steps):
    got = moves(CONFIG, layout, listed(c1, c2))
    assert got["hosts"] == hosts
    assert [(s["action"], s["pool"], s["host"], s["count"]) for s in got["steps"]] == steps


@pytest.mark.parametrize(
    "layout, answers, message",
    [
        ("nope", listed({}, {}), "layout 'nope' is not in composable.json (its layouts: even, training)"),
        ("even", listed({}, {})[:1], "no `list` answer for pool chassis1"),
    ],
)
def test_what_does_not_fit_is_named(layout, answers, message):
    with pytest.raises(ComposeError) as e:
        moves(CONFIG, layout, answers)
    assert str(e.value) == message


def test_driver_argv_per_driver():
    sandbox, rest = CONFIG["pools"]
    base = ["/py", "-m", "hal_provision.compose.driver", "--driver"]
    assert driver_argv(sandbox, "/py", "/r/files/etc/hal-provision/composable.json", "/w/compose-state/") == [
        *base,
        "sandbox",
        "--pool",
        "chassis1",
        "--config",
        "/r/files/etc/hal-provision/composable.json",
        "--state",
        "/w/compose-state/chassis1.json",
    ]
    assert driver_argv(rest, "/py", "/c.json", "/s") == [
        *base,
        "rest",
        "--pool",
        "chassis2",
        "--url",
        "https://fm.example/api",
    ]
    site = {**rest, "driver": "/opt/site/compose", "driver_url": None}
    assert driver_argv(site, "/py", "/c.json", "/s") == [*base, "/opt/site/compose", "--pool", "chassis2"]
