"""Loading: everything a user can get wrong before the checks run becomes a located finding."""

from __future__ import annotations

import pytest

from hal_provision.findings import Level
from hal_provision.loader import load, load_text


def _load(tmp_path, text: str):
    path = tmp_path / "cluster.yml"
    path.write_text(text, encoding="utf-8")
    return path, load(path)


def test_embedded_default_loads(hal_text):
    loaded = load()
    assert loaded.findings == [] and loaded.model.cluster.name == "hal"
    assert load_text(hal_text, "x.yml").model == loaded.model


# (edit, dotted path, message piece, line marker, column marker): each yields one located error.
STRUCTURE = [
    pytest.param(
        ("    count: 16 ", "    cuont: 16 "),
        "nodes[6].cuont",
        "unknown key 'cuont'; did you mean 'count'?",
        "cuont: 16",
        "cuont",
        id="unknown-key-in-list-item",
    ),
    pytest.param(
        ("fabric:\n", "fabrik:\n"),
        "fabrik",
        "unknown key 'fabrik'; did you mean 'fabric'?",
        "fabrik:",
        "fabrik",
        id="unknown-top-level-key",
    ),
    pytest.param(
        ("    count: 16 ", "    count: sixteen "),
        "nodes[6].count",
        "valid integer",
        "count: sixteen",
        "count",
        id="wrong-type-scalar",
    ),
    pytest.param(
        ("  sockets: 2                                # [paper] 2x 20-core", "  sockets: [2]   #"),
        "hardware.ac922.sockets",
        "valid integer",
        "sockets: [2]",
        "sockets",
        id="wrong-type-list-for-int",
    ),
    pytest.param(
        ("cidr: 172.22.0.0/16", "cidr: 172.22.0.1/16"),
        "networks.mgmt.cidr",
        "not a valid IPv4 network",
        "cidr: 172.22.0.1/16",
        "cidr",
        id="wrong-type-cidr-with-host-bits",
    ),
    pytest.param(
        ("{mgmt: 172.22.1.1,", "{mgmt: 172.22.1.300,"),
        "nodes[6].addresses.mgmt",
        "not a valid IPv4 address",
        "172.22.1.300",
        "mgmt: 172.22.1.300",
        id="wrong-type-address-in-flow-mapping",
    ),
    pytest.param(
        ("      nodes: hal[01-16]\n", "      nodes: hal[01-16\n"),
        "slurm.partitions[0].nodes",
        "not a valid hostlist expression: 'hal[01-16'",
        "nodes: hal[01-16",
        "nodes",
        id="bad-hostlist",
    ),
]


@pytest.mark.parametrize(("replacement", "path", "message", "line_marker", "column_marker"), STRUCTURE)
def test_schema_error_is_located(tmp_path, edited, position, replacement, path, message, line_marker, column_marker):
    text = edited(replacement)
    file, loaded = _load(tmp_path, text)
    assert loaded.model is None
    [finding] = loaded.findings
    assert (finding.level, finding.dotted, finding.check) == (Level.error, path, "schema")
    assert message in finding.message
    assert (finding.file, finding.line, finding.column) == (str(file), *position(text, line_marker, column_marker))


def test_all_schema_errors_are_reported_together(tmp_path, edited):
    _file, loaded = _load(
        tmp_path,
        edited(
            ("    count: 16 ", "    count: sixteen "),
            ("fabric:\n", "fabrik:\n"),
            ("      default: true\n      max_time", "      default: maybe\n      max_time"),
        ),
    )
    assert sorted(f.dotted for f in loaded.findings) == ["fabrik", "nodes[6].count", "slurm.partitions[0].default"]


def test_renamed_key_reports_both_the_unknown_and_the_missing_key(edited, position):
    text = edited(("      model: NVIDIA Tesla", "      modle: NVIDIA Tesla"))
    loaded = load_text(text, "c.yml")
    by_path = {f.dotted: f for f in loaded.findings}
    assert "did you mean 'model'?" in by_path["hardware.ac922.gpus.modle"].message
    missing = by_path["hardware.ac922.gpus.model"]
    assert missing.message == "required key is missing"
    assert missing.line == position(text, "    gpus:")[0]  # located at the mapping that lacks it


# (edit, message piece, line marker, column): YAML the parser rejects.
SYNTAX = [
    pytest.param(
        ("    role: compute\n", "   role: compute\n"),
        "expected <block end>",
        "   role: compute",
        4,
        id="bad-indentation",
    ),
    pytest.param(("    count: 16 ", "\tcount: 16 "), "'\\t' that cannot start any token", "\tcount: 16", 1, id="tab"),
    pytest.param(
        ("    count: 16 ", "    count: 16\n    count: 17 "),
        'found duplicate key "count" with value "17"',
        "count: 17",
        5,
        id="duplicate-key",
    ),
]


@pytest.mark.parametrize(("replacement", "message", "line_marker", "column"), SYNTAX)
def test_yaml_syntax_error_is_located(tmp_path, edited, position, replacement, message, line_marker, column):
    text = edited(replacement)
    file, loaded = _load(tmp_path, text)
    assert loaded.model is None
    [finding] = loaded.findings
    assert (finding.level, finding.check, finding.file) == (Level.error, "yaml", str(file))
    assert finding.message.startswith("YAML syntax: ") and message in finding.message
    assert (finding.line, finding.column) == (position(text, line_marker)[0], column)


