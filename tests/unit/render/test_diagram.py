"""`hal-provision diagram`: the DOT source names what HAL's architecture figure shows (node groups
with count and hardware, networks, fabric, storage, services), Graphviz's real `dot` draws it in
reading order, and the command writes SVG and PNG files or says which package is missing."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from hal_provision.cli.diagram import diagram
from hal_provision.loader import load_text
from hal_provision.model import Storage, Switch
from hal_provision.render.diagram import MAX_SWITCHES, PATH, render
from hal_provision.loader import validate

TWOGEN_FILE = Path(__file__).resolve().parents[2] / "data" / "clusters" / "x86-twogen.yml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DOT = shutil.which("dot")
needs_dot = pytest.mark.skipif(DOT is None, reason="Graphviz's dot is not installed (Debian package graphviz)")

_ID = r'"(?:[^"\\]|\\.)*"|[A-Za-z_]\w*'
NODE = re.compile(rf"^\t*({_ID}) \[(.*)\]$")
EDGE = re.compile(rf"^\t*({_ID}) -> ({_ID})(?: \[(.*)\])?$")
LABEL = re.compile(r'label=("(?:[^"\\]|\\.)*"|[^ \]]+)')


def _unquote(text: str) -> str:
    return text[1:-1].replace('\\"', '"') if text.startswith('"') else text


@dataclass
class Dot:
    """The statements of a DOT source as the graphviz package writes them, one per line."""

    nodes: dict[str, str]  # node id -> its attributes, as written
    edges: list[tuple[str, str, str]]  # (tail, head, attributes)

    @classmethod
    def parse(cls, source: str) -> "Dot":
        nodes, edges = {}, []
        for line in source.splitlines():
            if match := EDGE.match(line):
                edges.append((_unquote(match[1]), _unquote(match[2]), match[3] or ""))
            elif match := NODE.match(line):
                nodes[_unquote(match[1])] = match[2]
        return cls(nodes, edges)

    def titled(self, title: str) -> str:
        """Id of the one node whose label starts with `title` in bold."""
        found = [node for node, attrs in self.nodes.items() if f"<B>{html.escape(title)}</B>" in attrs]
        assert len(found) == 1, f"{title!r} titles {found}"
        return found[0]

    def lines(self, node: str) -> list[str]:
        """The text of each cell of a node's HTML-like label, unescaped; a cell's wrapped lines
        joined by spaces."""
        label = re.search(r"label=<(<TABLE.*?</TABLE>)>", self.nodes[node])
        cells = re.findall(r"<TD[^>]*>(.*?)</TD>", label[1] if label else "")
        texts = [html.unescape(re.sub(r"<[^>]*>", "", cell.replace("<BR/>", " "))).strip() for cell in cells]
        return [text for text in texts if text]

    def visible_edges(self) -> dict[tuple[str, str], str]:
        """(tail, head) -> label of every edge drawn (invisible ordering edges left out)."""
        out = {}
        for tail, head, attrs in self.edges:
            if "style=invis" not in attrs:
                label = LABEL.search(attrs)
                out[(tail, head)] = _unquote(label[1]) if label else ""
        return out

    def cable(self, a: str, b: str) -> str | None:
        """Label of the edge between two nodes, drawn either way."""
        edges = self.visible_edges()
        return edges.get((a, b), edges.get((b, a)))


@pytest.fixture(scope="module")
def hal_dot(hal) -> Dot:
    return Dot.parse(render(hal)[PATH])


@pytest.fixture(scope="module")
def twogen_dot(twogen) -> Dot:
    return Dot.parse(render(twogen)[PATH])


SVG = "{http://www.w3.org/2000/svg}"


def svg_of(source: str) -> str:
    """The SVG the real `dot` draws from `source`, which must draw without a warning."""
    result = subprocess.run([DOT, "-Tsvg"], input=source, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.stdout


def texts(svg: str) -> list[str]:
    """Every text element of an SVG drawing (entities decoded)."""
    return ["".join(t.itertext()) for t in ET.fromstring(svg).iter(f"{SVG}text")]


def node_texts(svg: str) -> dict[str, list[str]]:
    """Node id -> the text elements drawn inside that node."""
    return {
        g.find(f"{SVG}title").text: ["".join(t.itertext()) for t in g.iter(f"{SVG}text")]
        for g in ET.fromstring(svg).iter(f"{SVG}g")
        if g.get("class") == "node"
    }


def svg_texts(source: str) -> list[str]:
    return texts(svg_of(source))


def plain_positions(source: str) -> dict[str, tuple[float, float]]:
    """Node id -> (x, y) of its centre as `dot -Tplain` lays it out (y grows upwards)."""
    result = subprocess.run([DOT, "-Tplain"], input=source, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    out = {}
    for line in result.stdout.splitlines():
        if line.startswith("node "):
            name, x, y = re.match(r'node ("(?:[^"\\]|\\.)*"|\S+) (\S+) (\S+)', line).groups()
            out[_unquote(name)] = (float(x), float(y))
    return out


# ---- the DOT source -------------------------------------------------------------------------
def test_one_dot_file_starting_with_the_generated_by_header(hal):
    files = render(hal)
    assert list(files) == ["diagram/cluster.dot"]
    first, second, third = files[PATH].splitlines()[:3]
    assert first == "// Generated by hal-provision from the description of cluster 'hal'."
    assert second == "// Do not edit: change cluster.yml and run `hal-provision render`."
    assert third == "digraph hal {"


def test_the_source_is_the_same_for_a_freshly_loaded_model(hal, hal_text):
    assert render(load_text(hal_text, "again.yml").model) == render(hal)


@pytest.mark.parametrize(
    "title,lines",
    [
        (
            "hal[01-16]",
            [
                "16 x IBM Power System AC922 8335-GTH",
                "2 x 20-core IBM POWER9 SMT4, 256 GiB",
                "4 x NVIDIA Tesla V100-SXM2-16GB (NVLink)",
                "Mellanox ConnectX-5 dual-port EDR, 2 x 100 Gb/s",
                "Slurm partitions: gpu (default)",
                "mgmt 172.22.1.1-16 | bmc 172.23.1.1-16 | ib 172.24.1.1-16",
            ],
        ),
        (
            "hal-dev",
            [
                "1 x IBM Power System AC922 8335-GTH",
                "4 x NVIDIA Tesla V100-SXM2-16GB (NVLink)",
                "test and development node",
            ],
        ),
        (
            "hal-login",
            [
                "1 x IBM Power System LC921",
                "2 x 16-core IBM POWER9 SMT4, 256 GiB",
                "mgmt 172.22.0.10 | bmc 172.23.0.10 | ib 172.24.0.10",
            ],
        ),
        ("hal-mgmt1", ["1 x IBM Power System LC921", "mgmt 172.22.0.2 | bmc 172.23.0.2"]),
        ("hal-mgmt2", ["1 x x86 1U server", "2 x 12-core x86_64 CPU SMT2, 192 GiB"]),
        ("hal-data", ["1 x IBM Power System LC922", "2 x 20-core IBM POWER9 SMT4, 256 GiB"]),
        ("hal-dtn", ["1 x x86 storage server, 36 drives", "2 x 16-core x86_64 CPU SMT2, 192 GiB"]),
    ],
)
def test_every_node_group_is_one_box_with_its_count_and_hardware(hal_dot, title, lines):
    box = hal_dot.lines(hal_dot.titled(title))
    assert [line for line in lines if line not in box] == [], box


def test_the_sixteen_compute_nodes_are_one_box_not_sixteen(hal, hal_dot):
    boxes = [node for node in hal_dot.nodes if node.startswith("group-")]
    assert len(boxes) == len(hal.nodes) == 7
    assert not any(re.search(r"\bhal(0[1-9]|1[0-6])\b", attrs) for attrs in hal_dot.nodes.values())


@pytest.mark.parametrize(
    "row",
    [
        ["mgmt (primary)", "Ethernet", "172.22.0.0/16", "22"],
        ["bmc", "BMC, out-of-band", "172.23.0.0/16", "22"],
        ["ib", "InfiniBand, IPoIB", "172.24.0.0/16", "20"],
    ],
)
def test_networks_are_listed_with_kind_cidr_and_host_count(hal_dot, row):
    lines = hal_dot.lines(hal_dot.titled("Networks"))
    start = lines.index(row[0])
    assert lines[start : start + 4] == row


def test_the_fabric_switch_and_which_groups_are_cabled_to_it(hal_dot):
    switch = hal_dot.titled("ib-sw1")
    assert hal_dot.lines(switch) == ["ib-sw1", "leaf, 36 ports", "Mellanox SB7800"]
    assert hal_dot.lines("fabric") == ["InfiniBand fabric hal-edr", "EDR 100 Gb/s", "IPoIB network ib 172.24.0.0/16"]
    cables = {
        title: hal_dot.cable(hal_dot.titled(title), switch)
        for title in ["hal[01-16]", "hal-login", "hal-data", "hal-dtn", "hal-dev", "hal-mgmt1", "hal-mgmt2"]
    }
    assert cables == {
        "hal[01-16]": "16 x 100 Gb/s",
        "hal-login": "1 x 100 Gb/s",
        "hal-data": "1 x 100 Gb/s",
        "hal-dtn": "1 x 100 Gb/s",
        "hal-dev": "1 x 100 Gb/s",
        "hal-mgmt1": None,
        "hal-mgmt2": None,
    }


def test_storage_arrays_file_systems_and_where_they_are_mounted(hal_dot):
    halfs = hal_dot.titled("halfs")
    assert hal_dot.lines(halfs) == [
        "halfs",
        "GPFS file system (Spectrum Scale 5.0.4)",
        "mounted at /home, 203.7 TiB",
        "on hal[01-16],hal-dev,hal-dtn,hal-login",
        "block size 1M, 2 x metadata, 1 x data",
    ]
    for array in ("ddn1", "ddn2"):
        node = hal_dot.titled(array)
        assert hal_dot.lines(node) == [
            array,
            "DDN GS400NVE",
            "101.9 TiB usable",
            f"servers: {array}-a (128 GiB), {array}-b (128 GiB)",
        ]
        assert hal_dot.cable(halfs, node) == "8 NSDs"
    misc = hal_dot.titled("misc")
    assert hal_dot.lines(misc) == [
        "misc",
        "NFS export",
        "hal-data:/export/sw",
        "mounted at /sw",
        "on hal[01-16],hal-login,hal-dev",
    ]
    assert hal_dot.cable(hal_dot.titled("hal-data"), misc) == "exports"
    assert hal_dot.cable(hal_dot.titled("ib-sw1"), halfs) == "GPFS over ib"


@pytest.mark.parametrize(
    "service,host",
    [
        ("slurmctld", "hal-mgmt1"),
        ("slurmdbd", "hal-mgmt1"),
        ("accounting_db (MariaDB)", "hal-mgmt1"),
        ("monitoring_db (InfluxDB)", "hal-mgmt1"),
        ("ldap", "hal-mgmt1"),
        ("grafana", "hal-mgmt1"),
        ("portal (JupyterHub)", "hal-mgmt2"),
    ],
)
def test_every_service_is_in_the_box_of_its_host_and_nowhere_else(hal_dot, service, host):
    def runs(node: str) -> bool:
        listed = [line.split(": ", 1)[1].split(", ") for line in hal_dot.lines(node) if line.startswith("services: ")]
        return any(service in services for services in listed)

    assert [hal_dot.lines(node)[0] for node in hal_dot.nodes if runs(node)] == [host]


def test_users_reach_login_and_data_transfer_nodes_and_the_portal(hal_dot):
    edges = hal_dot.visible_edges()
    assert edges[("users", hal_dot.titled("hal-login"))] == "ssh"
    assert edges[("users", hal_dot.titled("hal-dtn"))] == "data transfer"
    assert edges[("users", hal_dot.titled("hal-mgmt2"))] == "https://hal-mgmt2.ncsa.illinois.edu"


# ---- drawn by the real dot ------------------------------------------------------------------
@needs_dot
def test_dot_draws_hal_without_a_warning_and_the_svg_shows_it(hal, hal_dot):
    svg = svg_of(render(hal)[PATH])
    drawn = texts(svg)
    for text in [
        "hal[01-16]",
        "16 x IBM Power System AC922 8335-GTH",
        "2 x 20-core IBM POWER9 SMT4, 256 GiB",
        "4 x NVIDIA Tesla V100-SXM2-16GB (NVLink)",
        "hal-login",
        "hal-mgmt1",
        "hal-data",
        "hal-dtn",
        "172.22.0.0/16",
        "172.23.0.0/16",
        "172.24.0.0/16",
        "ib-sw1",
        "16 x 100 Gb/s",
        "InfiniBand fabric hal-edr",
        "ddn1",
        "ddn2",
        "halfs",
        "mounted at /home, 203.7 TiB",
        "misc",
        "mounted at /sw",
        "services: portal (JupyterHub)",
        "Users",
        "ssh",
    ]:
        assert text in drawn, text
    mgmt1 = " ".join(node_texts(svg)[hal_dot.titled("hal-mgmt1")])
    for service in ["slurmctld", "slurmdbd", "accounting_db (MariaDB)", "monitoring_db (InfluxDB)", "ldap", "grafana"]:
        assert service in mgmt1


@needs_dot
def test_hal_reads_top_down_users_access_compute_fabric_storage(hal, hal_dot):
    at = plain_positions(render(hal)[PATH])
    y = {
        title: at[hal_dot.titled(title)][1]
        for title in [
            "hal-login",
            "hal-dtn",
            "hal[01-16]",
            "hal-dev",
            "ib-sw1",
            "hal-data",
            "halfs",
            "ddn1",
            "hal-mgmt1",
        ]
    }
    assert at["users"][1] > y["hal-login"] == y["hal-dtn"] > y["hal[01-16]"] == y["hal-dev"] > y["ib-sw1"]
    assert y["ib-sw1"] > y["hal-data"] and y["ib-sw1"] > y["halfs"] > y["ddn1"]
    # Management is a column beside the others, not a tier of its own below them.
    assert y["hal-mgmt1"] > y["hal[01-16]"]
    x = {title: at[hal_dot.titled(title)][0] for title in ["hal-login", "hal-dtn", "hal[01-16]", "hal-dev"]}
    assert x["hal-login"] < x["hal-dtn"] and x["hal[01-16]"] < x["hal-dev"]  # the model's order


# ---- a second description -------------------------------------------------------------------
def test_twogen_draws_two_generations_a_leaf_spine_fabric_and_nfs_only(twogen_dot):
    a100, h100 = twogen_dot.titled("tg[01-04]"), twogen_dot.titled("tg[05-08]")
    assert {
        "4 x 8-GPU HGX A100 server",
        "2 x 64-core AMD EPYC 7763 SMT2, 1024 GiB",
        "8 x NVIDIA A100-SXM4-80GB (NVLink)",
    } <= set(twogen_dot.lines(a100))
    assert {"4 x 8-GPU HGX H100 server", "Slurm partitions: gpu (default), h100"} <= set(twogen_dot.lines(h100))
    leaf1, leaf2, spine = (twogen_dot.titled(s) for s in ("ib-leaf1", "ib-leaf2", "ib-spine1"))
    assert twogen_dot.cable(a100, leaf1) == twogen_dot.cable(h100, leaf2) == "4 x 200 Gb/s"
    assert twogen_dot.cable(twogen_dot.titled("tg-login"), leaf1) == "1 x 200 Gb/s"
    assert twogen_dot.cable(a100, leaf2) is None
    assert twogen_dot.cable(leaf1, spine) == twogen_dot.cable(leaf2, spine) == "uplink"
    assert twogen_dot.lines("fabric") == [
        "InfiniBand fabric twogen-hdr",
        "HDR 200 Gb/s",
        "IPoIB network ib 10.22.0.0/16",
    ]
    assert "services: portal" in twogen_dot.lines(twogen_dot.titled("tg-login"))
    assert twogen_dot.lines(twogen_dot.titled("sw"))[2:] == [
        "tg-nfs:/export/sw",
        "mounted at /sw (read-only)",
        "on tg[01-08],tg-login",
    ]
    assert not any("GPFS" in attrs for attrs in twogen_dot.nodes.values())


@needs_dot
def test_twogen_is_drawn_with_leaves_under_their_nodes_and_the_spine_below(twogen, twogen_dot):
    source = render(twogen)[PATH]
    assert {"tg[01-04]", "4 x 200 Gb/s", "ib-spine1", "10.20.0.0/16", "mounted at /home"} <= set(svg_texts(source))
    at = plain_positions(source)
    a100, h100, leaf1, leaf2, spine, nfs = (
        at[twogen_dot.titled(t)] for t in ("tg[01-04]", "tg[05-08]", "ib-leaf1", "ib-leaf2", "ib-spine1", "tg-nfs")
    )
    assert a100[1] == h100[1] > leaf1[1] == leaf2[1] > spine[1] > nfs[1]
    assert a100[0] < h100[0] and leaf1[0] < leaf2[0]  # cables from the boxes to their leaves do not cross


# ---- shapes HAL does not have ---------------------------------------------------------------
def _split_compute(text: str) -> str:
    old = "    hosts: hal[01-16]\n    count: 16"
    assert text.count(old) == 1
    text = text.replace(old, "    hosts: hal[01-08]\n    count: 8")
    new_group = (
        '  - {name: compute-b, role: compute, hosts: "hal[09-16]", count: 8, hardware: ac922,\n'
        "     addresses: {mgmt: 172.22.2.1, bmc: 172.23.2.1, ib: 172.24.2.1}}\n\nservices:"
    )
    assert text.count("\nservices:") == 1
    return text.replace("\nservices:", "\n" + new_group, 1)


def test_groups_of_one_role_and_hardware_share_a_box(check_file, edited):
    _file, loaded = check_file(edited(_split_compute))
    assert loaded.model is not None and [g.name for g in loaded.model.nodes][-1] == "compute-b"
    dot = Dot.parse(render(loaded.model)[PATH])
    lines = dot.lines(dot.titled("hal[01-16]"))
    assert lines[1:3] == ["2 groups: compute, compute-b (compute)", "16 x IBM Power System AC922 8335-GTH"]
    assert "on mgmt, bmc, ib" in lines
    assert dot.cable(dot.titled("hal[01-16]"), dot.titled("ib-sw1")) == "16 x 100 Gb/s"


def test_large_fabrics_are_drawn_one_node_per_switch_class(hal):
    leaves = [Switch(name=f"leaf{n:02d}", tier="leaf", ports=36, model="Mellanox SB7800") for n in range(MAX_SWITCHES)]
    spine = Switch(name="spine1", tier="spine", ports=648, model="Mellanox CS7500", uplinks=[])
    leaves = [s.model_copy(update={"uplinks": ["spine1"]}) for s in leaves]
    links = [link.model_copy(update={"switch": f"leaf{n:02d}"}) for n, link in enumerate(hal.fabric.links)]
    fabric = hal.fabric.model_copy(update={"switches": [*leaves, spine], "links": links})
    dot = Dot.parse(render(hal.model_copy(update={"fabric": fabric}))[PATH])
    leaf, core = dot.titled(f"{MAX_SWITCHES} x leaf switch"), dot.titled("1 x spine switch")
    assert dot.lines(leaf)[1] == "Mellanox SB7800, 36 ports"
    assert dot.cable(leaf, core) == f"{MAX_SWITCHES} x uplink"
    assert dot.cable(dot.titled("hal[01-16]"), leaf) == "16 x 100 Gb/s"
    assert not any(node.startswith("switch-") for node in dot.nodes)


@needs_dot
def test_free_text_with_markup_characters_is_escaped(check_file, edited):
    description = 'services "not" available on POWER9 & <x86> only'
    _file, loaded = check_file(edited(("services not available on POWER9, such as the web portal", description)))
    source = render(loaded.model)[PATH]
    assert description in Dot.parse(source).lines(Dot.parse(source).titled("hal-mgmt2"))
    assert description in svg_texts(source)


# ---- the command ----------------------------------------------------------------------------
def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Stands in for hal-provision."""

    app.command(name="diagram")(diagram)
    return app


