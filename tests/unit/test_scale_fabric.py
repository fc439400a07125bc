"""The compact fabric: one switch entry for many alike switches (`names: leaf[01-56]`), one link
entry cabling many hosts over many switches (`switches:` with `hosts_per_switch:`).

Each structural mistake and each check has a row (an edit of the embedded HAL description with
its fabric rewritten compactly); the compact and explicit forms of one fabric render the same
bytes; the hostlist helpers the renderers use for it agree with ClusterShell.
"""

from __future__ import annotations

import random

import pytest
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from hal_provision.findings import Level
from hal_provision.hostlist import chunks, expand, fold
from hal_provision.loader import load_text
from hal_provision.render import render_all

E, W = Level.error, Level.warning
TOPOLOGY = "files/etc/slurm/topology.conf"

HAL_FABRIC = """\
  switches:
    # [assumed] one 36-port EDR switch; the paper does not describe the switch layout.
    - name: ib-sw1
      tier: leaf
      ports: 36
      model: Mellanox SB7800
  links:
    # [assumed] port 1 of every ConnectX-5 is cabled; port 2 is left unwired.
    - {hosts: "hal[01-16]", port: 1, switch: ib-sw1, first_switch_port: 1}
    - {hosts: hal-login, port: 1, switch: ib-sw1, first_switch_port: 17}
    - {hosts: hal-data, port: 1, switch: ib-sw1, first_switch_port: 18}
    - {hosts: hal-dtn, port: 1, switch: ib-sw1, first_switch_port: 19}
    - {hosts: hal-dev, port: 1, switch: ib-sw1, first_switch_port: 20}
"""

# HAL's nodes on a spine and two leaves, compactly: leaf1 takes hal[01-08] and the service
# nodes, leaf2 hal[09-16].
SPINE = "    - {name: ib-spine, tier: spine, ports: 36}\n"
LEAVES = '    - {names: "ib-leaf[1-2]", tier: leaf, ports: 36, uplinks: [ib-spine], model: Mellanox SB7800}\n'
COMPUTE = '    - {hosts: "hal[01-16]", port: 1, switches: "ib-leaf[1-2]", hosts_per_switch: 8, first_switch_port: 1}\n'
SERVICE = '    - {hosts: "hal-login,hal-data,hal-dtn,hal-dev", port: 1, switch: ib-leaf1, first_switch_port: 17}\n'
COMPACT = f"  switches:\n{SPINE}{LEAVES}  links:\n{COMPUTE}{SERVICE}"

# The same fabric, one entry per switch and per link.
EXPLICIT = (
    "  switches:\n"
    + SPINE
    + "    - {name: ib-leaf1, tier: leaf, ports: 36, uplinks: [ib-spine], model: Mellanox SB7800}\n"
    + "    - {name: ib-leaf2, tier: leaf, ports: 36, uplinks: [ib-spine], model: Mellanox SB7800}\n"
    + "  links:\n"
    + '    - {hosts: "hal[01-08]", port: 1, switch: ib-leaf1, first_switch_port: 1}\n'
    + '    - {hosts: "hal[09-16]", port: 1, switch: ib-leaf2, first_switch_port: 1}\n'
    + SERVICE
)


def compact(text: str) -> str:
    assert text.count(HAL_FABRIC) == 1, "the embedded description's fabric changed: update HAL_FABRIC"
    return text.replace(HAL_FABRIC, COMPACT)


def explicit(text: str) -> str:
    return text.replace(HAL_FABRIC, EXPLICIT)


# ---- the model: what pydantic refuses ------------------------------------------------------

