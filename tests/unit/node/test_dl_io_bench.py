"""The DL I/O benchmark (hal_provision/node/dl_io_bench.py): small real runs in temporary
directories (the figures are this machine's, only their shape is asserted), the data set's
sizes and layout, the epoch's shards, the table, and the command line."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from hal_provision.node import dl_io_bench as dlio


def test_sizes_are_seeded_and_lognormal_around_the_mean():
    sizes = dlio.file_sizes(20000, seed=3)
    assert sizes == dlio.file_sizes(20000, seed=3) != dlio.file_sizes(20000, seed=4)
    assert statistics.fmean(sizes) == pytest.approx(dlio.MEAN_BYTES, rel=0.03)
    assert statistics.median(sizes) < statistics.fmean(sizes)  # skewed to the right, as JPEG sizes are
    assert dlio.MIN_BYTES <= min(sizes) and max(sizes) <= dlio.MAX_BYTES


def test_layout_is_an_imagenet_like_class_tree():
    paths = dlio.layout(250, classes=100)
    assert paths[:2] == ["n00000000/n00000000_000000.JPEG", "n00000001/n00000001_000000.JPEG"]
    assert paths[100] == "n00000000/n00000000_000001.JPEG"
    assert len(set(paths)) == 250 and len({p.split("/")[0] for p in paths}) == 100
    assert len({p.split("/")[0] for p in dlio.layout(3, classes=100)}) == 3


@pytest.mark.parametrize(("files", "readers"), [(10, 3), (2000, 4), (5, 8)])
def test_an_epoch_deals_every_file_to_exactly_one_reader_in_a_seeded_random_order(files, readers):
    shards = dlio.shards(files, readers, seed=1)
    assert len(shards) == readers and sorted(i for s in shards for i in s) == list(range(files))
    assert shards == dlio.shards(files, readers, seed=1)
    if files > 100:
        assert shards != dlio.shards(files, readers, seed=2) and shards[0][:5] != sorted(shards[0][:5])


def test_prepare_writes_the_tree_with_the_drawn_sizes(tmp_path):
    made = dlio.prepare(tmp_path, 40, classes=4, seed=7)
    assert [p.relative_to(tmp_path).as_posix() for p, _ in made] == dlio.layout(40, 4)
    assert [p.stat().st_size for p, _ in made] == dlio.file_sizes(40, 7) == [s for _, s in made]


def test_a_pass_reads_every_file_once_whole(tmp_path):
    made = dlio.prepare(tmp_path, 60, classes=5)
    dlio.drop_cache(p for p, _ in made)
    result = dlio.read_pass([p for p, _ in made], readers=3)
    assert (result["files"], result["bytes"]) == (60, sum(s for _, s in made))
    assert [r["files"] for r in result["per_reader"]] == [20, 20, 20]
    assert [r["reader"] for r in result["per_reader"]] == [0, 1, 2]
    assert result["seconds"] > 0 and all(r["seconds"] > 0 and r["bytes"] > 0 for r in result["per_reader"])
    assert result["seconds"] >= max(r["seconds"] for r in result["per_reader"]) * 0.999


def test_run_on_two_directories_compares_them_and_cleans_up(tmp_path):
    doc = dlio.run([("shared", tmp_path / "a"), ("local", tmp_path / "b")], files=200, readers=2, classes=10)
    assert [d["name"] for d in doc["dirs"]] == ["shared", "local"]
    assert (doc["files"], doc["readers"], doc["warm"]) == (200, 2, False)
    for d in doc["dirs"]:
        assert d["files"] == 200 and d["bytes"] == sum(dlio.file_sizes(200)) and d["prepare_seconds"] >= 0
        assert list(Path(d["path"]).iterdir()) == []  # the tree is removed
    text = dlio.table([doc])
    lines = text.splitlines()
    assert lines[0].split() == [
        "node",
        "dir",
        "path",
        "files",
        "readers",
        "samples/s",
        "MB/s",
        "per",
        "reader",
        "samples/s",
        "per",
        "reader",
        "MB/s",
        "ratio",
    ]
    assert set(lines[1]) == {"-", " "}
    shared, local = lines[2].split(), lines[3].split()
    assert shared[1:5] == ["shared", str(tmp_path / "a"), "200", "2"] and shared[-1] == "1.00x"
    assert local[1] == "local" and re.fullmatch(r"\d+\.\d\dx", local[-1])
    assert float(shared[5]) > 0 and float(shared[6]) > 0 and re.fullmatch(r"\d+-\d+", shared[7])
    assert "posix_fadvise(POSIX_FADV_DONTNEED)" in text and "NFS clients" in text
    assert "200 files (lognormal sizes, mean 110 KB, 10 class directories), 2 reader processes" in text


def test_warm_reads_first_and_says_so(tmp_path, monkeypatch):
    dropped = []
    monkeypatch.setattr(dlio, "drop_cache", lambda paths: dropped.append(list(paths)))
    doc = dlio.run([("x", tmp_path)], files=20, readers=2, warm=True)
    assert doc["warm"] is True and dropped == []
    text = dlio.table([doc])
    assert dlio.WARM in text and "posix_fadvise" not in text
    dlio.run([("x", tmp_path)], files=20, readers=2, warm=False)
    assert len(dropped) == 1 and len(dropped[0]) == 20


def test_keep_leaves_the_tree(tmp_path):
    dlio.run([("x", tmp_path)], files=12, readers=2, classes=3, keep=True)
    (work,) = tmp_path.iterdir()
    assert len(list(work.rglob("*.JPEG"))) == 12


def test_the_table_reads_results_of_several_nodes(tmp_path):
    def node(host, rates):
        return {
            "host": host,
            "files": 100,
            "readers": 2,
            "classes": 10,
            "mean_bytes": 110000,
            "seed": 0,
            "warm": False,
            "dirs": [
                {
                    "name": n,
                    "path": f"/{n}",
                    "files": 100,
                    "bytes": 11_000_000,
                    "seconds": 100 / r,
                    "prepare_seconds": 1.0,
                    "per_reader": [
                        {"reader": i, "files": 50, "bytes": 5_500_000, "seconds": 100 / r} for i in range(2)
                    ],
                }
                for n, r in rates.items()
            ],
        }

    for doc in (node("hal02", {"shared": 1000.0, "local": 4000.0}), node("hal01", {"shared": 500.0, "local": 500.0})):
        (tmp_path / f"{doc['host']}.json").write_text(json.dumps(doc))
    rows = [line.split() for line in dlio.table(dlio.load_results(tmp_path)).splitlines()[2:6]]
    assert [(r[0], r[1], r[5], r[6], r[-1]) for r in rows] == [
        ("hal01", "shared", "500", "55.0", "1.00x"),
        ("hal01", "local", "500", "55.0", "1.00x"),
        ("hal02", "shared", "1000", "110.0", "1.00x"),
        ("hal02", "local", "4000", "440.0", "4.00x"),
    ]
    assert rows[3][7:9] == ["2000-2000", "220.0-220.0"]  # each reader: half the files in the whole time


def test_results_that_are_not_the_benchmarks_are_refused(tmp_path):
    with pytest.raises(dlio.BenchError, match="no \\*.json results"):
        dlio.load_results(tmp_path)
    (tmp_path / "x.json").write_text('{"ranks": {}}')
    with pytest.raises(dlio.BenchError, match="not a DL I/O benchmark result"):
        dlio.load_results(tmp_path)


def cli(*argv: str) -> subprocess.CompletedProcess:
    """The file alone, as the playbook installs it."""
    return subprocess.run([sys.executable, dlio.__file__, *argv], capture_output=True, text=True, timeout=120)


def test_the_program_runs_alone_and_prints_json_for_the_playbook(tmp_path):
    done = cli(
        "run",
        "--dir",
        f"one={tmp_path / 'a'}",
        "--dir",
        str(tmp_path / "b"),
        "--files",
        "30",
        "--readers",
        "2",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [d["name"] for d in doc["dirs"]] == ["one", "b"]
    (tmp_path / "r.json").write_text(done.stdout)
    table = cli("table", str(tmp_path / "r.json"))
    assert table.returncode == 0 and table.stdout == dlio.table([doc])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--dir", "a=/tmp/x", "--dir", "a=/tmp/y", "--files", "5"], "each --dir needs its own name"),
        (["run", "--dir", "a=/tmp/x", "--files", "0"], "must be at least 1"),
        (["run", "--dir", "a=/proc/hal-dl-io-bench"], "a: cannot write in /proc/hal-dl-io-bench"),
    ],
)
def test_mistakes_are_one_line(argv, message):
    done = cli(*argv)
    assert done.returncode == 1 and done.stderr.startswith("error: ") and message in done.stderr
    assert len(done.stderr.splitlines()) == 1


# ---- `hal-provision storage dlio` ---------------------------------------------------------------


def test_the_command_runs_locally_and_prints_the_table(tmp_path):
    from typer.testing import CliRunner

    from hal_provision.cli.main import app

    result = CliRunner().invoke(
        app,
        [
            "storage",
            "dlio",
            "--local",
            "--dir",
            f"shared={tmp_path / 's'}",
            "--dir",
            f"local={tmp_path / 'l'}",
            "--files",
            "40",
            "--readers",
            "2",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [line.split()[1] for line in result.output.splitlines()[2:4]]
    assert rows == ["shared", "local"] and f"results: {tmp_path / 'out'}" in result.output
    (doc,) = dlio.load_results(tmp_path / "out")
    assert [d["files"] for d in doc["dirs"]] == [40, 40]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dir", "=x", "--local"], "'=x': give NAME=PATH"),
        (["--dir", "a=/abs"], "give --inventory"),
        (["--dir", "a=relative", "--inventory", "/nonexistent"], "each --dir needs an absolute path on the nodes"),
    ],
)
def test_the_commands_mistakes(argv, message):
    from typer.testing import CliRunner

    from hal_provision.cli.main import app

    result = CliRunner().invoke(app, ["storage", "dlio", *argv])
    assert result.exit_code == 2 and message in result.output