def invoke(*args: str):
    result = CliRunner().invoke(_app(), ["diagram", *args])
    assert "Traceback" not in result.output
    return result


@needs_dot
def test_command_writes_an_svg_named_after_the_cluster_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke()
    assert result.exit_code == 0, result.output
    svg = (tmp_path / "hal-diagram.svg").read_text(encoding="utf-8")
    assert svg.startswith("<?xml") and {"hal[01-16]", "172.24.0.0/16", "ib-sw1"} <= set(texts(svg))
    assert "drew cluster 'hal' into hal-diagram.svg (svg," in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hal-diagram.svg"]  # no temporary file left


@needs_dot
@pytest.mark.parametrize(
    "args,name",
    [
        (["-o", "hal.png"], "hal.png"),
        (["--format", "png", "-o", "picture"], "picture"),
        (["--format", "PNG"], "hal-diagram.png"),
    ],
)
def test_command_writes_a_png(tmp_path, monkeypatch, args, name):
    monkeypatch.chdir(tmp_path)
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    data = (tmp_path / name).read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000


@needs_dot
def test_command_draws_another_description_into_a_directory(tmp_path):
    result = invoke(str(TWOGEN_FILE), "-o", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "tg[01-04]" in texts((tmp_path / "twogen-diagram.svg").read_text(encoding="utf-8"))


def test_command_writes_the_dot_source_without_needing_dot(tmp_path, monkeypatch, hal):
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot here
    result = invoke("-o", str(tmp_path / "hal.dot"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "hal.dot").read_text(encoding="utf-8") == render(hal)[PATH]


@pytest.mark.parametrize("output", ["hal.svg", "hal.png"])
def test_without_dot_the_command_names_the_package_and_keeps_the_old_file(tmp_path, monkeypatch, output):
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    target = tmp_path / output
    target.write_bytes(b"an earlier picture")
    result = invoke("-o", str(target))
    assert result.exit_code == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("error: Graphviz's `dot` program is not installed") and "Debian package graphviz" in line
    assert target.read_bytes() == b"an earlier picture"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", output]


@pytest.mark.parametrize(
    "args,message",
    [
        (["-o", "hal.png", "--format", "svg"], "error: --format svg but hal.png ends in .png"),
        (["-o", "hal.pdf"], "error: cannot tell the format from hal.pdf: name it .svg, .png or .dot, or give --format"),
    ],
)
def test_command_refuses_an_output_whose_suffix_disagrees(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(message), result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_failing_dot_is_reported_in_one_line(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    # Reads its input first, as dot does: one that exits before reading breaks the pipe instead.
    fake.write_text("#!/bin/sh\ncat >/dev/null\necho 'Error: <stdin>: syntax error in line 3' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    result = invoke("-o", str(tmp_path / "hal.svg"))
    assert result.exit_code == 2, (result.stderr, result.stdout, result.exception)
    [line] = result.stderr.splitlines()
    assert line == "error: dot could not lay out the diagram: Error: <stdin>: syntax error in line 3"
    assert not (tmp_path / "hal.svg").exists()


@needs_dot
def test_a_cluster_without_fabric_storage_or_service_nodes_still_draws(twogen):
    compute_only = [g for g in twogen.nodes if g.role.value == "compute"]
    bare = twogen.model_copy(update={"fabric": None, "storage": Storage(), "nodes": compute_only})
    source = render(bare)[PATH]
    dot = Dot.parse(source)
    assert dot.lines(dot.titled("tg-mgmt"))[1:] == [
        "in no node group",
        "services: slurmctld, slurmdbd, accounting_db (MariaDB), monitoring_db (InfluxDB), ldap, grafana",
    ]
    assert not any(node.startswith(("switch", "array", "fs-")) or node == "fabric" for node in dot.nodes)
    assert {"tg[01-04]", "tg[05-08]", "Networks"} <= set(svg_texts(source))


def test_a_dot_that_cannot_run_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    """A dot that is there but cannot be run (here: still open for writing, ETXTBSY)."""
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))  # alone: exec would go on to another dot
    with fake.open("a"):
        result = invoke("-o", str(tmp_path / "hal.svg"))
    assert result.exit_code == 2, (result.stderr, result.stdout, result.exception)
    [line] = result.stderr.splitlines()
    assert line.startswith("error: cannot run Graphviz's dot: "), line
    assert not (tmp_path / "hal.svg").exists()


COMPOSABLE_FILE = TWOGEN_FILE.with_name("x86-composable.yml")


def test_the_composable_pool_is_drawn_and_its_attached_gpus_counted():
    """The pool beside the compute nodes, with the active layout's attachment and a PCIe edge to
    the hosts cabled to it; the title counts its attached GPUs (the hosts have none of their own)."""
    source = render(validate(COMPOSABLE_FILE).model)[PATH]
    assert "4 hosts, 8 GPUs;" in html.unescape(source)
    nodes = {m.group(1).strip('"'): m.group(2) for line in source.splitlines() if (m := NODE.match(line))}
    pool = html.unescape(nodes["pool-chassis1"])
    assert (
        "GPU pool chassis1" in pool
        and "8 x NVIDIA Tesla V100-SXM2-16GB" in pool
        and "layout even: hal[01-02]: 4" in pool
    )
    edges = [(m.group(1).strip('"'), m.group(2).strip('"')) for line in source.splitlines() if (m := EDGE.match(line))]
    assert ("pool-chassis1", "group-compute") in edges
    other = validate(COMPOSABLE_FILE).model.with_layout("training")
    assert "4 hosts, 8 GPUs;" in html.unescape(render(other)[PATH])  # 6 + 2: the pool's eight either way