STRUCTURE = [
    (
        "name-and-names",
        (LEAVES, LEAVES.replace("{names:", "{name: ib-leaf0, names:")),
        "fabric.switches[1]",
        "give either `name` (one switch) or `names` (several, as a hostlist expression), not both",
    ),
    (
        "neither-name-nor-names",
        (SPINE, "    - {tier: spine, ports: 36}\n"),
        "fabric.switches[0]",
        "give either `name` (one switch) or `names`",
    ),
    (
        "names-not-switch-names",
        ('names: "ib-leaf[1-2]"', 'names: "ib.leaf[1-2]"'),
        "fabric.switches[1]",
        "names switch 'ib.leaf1' is not a valid name",
    ),
    (
        "names-not-a-hostlist",
        ('names: "ib-leaf[1-2]"', 'names: "ib-leaf[1-2"'),
        "fabric.switches[1].names",
        "not a valid hostlist expression",
    ),
    (
        "switch-and-switches",
        ('switches: "ib-leaf[1-2]", hosts', 'switch: ib-leaf1, switches: "ib-leaf[1-2]", hosts'),
        "fabric.links[0]",
        "give either `switch` (one switch) or `switches` (several, as a hostlist expression), not both",
    ),
    (
        "switches-without-hosts-per-switch",
        (", hosts_per_switch: 8", ""),
        "fabric.links[0]",
        "`switches` needs `hosts_per_switch`",
    ),
    (
        "hosts-per-switch-with-one-switch",
        ("switch: ib-leaf1, first_switch_port: 17", "switch: ib-leaf1, hosts_per_switch: 4, first_switch_port: 17"),
        "fabric.links[1]",
        "`hosts_per_switch` goes with `switches`",
    ),
    (
        "hosts-per-switch-zero",
        ("hosts_per_switch: 8", "hosts_per_switch: 0"),
        "fabric.links[0].hosts_per_switch",
        "greater than or equal to 1",
    ),
]


@pytest.mark.parametrize(("edit", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in STRUCTURE])
def test_structural_mistake_is_refused_and_located(hal_text, edit, path, message):
    old, new = edit
    text = compact(hal_text)
    assert text.count(old) == 1
    loaded = load_text(text.replace(old, new), "c.yml")
    assert loaded.model is None
    matching = [f for f in loaded.findings if f.dotted == path and message in f.message]
    assert matching, "\n".join(f.format() for f in loaded.findings)
    assert all(f.level is E and f.line for f in matching)


# ---- the checks: one row per mistake in a compact fabric -----------------------------------

ROWS_START = [compact]  # every row edits the compact fabric (test_check_tables.py applies it too)

EDGE = '    - {names: "ib-edge[1-2]", tier: leaf, ports: 36, uplinks: [ib-leaf1]}\n'

