"""Composable GPUs: the model, its checks (a table, as an edit of the embedded HAL
description with a pool added) and what is rendered for each layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hal_provision.findings import Level
from hal_provision.loader import load, load_text
from hal_provision.render import render_all
from hal_provision.model import Layout
from hal_provision.render.composable import COMPOSABLE, LAYOUTS
from hal_provision.render.portal import catalogue as portal_catalogue
from hal_provision.render.swsuite import table as swsuite_table

from tests.conftest import HAL_TEXT, _apply

E, W = Level.error, Level.warning
CASE = Path(__file__).resolve().parents[2] / "data" / "clusters" / "x86-composable.yml"

# HAL's hal01 and hal02 (4 V100 of their own each) cabled to a chassis of 8 more V100s.
POOL = """
composable:
  pools:
    - name: chassis1
      gpus: {type: v100, model: "NVIDIA Tesla V100-SXM2-16GB", memory_gib: 16, count: 8}
      hosts: "hal[01-02]"
      slots_per_host: 6
      socket: 1
  layouts:
    - name: even
      gpus: {"hal[01-02]": 4}
    - name: training
      gpus: {hal01: 6, hal02: 2}
  active: even
"""
ROWS_START = [lambda text: text + POOL]
SECOND_POOL = (
    "  layouts:\n",
    "    - name: chassis2\n"
    '      gpus: {type: v100, model: "NVIDIA Tesla V100-SXM2-16GB", memory_gib: 16, count: 4}\n'
    "      hosts: HOSTS\n      slots_per_host: 4\n  layouts:\n",
)


def second_pool(hosts: str, name: str = "chassis2"):
    old, new = SECOND_POOL
    return old, new.replace("HOSTS", hosts).replace("chassis2", name)


GPUX10 = (
    "    - {name: cpun1,",
    "    - {name: gpux10, kind: gpu, partition: gpu, gpus: 10, mem_per_cpu_mib: 1200, "
    "max_time_hours: 24}\n    - {name: cpun1,",
)

ROWS = [
    (
        "pool-name-twice",
        [second_pool("hal03", "chassis1")],
        E,
        "composable.pools[1].name",
        "pool name 'chassis1' is already used by composable.pools[0]",
    ),
    (
        "layout-name-twice",
        [("    - name: training\n", "    - name: even\n")],
        E,
        "composable.layouts[1].name",
        "layout name 'even' is already used",
    ),
    (
        "active-unknown",
        [("  active: even\n", "  active: evn\n")],
        E,
        "composable.active",
        "no layout is named 'evn'; did you mean 'even'?",
    ),
    (
        "rest-without-url",
        [("      socket: 1\n", "      socket: 1\n      driver: rest\n")],
        E,
        "composable.pools[0].driver_url",
        "uses the rest driver, which needs the base URL",
    ),
    (
        "driver-unknown",
        [("      socket: 1\n", "      socket: 1\n      driver: liqid\n")],
        E,
        "composable.pools[0].driver",
        "'liqid' is not a driver",
    ),
    (
        "pool-host-unknown",
        [('      hosts: "hal[01-02]"\n', '      hosts: "hal[01-02],hal99"\n')],
        E,
        "composable.pools[0].hosts",
        "hal99 of pool 'chassis1' not in any node group",
    ),
    (
        "pool-host-not-compute",
        [('      hosts: "hal[01-02]"\n', '      hosts: "hal[01-02],hal-login"\n')],
        E,
        "composable.pools[0].hosts",
        "hal-login of pool 'chassis1' not compute nodes",
    ),
    (
        "host-in-two-pools",
        [second_pool("hal02")],
        E,
        "composable.pools[1].hosts",
        "hal02 is already cabled to pool 'chassis1'",
    ),
    (
        "socket-not-on-host",
        [("      socket: 1\n", "      socket: 2\n")],
        E,
        "composable.pools[0].socket",
        "socket 2 of pool 'chassis1': profile 'ac922' of hal01 has 2 socket(s)",
    ),
    (
        "pool-type-not-hosts",
        [("{type: v100, model", "{type: a100, model")],
        E,
        "composable.pools[0].gpus.type",
        "pool 'chassis1' holds a100 GPUs, profile 'ac922' of hal01 has v100 GPUs of its own",
    ),
    (
        "layout-host-not-cabled",
        [("{hal01: 6, hal02: 2}", "{hal01: 6, hal03: 2}")],
        E,
        "composable.layouts[1].gpus",
        "layout 'training': hal03 cabled to no pool",
    ),
    (
        "layout-above-slots",
        [("{hal01: 6, hal02: 2}", "{hal01: 7, hal02: 1}")],
        E,
        "composable.layouts[1].gpus",
        "layout 'training' gives hal01 7 GPUs of pool 'chassis1', which has 6 slots per host",
    ),
    (
        "pool-overcommitted",
        [('{"hal[01-02]": 4}', '{"hal[01-02]": 5}')],
        E,
        "composable.layouts[0].gpus",
        "layout 'even' takes 10 GPUs of pool 'chassis1' (hal01 5, hal02 5), which holds 8",
    ),
    # per node, not in total: `even` gives the partition 16 GPUs, but no node more than 8
    (
        "virtual-partition-unsatisfiable",
        [GPUX10],
        W,
        "composable.layouts[0]",
        "layout 'even' hides gpux10: no node of gpu has 10 GPUs in layout even",
    ),
]


@pytest.mark.parametrize(
    ("mutation", "level", "path", "message"), [pytest.param([*ROWS_START, *r[1]], *r[2:], id=r[0]) for r in ROWS]
)
def test_composable_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


def test_hal_with_a_pool_is_clean():
    loaded = load_text(_apply(HAL_TEXT, ROWS_START), "c.yml")
    assert loaded.model is not None
    assert not [f for f in loaded.findings if f.check.startswith("composable")], loaded.findings


@pytest.fixture(scope="module")
def case():
    loaded = load(CASE)
    assert loaded.model is not None and not [f for f in loaded.findings if f.level is E], loaded.findings
    return loaded.model


def test_composed_profile_follows_the_host_own_gpus():
    """HAL's hosts keep their 4 NVLinked V100s; pool GPUs come after them, on the pool's socket,
    without NVLink."""
    cluster = load_text(_apply(HAL_TEXT, ROWS_START), "c.yml").model.with_layout("training")
    p = cluster.host_profile("hal01")
    assert p.gpu_count == 10 and [d.socket for d in p.gpus.devices] == [0, 0, 1, 1] + [1] * 6
    assert len(p.gpus.nvlink) == 10 and p.gpus.nvlink[0][:2] == [0, 3] and p.gpus.nvlink[9] == [0] * 10
    assert cluster.host_profile("hal03").gpu_count == 4  # not cabled
    assert cluster.hardware["ac922"].gpu_count == 4  # the profile itself is unchanged


def test_composable_json(case):
    data = json.loads(render_all(case)[COMPOSABLE])
    assert data["active"] == "even"
    assert data["layouts"] == {"even": {"hal01": 4, "hal02": 4}, "training": {"hal01": 6, "hal02": 2}}
    assert data["pools"] == [
        {
            "name": "chassis1",
            "gpu_type": "v100",
            "count": 8,
            "hosts": ["hal01", "hal02"],
            "slots_per_host": 6,
            "driver": "sandbox",
            "driver_url": None,
        }
    ]


def node_lines(conf: str) -> list[str]:
    return [line for line in conf.splitlines() if line.startswith("NodeName=hal")]


@pytest.mark.parametrize(
    ("layout", "lines"),
    [
        ("even", ["NodeName=hal[01-02] ... Gres=gpu:v100:4 Features=pool_chassis1 State=UNKNOWN"]),
        (
            "training",
            [
                "NodeName=hal01 ... Gres=gpu:v100:6 Features=pool_chassis1 State=UNKNOWN",
                "NodeName=hal02 ... Gres=gpu:v100:2 Features=pool_chassis1 State=UNKNOWN",
            ],
        ),
    ],
)
def test_every_layout_renders_its_node_lines_and_gres(case, layout, lines):
    files = render_all(case)
    base = f"{LAYOUTS}/{layout}/etc"
    got = [
        f"{line.split()[0]} ... {' '.join(line.split()[-3:])}" for line in node_lines(files[f"{base}/slurm/slurm.conf"])
    ]
    assert got == lines
    gres = [line for line in files[f"{base}/slurm/gres.conf"].splitlines() if line.startswith("NodeName=")]
    counts = dict(case.composable.counts(case.composable.layout(layout)))
    for host, n in counts.items():
        mine = [line for line in gres if line.split()[0] in (f"NodeName={host}", "NodeName=hal[01-02]")]
        assert [line.split()[3] for line in mine] == [f"File=/dev/nvidia{i}" for i in range(n)]
        assert all(line.endswith("Cores=20-39") for line in mine)  # socket 1 of 2 x 20 cores


def test_the_main_tree_is_the_active_layout(case):
    files = render_all(case)
    for rel in ("slurm/slurm.conf", "slurm/gres.conf", "hal-provision/health/compute.json"):
        assert files[f"files/etc/{rel}"] == files[f"{LAYOUTS}/even/etc/{rel}"]
    training = render_all(case.with_layout("training"))
    for rel in ("slurm/slurm.conf", "slurm/gres.conf", "hal-provision/health/hosts/hal01.json"):
        assert training[f"files/etc/{rel}"] == files[f"{LAYOUTS}/training/etc/{rel}"]


def test_hosts_that_differ_get_their_own_health_expectation(case):
    files = render_all(case)
    health = sorted(p.split("files/etc/hal-provision/", 1)[1] for p in files if "/health/" in p)
    assert health == [
        "health/compute.json",
        "layouts/even/etc/hal-provision/health/compute.json",
        "layouts/training/etc/hal-provision/health/hosts/hal01.json",
        "layouts/training/etc/hal-provision/health/hosts/hal02.json",
    ]
    for host, n in (("hal01", 6), ("hal02", 2)):
        exp = json.loads(files[f"{LAYOUTS}/training/etc/hal-provision/health/hosts/{host}.json"])
        assert exp["hosts"] == host and exp["group"] == "compute"
        assert exp["checks"]["gpus"]["files"] == [f"/dev/nvidia{i}" for i in range(n)]
        assert exp["checks"]["gpu_model"]["count"] == n
    nhc = render_all(case.with_layout("training"))["files/etc/nhc/nhc.conf"]
    assert (
        "{hal01} || check_file_test -c -r -w /dev/nvidia5" in nhc and "/dev/nvidia2" not in nhc.split("{hal02}", 1)[1]
    )


def test_inventory_gives_each_composed_host_its_gpu_devices(case):
    import yaml

    for layout, want in (("even", {"hal01": 4, "hal02": 4}), ("training", {"hal01": 6, "hal02": 2})):
        inv = yaml.safe_load(render_all(case.with_layout(layout))["inventory/hosts.yml"])
        hosts = inv["all"]["children"]["pool_chassis1"]["hosts"]
        assert {h: len(v["hal_hardware"]["gpu_devices"]) for h, v in hosts.items()} == want
        assert all(v["hal_hardware"]["gpu_type"] == "v100" for v in hosts.values())


# ---- virtual partitions follow the active layout ------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "shown", "hidden"),
    [
        (
            "even",
            ["gpux1", "gpux4", "gpux8", "cpun1"],
            {
                "gpux6": "gpux6: no node of gpu has 6 GPUs in layout even (the most is 4, and jobs span nodes only as "
                "whole nodes of 4)"
            },
        ),
        (
            "training",
            ["gpux1", "gpux4", "gpux6", "cpun1"],
            {
                "gpux8": "gpux8: no node of gpu has 8 GPUs in layout training (the most is 6, and jobs span nodes only as "
                "whole nodes of 6)"
            },
        ),
    ],
)
def test_the_wrapper_suite_follows_the_active_layout(case, layout, shown, hidden):
    view = case.with_layout(layout)
    assert view.hidden_virtual_partitions == hidden
    table = swsuite_table(view)
    assert list(table["virtual_partitions"]) == shown
    assert table["_hidden"] == list(hidden.values())
    # the table swrun reads gives the composed node: the layout's largest build, with pool GPUs
    node = table["virtual_partitions"]["gpux4"]["node"]
    assert (node["gpu_type"], len(node["gpu_sockets"])) == ("v100", {"even": 4, "training": 6}[layout])


def test_a_multi_node_partition_needs_enough_nodes_of_the_largest_build(case):
    """gpux8 on `even` is two nodes of 4; with one host at 4 and the other at 3 it is not."""
    comp = case.composable.model_copy(
        update={"layouts": [*case.composable.layouts, Layout(name="uneven", gpus={"hal01": 4, "hal02": 3})]}
    )
    view = case.model_copy(update={"composable": comp}).with_layout("uneven")
    assert view.hidden_virtual_partitions["gpux8"] == "gpux8: needs 2 nodes of gpu with 4 GPUs, layout uneven gives 1"


def test_a_cpu_job_spans_every_node_whatever_pool_gpus_each_holds(case):
    """On `training` hal01 (6 GPUs) and hal02 (2) are two builds; a two-node CPU job (cpun2)
    still has both nodes of the profile, in the checks and in the table swrun reads."""
    vps = [
        *case.swsuite.virtual_partitions,
        case.swsuite.virtual_partitions[-1].model_copy(update={"name": "cpun2", "nodes": 2}),
    ]
    view = case.model_copy(update={"swsuite": case.swsuite.model_copy(update={"virtual_partitions": vps})})
    view = view.with_layout("training")
    assert view.partition_build("gpu").count == 2 and view.partition_build("gpu").profile.gpu_count == 6
    assert swsuite_table(view)["virtual_partitions"]["cpun2"]["node"]["count"] == 2
    from hal_provision.checks import run_all

    assert not [f for f in run_all(view) if f.level is E], [f for f in run_all(view) if f.level is E]


def test_a_cluster_without_composable_hides_nothing():
    loaded = load_text(HAL_TEXT, "c.yml")
    assert loaded.model.hidden_virtual_partitions == {}
    assert "_hidden" not in swsuite_table(loaded.model)
    assert "_hidden" not in portal_catalogue(loaded.model)


@pytest.mark.parametrize(
    ("layout", "offered", "hidden"),
    [
        (
            "even",
            ["gpux1", "gpux2", "gpux4", "cpun1"],
            [
                "jupyter gpux10: no node of gpu has 10 GPUs in layout even (the most is 8, and jobs span nodes only as "
                "whole nodes of 8)"
            ],
        ),
        ("training", ["gpux1", "gpux2", "gpux4", "cpun1", "gpux10"], []),
    ],
)
def test_the_portal_follows_the_active_layout(layout, offered, hidden):
    """HAL with the pool and a gpux10 the jupyter app offers: hal01's 10 GPUs in `training` only."""
    text = _apply(
        HAL_TEXT,
        [
            *ROWS_START,
            GPUX10,
            (
                "modules: [jupyter],\n       virtual_partitions: [gpux1, gpux2, gpux4, cpun1], max_hours: 24}\n    - {name: jupyterlab",
                "modules: [jupyter],\n       virtual_partitions: [gpux1, gpux2, gpux4, cpun1, gpux10], max_hours: 24}\n"
                "    - {name: jupyterlab",
            ),
        ],
    )
    loaded = load_text(text, "c.yml")
    assert loaded.model is not None, loaded.findings
    cat = portal_catalogue(loaded.model.with_layout(layout))
    app = next(a for a in cat["apps"] if a["name"] == "jupyter")
    assert list(app["virtual_partitions"]) == offered
    assert cat.get("_hidden", []) == hidden