# (text, the one-line explanation, line, column): the usual hand-editing mistakes, each explained
# before the parser's own words.
EXPLAINED = [
    pytest.param(
        "cluster:\n  name: x\n   domain: a\n",
        "a ':' this line cannot have: it is indented deeper than "
        "the key before it, or a plain value holds ': ' (quote such a value)",
        3,
        10,
        id="deeper-key",
    ),
    pytest.param("cluster:\n  description: GPUs: many\n", "a plain value holds ': '", 2, 20, id="colon-in-value"),
    pytest.param(
        "cluster:\n  domain: [a, b\nnodes: 3\n",
        "the '[' opened at line 2, column 11 is not closed before this",
        3,
        6,
        id="open-bracket",
    ),
    pytest.param(
        "cluster: {name: x\nnodes: 3\n", "the '{' opened at line 1, column 10 is not closed", 2, 6, id="open-brace"
    ),
    pytest.param("a: 1\n\tb: 2\n", "a tab: YAML indents with spaces only", 2, 1, id="tab"),
    pytest.param(
        'cluster:\n  name: "x\nnodes: 3\n',
        "the quoted value opened at line 2, column 9 is never closed",
        4,
        1,
        id="open-quote",
    ),
    pytest.param("a:\n    b: 1\n  c: 2\n", "this line's indentation matches no level above it", 3, 3, id="indentation"),
    pytest.param("a: *foo\n", "an alias ('foo') with no anchor (&name) before it", 1, 4, id="alias"),
    pytest.param(
        "a: 1\na: 2\n",
        "key a is given twice in the mapping that starts at line 1, column 1: keep one",
        2,
        1,
        id="duplicate-key",
    ),
]


@pytest.mark.parametrize(("text", "explanation", "line", "column"), EXPLAINED)
def test_yaml_syntax_error_is_explained_in_one_line(tmp_path, text, explanation, line, column):
    _file, loaded = _load(tmp_path, text)
    [finding] = loaded.findings
    assert finding.message.startswith("YAML syntax: ") and explanation in finding.message, finding.message
    assert "\n" not in finding.message and "(the parser: " in finding.message
    assert (finding.line, finding.column) == (line, column)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("- a\n- list\n", id="list"),
        pytest.param("just a string\n", id="scalar"),
        pytest.param("", id="empty"),
        pytest.param("# only a comment\n", id="comment-only"),
    ],
)
def test_document_that_is_not_a_mapping(tmp_path, text):
    file, loaded = _load(tmp_path, text)
    assert loaded.model is None
    [finding] = loaded.findings
    assert finding.format() == f"{file}:1:1: error: the file must be a YAML mapping (key: value)"


def test_mapping_missing_every_section_names_each(tmp_path):
    _file, loaded = _load(tmp_path, "schema_version: 1\n")
    assert {f.dotted for f in loaded.findings} == {"cluster", "networks", "hardware", "nodes", "services", "slurm"}
    assert all(f.message == "required key is missing" and f.level is Level.error for f in loaded.findings)


def test_missing_file(tmp_path):
    missing = tmp_path / "nope" / "cluster.yml"
    loaded = load(missing)
    assert loaded.model is None
    [finding] = loaded.findings
    assert finding.format() == f"{missing}: error: no such file"


def test_directory_instead_of_file(tmp_path):
    loaded = load(tmp_path)
    assert loaded.model is None
    assert [f.format() for f in loaded.findings] == [f"{tmp_path}: error: is a directory, not a cluster file"]


def test_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "cluster.yml"
    path.write_bytes(b"cluster: \xff\xfe\n")
    loaded = load(path)
    assert loaded.model is None
    [finding] = loaded.findings
    assert finding.message.startswith("cannot read: ") and finding.file == str(path)


def test_fast_and_round_trip_parsers_agree():
    """The loader parses with libyaml and reports a refused file through ruamel: both must read
    every shipped description, and YAML 1.2 scalars (04:00:00 stays a string), identically."""
    import json
    from pathlib import Path

    from hal_provision.loader import _fast_parse, _yaml

    def plain(x):
        return json.loads(json.dumps(x, default=str))

    root = Path(__file__).resolve().parents[2]
    files = [root / "inventory/hal/cluster.yml", *sorted((root / "tests/data/clusters").glob("*.yml"))]
    tricky = "a: 04:00:00\nb: yes\nc: 0o17\nd: 1.5\ne: ~\nf: 010\ng: off\nh: 1e3\n"
    for text in [f.read_text() for f in files] + [tricky]:
        fast = _fast_parse(text)
        assert fast is not None
        assert plain(fast) == plain(_yaml().load(text))
    assert _fast_parse("a: 1\na: 2\n") is None  # duplicate keys go to the reporting path


def test_lazy_locator_finds_what_the_round_trip_tree_finds(hal_text):
    """Findings of a valid file are located through libyaml's node tree (fast), not ruamel's
    round-trip tree (pure Python, seconds for a large file): every key and item of the embedded
    description, and a path that leaves the document, must land on the same line and column."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    from hal_provision.loader import LazyLocator, Locator, _yaml

    root = _yaml().load(hal_text)

    def paths(node, prefix=()):
        yield prefix
        items = (
            node.items()
            if isinstance(node, CommentedMap)
            else enumerate(node)
            if isinstance(node, CommentedSeq)
            else ()
        )
        for key, value in items:
            yield from paths(value, (*prefix, key))

    round_trip, lazy = Locator(root, "hal.yml"), LazyLocator(hal_text, "hal.yml")
    every = list(paths(root))
    assert len(every) > 500
    for path in every:
        assert lazy.position(path) == round_trip.position(path), path
        assert lazy.position((*path, "no-such-key")) == round_trip.position((*path, "no-such-key")), path
    assert lazy.position(("nodes", 99)) == round_trip.position(("nodes", 99)) != (None, None)