ROWS = [
    (
        "names-twice",
        [(LEAVES, LEAVES + LEAVES.replace("tier: leaf", "tier: spine"))],
        E,
        "fabric.switches[2].names",
        "switch names ib-leaf[1-2] are already used by fabric.switches[1]; topology.conf names each once",
    ),
    (
        "name-inside-names",
        [(SPINE, SPINE + "    - {name: ib-leaf2, tier: leaf, ports: 36}\n")],
        E,
        "fabric.switches[2].names",
        "switch name 'ib-leaf2' is already used by fabric.switches[1]",
    ),
    (
        "uplink-to-a-sibling-itself",
        [("uplinks: [ib-spine]", "uplinks: [ib-leaf1]")],
        E,
        "fabric.switches[1].uplinks[0]",
        "switch 'ib-leaf1' cannot uplink to itself",
    ),
    (
        "uplink-unknown",
        [("uplinks: [ib-spine]", "uplinks: [ib-spin]")],
        E,
        "fabric.switches[1].uplinks[0]",
        "uplink to unknown switch 'ib-spin'; did you mean 'ib-spine'?",
    ),
    (
        "uplink-loop-through-names",
        [(SPINE, SPINE.replace("ports: 36}", "ports: 36, uplinks: [ib-leaf2]}"))],
        E,
        "fabric.switches[0].uplinks",
        "uplinks form a loop: ib-spine -> ib-leaf2 -> ib-spine",
    ),
    (
        "link-to-unknown-switches",
        [('switches: "ib-leaf[1-2]", hosts_per_switch: 8', 'switches: "ib-leaf[1-4]", hosts_per_switch: 4')],
        E,
        "fabric.links[0].switches",
        "link to unknown switches ib-leaf[3-4] (2 switches)",
    ),
    (
        "too-few-switches",
        [("hosts_per_switch: 8", "hosts_per_switch: 7")],
        E,
        "fabric.links[0].switches",
        "16 hosts at 7 per switch take 3 switches, but 'ib-leaf[1-2]' names 2; the last 2 hosts would have no switch",
    ),
    (
        "too-many-switches",
        [("hosts_per_switch: 8", "hosts_per_switch: 16")],
        E,
        "fabric.links[0].switches",
        "16 hosts at 16 per switch take 1 switch; switch 'ib-leaf2' would get no host",
    ),
    (
        "switch-ports-beyond-count",
        [("tier: leaf, ports: 36", "tier: leaf, ports: 6")],
        E,
        "fabric.links[0].first_switch_port",
        "cabling 8 hosts from port 1 takes ports 1-8, but switches ib-leaf[1-2] (2 switches) have 6 ports; "
        "lower hosts_per_switch",
    ),
    (
        "switch-ports-twice",
        [
            (
                SERVICE,
                SERVICE
                + COMPUTE.replace("port: 1,", "port: 2,").replace("first_switch_port: 1}", "first_switch_port: 5}"),
            )
        ],
        E,
        "fabric.links[2].first_switch_port",
        "ports 5-8 of switches ib-leaf[1-2] (2 switches) already cabled by fabric.links[0]",
    ),
    (
        "switch-port-twice-on-one-of-them",
        [
            (
                SERVICE,
                SERVICE.replace("switch: ib-leaf1", "switch: ib-leaf2").replace(
                    "first_switch_port: 17", "first_switch_port: 8"
                ),
            )
        ],
        E,
        "fabric.links[1].first_switch_port",
        "port 8 of switch 'ib-leaf2' already cabled by fabric.links[0]",
    ),
    (
        "node-port-twice",
        [(SERVICE, SERVICE + COMPUTE.replace("first_switch_port: 1}", "first_switch_port: 21}"))],
        E,
        "fabric.links[2].hosts",
        "port 1 of hal[01-16] (16 hosts) already cabled by fabric.links[0]",
    ),
    (
        "node-port-beyond-adapter",
        [('{hosts: "hal[01-16]", port: 1, switches', '{hosts: "hal[01-16]", port: 3, switches')],
        E,
        "fabric.links[0].port",
        "port 3 of hal[01-16] (16 hosts): hardware 'ac922' has only 2 InfiniBand ports",
    ),
    (
        "link-device-unknown",
        [('{hosts: "hal[01-16]", port: 1, switches', '{hosts: "hal[01-16]", device: mlx5_2, switches')],
        E,
        "fabric.links[0].device",
        "hardware 'ac922' has no InfiniBand port mlx5_2 (its ports: mlx5_0:1, mlx5_1:1)",
    ),
    (
        "link-unknown-hosts",
        [
            ('{hosts: "hal[01-16]", port: 1, switches', '{hosts: "hal[01-17]", port: 1, switches'),
            ("hosts_per_switch: 8", "hosts_per_switch: 9"),
        ],
        E,
        "fabric.links[0].hosts",
        "hal17 not in any node group",
    ),
    (
        "nodes-on-a-switch-with-children",
        [(LEAVES, LEAVES + EDGE)],
        E,
        "fabric.switches[1].names",
        "switch 'ib-leaf1' has compute nodes hal[01-08] (8 hosts) and child switches ib-edge1, ib-edge2",
    ),
    (
        "compute-off-fabric",
        [('{hosts: "hal[01-16]", port: 1, switches', '{hosts: "hal[01-15]", port: 1, switches')],
        W,
        "nodes[6].hosts",
        "fabric 'hal-edr' has no cable to compute nodes hal16",
    ),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_in_a_compact_fabric_is_found(finds, mutation, level, path, message):
    finds([*ROWS_START, *mutation], level, path, message)


def test_every_fabric_check_has_a_compact_row(hal_text):
    from hal_provision.checks import REGISTRY, run_all

    found = set()
    for _name, mutation, level, path, message in ROWS:
        text = compact(hal_text)
        for old, new in mutation:
            text = text.replace(old, new)
        found |= {f.check for f in run_all(load_text(text, "c.yml").model) if f.dotted == path and message in f.message}
    assert found == {name for name, fn in REGISTRY.items() if fn.__module__.endswith("checks.fabric")}


def test_compact_fabric_is_valid_as_written(check_file, hal_text):
    for text in (compact(hal_text), explicit(hal_text)):
        _file, loaded = check_file(text)
        assert loaded.model is not None and not [f for f in loaded.findings if f.level is not Level.info], "\n".join(
            f.format() for f in loaded.findings
        )


def test_finding_in_a_compact_entry_points_at_its_line(check_file, hal_text, position):
    text = compact(hal_text).replace("hosts_per_switch: 8", "hosts_per_switch: 16")
    file, loaded = check_file(text)
    [finding] = [f for f in loaded.findings if f.dotted == "fabric.links[0].switches"]
    assert (finding.file, finding.line, finding.column) == (
        str(file),
        *position(text, "hosts_per_switch: 16", "switches:"),
    )


def test_segments_give_each_switch_its_share():
    from hal_provision.model import FabricLink

    link = FabricLink(hosts="n[1-10]", switches="sw[1-3]", hosts_per_switch=4, first_switch_port=3)
    assert link.segments() == [("sw1", 0, 4), ("sw2", 4, 4), ("sw3", 8, 2)]
    assert FabricLink(hosts="n[1-10]", switch="sw1", first_switch_port=1).segments() == [("sw1", 0, 10)]
    # a switch beyond the hosts gets no segment (a check reports it)
    assert [
        s[0] for s in FabricLink(hosts="n[1-4]", switches="sw[1-3]", hosts_per_switch=4, first_switch_port=1).segments()
    ] == ["sw1"]


# ---- rendering: the compact form means exactly the explicit one ---------------------------


def test_compact_and_explicit_hal_fabric_render_the_same_tree(hal_text):
    compact_files = render_all(load_text(compact(hal_text), "c.yml").model)
    explicit_files = render_all(load_text(explicit(hal_text), "e.yml").model)
    assert compact_files[TOPOLOGY] == explicit_files[TOPOLOGY]
    assert compact_files[TOPOLOGY].splitlines()[3:] == [
        "SwitchName=ib-spine Switches=ib-leaf[1-2]",
        "SwitchName=ib-leaf1 Nodes=hal[01-08]",
        "SwitchName=ib-leaf2 Nodes=hal[09-16]",
    ]
    assert compact_files == explicit_files


@pytest.mark.parametrize("n", [16, 1_000, 2_500])
def test_scale_bench_fabric_compact_and_explicit_render_byte_identical(tmp_path, scale, n):
    """The bench's fat tree (spines and leaves per scalable unit, two cores) both ways: the
    compact model is a few entries per unit and means the same topology.conf, byte for byte."""
    compact_model = load_text(scale.write_model(n, tmp_path).read_text(), "c.yml")
    explicit_model = load_text(scale.write_model(n, tmp_path, explicit_fabric=True).read_text(), "e.yml")
    assert len(compact_model.model.fabric.links) < len(explicit_model.model.fabric.links) or n < 100
    compact_files = render_all(compact_model.model)
    explicit_files = render_all(explicit_model.model)
    assert compact_files[TOPOLOGY] == explicit_files[TOPOLOGY]
    assert compact_files == explicit_files


# ---- hostlist helpers: exactly ClusterShell's folding -----------------------------------------


def _clustershell_fold(names) -> str:
    return str(NodeSet.fromlist(list(names), resolver=RESOLVER_NOGROUP))


@pytest.mark.parametrize(
    "expr",
    [
        "hal[8-12]",
        "hal[1-100]",
        "hal[001-100]",
        "n[0-9]-ib",
        "a[1-3],b[5-9],c7",
        "hal[01-16]",
        "x5",
        "hal[098-101]",
        "r[1-2]n[1-4]",
        "hal[000001-001000]",
        # digits outside the brackets: dimensions of one value, or part of the range
        "gpu-su001-leaf[01-56]",
        "r1n[1-3]",
        "h[8-12]1",
        "a1b[08-11]c2",
        "x9[1-10]",
        "s0[00-10]",
    ],
)
@pytest.mark.parametrize("size", [1, 3, 7, 18, 2000])
def test_expand_and_chunks_list_and_fold_like_clustershell(expr, size):
    hosts = list(NodeSet(expr, resolver=RESOLVER_NOGROUP))
    assert expand(expr) == hosts
    assert chunks(expr, size) == [_clustershell_fold(hosts[i : i + size]) for i in range(0, len(hosts), size)]


def test_fold_of_names_differing_in_their_last_number_is_clustershells():
    rng = random.Random(16)
    cases = [
        expand("gpu-su001-leaf[01-56]"),
        ["core1", "core2"],
        ["a9", "a10"],
        ["hal01", "hal01"],
        ["r1n1", "r2n1"],
        ["gpu-su001-spine1", "gpu-su002-spine1"],
        ["x_1", "x_3"],
        ["h1-ib", "h2-ib"],
        ["abc"],
        ["n-1", "n-2"],
    ]
    for _ in range(200):
        width = rng.choice([1, 2, 3])
        numbers = rng.sample(range(10**width), min(10**width, rng.randint(1, 12)))
        prefix, suffix = rng.choice(["hal", "gpu-su001-leaf", "x_", "a1b"]), rng.choice(["", "-ib"])
        cases.append([f"{prefix}{n:0{width}d}{suffix}" for n in numbers])
    for names in cases:
        assert fold(names) == _clustershell_fold(names), names


@pytest.mark.parametrize(
    "expr",
    [
        "hal[000001-075000],halc[000001-025000]",
        "ddn1-a,ddn1-b,hal[00001-07500],halc[00001-02500],hal-dev",
        "hal[01-16],hal-login",
        "hal[01-03,05],x[1-2]",
        "hal[01-16],hal[08-20]",
        "n[1-4],r[1-2]n[1-2]",
        "hal[1-3]-ib,hal[2-5]-ib",
        "x[01-05],x[1-3]",
        "hal[01-16],hal16",
        "hal[9-11],hal[010-012]",
        "n[1-20],n[001-003]",
        "a[0-9],a[10-12]",
        "h[01-04,07,09-10]",
    ],
)
def test_lists_of_ranges_parse_expand_and_fold_as_clustershell_does(expr):
    from hal_provision.hostlist import nodeset

    ours, theirs = nodeset(expr), NodeSet(expr, resolver=RESOLVER_NOGROUP)
    assert (str(ours), len(ours), list(ours)) == (str(theirs), len(theirs), list(theirs))
    assert (fold(ours), expand(expr)) == (str(theirs), list(theirs))


def _random_hostlists(rng: random.Random) -> list[str]:
    """A few hostlist expressions of the shapes models use: ranges, numbered and plain names,
    some padded, some of other shapes (several dimensions, lists in brackets)."""
    exprs = []
    for _ in range(rng.randint(1, 4)):
        pieces = []
        for _ in range(rng.randint(1, 3)):
            kind, width = rng.random(), rng.choice([0, 1, 2, 3])
            prefix, suffix = rng.choice(["hal", "n", "x-", "halc", "ddn"]), rng.choice(["", "", "-ib", "-a"])
            lo = rng.randint(0, 30)
            hi = min(lo + rng.randint(0, 20), 10**width - 1) if width else lo + rng.randint(0, 20)
            text = (lambda v: f"{v:0{width}d}") if width else str
            if kind < 0.15:
                pieces.append(rng.choice(["hal-login", "hal-dev", "ab", "hal", "n-ib"]))
            elif kind < 0.35:
                pieces.append(f"{prefix}{text(lo)}{suffix}")
            elif kind < 0.4:
                pieces.append(rng.choice(["r[1-2]n1", "hal[01-03,07]", "a1b2"]))
            else:
                pieces.append(f"{prefix}[{text(min(lo, hi))}-{text(hi)}]{suffix}")
        exprs.append(",".join(pieces))
    return exprs


def test_hostlists_fold_union_and_count_as_clustershell_does():
    """fold_hostlists, union_shared (from the text where it can), overlaps and common_count
    (on the index sets) against ClusterShell's own parse, union and intersection."""
    from hal_provision.hostlist import common_count, fold_hostlists, nodeset, overlaps, union_shared

    rng = random.Random(16)
    for _ in range(1500):
        exprs = _random_hostlists(rng)
        try:
            theirs = NodeSet(",".join(exprs), resolver=RESOLVER_NOGROUP)
        except Exception:  # a shape ClusterShell refuses (padding mismatch): not this test's
            continue
        assert fold_hostlists(exprs) == str(theirs), exprs
        shared = union_shared(exprs)
        assert (str(shared), list(shared)) == (str(theirs), list(theirs)), exprs
        for expr in exprs:
            assert expand(expr) == list(NodeSet(expr, resolver=RESOLVER_NOGROUP)), expr
        a, b = nodeset(exprs[0]), nodeset(exprs[-1])
        common = len(a.intersection(b))
        assert (common_count(a, b), overlaps(a, b)) == (common, bool(common)), exprs
        assert str(nodeset(exprs[0])) == str(NodeSet(exprs[0], resolver=RESOLVER_NOGROUP))  # shared, unchanged


@pytest.mark.parametrize(
    ("expr", "valid"),
    [
        ("hal[01-16]", True),
        ("hal01", True),
        ("hal-mgmt1,hal-mgmt2", True),
        ("hal[000001-075000],hal-login", True),
        ("gpu-su001-leaf[01-56]", True),
        ("hal[16-01]", False),
        ("hal[01-100]", False),
        ("hal[01-16", False),
        ("", False),
        (",", False),
        ("hal[]", False),
        ("hal[1-2],,x", False),
        ("@rack1", False),
    ],
)
def test_hostlists_are_checked_from_the_text_as_clustershell_parses_them(expr, valid):
    from hal_provision.hostlist import HostlistError, check

    if valid:
        check(expr)
    else:
        with pytest.raises(HostlistError):
            check(expr)
