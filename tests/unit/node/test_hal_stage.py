"""hal-stage (hal_provision/node/recipes/hal_stage.py): a data set copied to the job's local
scratch once per node. The copies are real, in temporary directories; the concurrent case runs
the program as several processes, installed alone in a directory as the recipes role installs it,
as a job's tasks on one node would."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hal_provision.node.recipes import hal_stage


def data_set(root: Path, classes: int = 3, per_class: int = 5) -> Path:
    """A small ImageFolder-like tree: classes of files of different sizes."""
    for c in range(classes):
        (root / f"n{c:08d}").mkdir(parents=True)
        for i in range(per_class):
            (root / f"n{c:08d}" / f"img_{i}.JPEG").write_bytes(os.urandom(1000 * (c + 1) + i))
    return root


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith(".hal-stage")
    }


def test_staging_copies_the_tree_byte_for_byte_to_the_jobs_tmp(tmp_path):
    source = data_set(tmp_path / "shared" / "imagenet-mini")
    staged = hal_stage.stage(source, environ={"TMPDIR": str(tmp_path / "job")})
    assert staged.path == tmp_path / "job" / "hal-stage" / "imagenet-mini"
    assert tree(staged.path) == tree(source)
    assert (staged.copied, staged.files, staged.bytes) == (True, 15, sum(map(len, tree(source).values())))
    assert staged.seconds >= 0 and staged.waited >= 0
    record = json.loads((staged.path / hal_stage.MARKER).read_text())
    assert record == {"source": str(source), "files": 15, "bytes": staged.bytes, "seconds": staged.seconds}
    assert not (staged.path / hal_stage.UNFINISHED).exists()


def test_without_tmpdir_the_default_is_under_tmp():
    assert hal_stage.default_dest(Path("/shared/ds"), environ={}) == Path("/tmp/hal-stage/ds")


def test_a_second_call_finds_the_copy_and_copies_nothing(tmp_path, capsys):
    source = data_set(tmp_path / "ds")
    dest = tmp_path / "local" / "ds"
    first = hal_stage.stage(source, dest)
    (source / "n00000000" / "img_0.JPEG").write_bytes(b"changed")  # not copied again
    second = hal_stage.stage(source, dest)
    assert (second.copied, second.files, second.bytes, second.seconds) == (
        False,
        first.files,
        first.bytes,
        first.seconds,
    )
    assert (dest / "n00000000" / "img_0.JPEG").read_bytes() != b"changed"
    assert hal_stage.main(["--dest", str(dest), str(source)]) == 0
    assert capsys.readouterr().out == (
        f"hal-stage: {dest} is already staged (15 files, {first.bytes / 1e6:.1f} MB, "
        f"copied in {first.seconds:.2f} s); nothing copied\n"
    )


def test_the_summary_names_files_bytes_seconds_rate_and_path(tmp_path, capsys):
    source = data_set(tmp_path / "ds")
    assert hal_stage.main(["--dest", str(tmp_path / "out"), str(source)]) == 0
    line = capsys.readouterr().out
    assert line.startswith("hal-stage: copied 15 files, 0.0 MB in ") and line.endswith(f" MB/s) to {tmp_path}/out\n")


def test_print_path_prints_only_the_path_on_stdout(tmp_path, capsys):
    source = data_set(tmp_path / "ds")
    assert hal_stage.main(["--print-path", "--dest", str(tmp_path / "out"), str(source)]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"{tmp_path}/out\n"
    assert captured.err.startswith("hal-stage: copied 15 files")


def test_concurrent_tasks_copy_once_and_all_find_the_copy(tmp_path):
    """Six tasks of a job on one node at once: one copies, five wait and find its copy."""
    installed = tmp_path / "resnet50"
    installed.mkdir()
    shutil.copy(hal_stage.__file__, installed / "hal_stage.py")
    source = data_set(tmp_path / "shared" / "ds", classes=20, per_class=50)
    env = {**os.environ, "TMPDIR": str(tmp_path / "job")}
    tasks = [
        subprocess.Popen(
            [sys.executable, str(installed / "hal_stage.py"), str(source)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    outputs = [(t.communicate(timeout=60), t.returncode) for t in tasks]
    assert [rc for _, rc in outputs] == [0] * 6, outputs
    said = collections.Counter(
        "copied"
        if out.startswith("hal-stage: copied 1000 files")
        else "found"
        if "is already staged (1000 files" in out
        else out
        for (out, _), _ in outputs
    )
    assert said == {"copied": 1, "found": 5}
    assert tree(tmp_path / "job" / "hal-stage" / "ds") == tree(source)


def test_an_unfinished_copy_is_made_again(tmp_path):
    source = data_set(tmp_path / "ds")
    dest = tmp_path / "local" / "ds"
    (dest / "n00000000").mkdir(parents=True)
    (dest / hal_stage.UNFINISHED).touch()  # the copying task died here
    (dest / "n00000000" / "half.JPEG").write_bytes(b"x")
    staged = hal_stage.stage(source, dest)
    assert staged.copied and tree(dest) == tree(source)


def run_main(capsys, *argv: str) -> tuple[int, str]:
    code = hal_stage.main(list(argv))
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert len(captured.err.splitlines()) == 1, captured.err
    return code, captured.err


def test_not_enough_space_is_one_line_and_copies_nothing(tmp_path, capsys, monkeypatch):
    source = data_set(tmp_path / "ds")
    monkeypatch.setattr(hal_stage.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 1000))
    code, err = run_main(capsys, "--dest", str(tmp_path / "local" / "ds"), str(source))
    assert code == 1
    assert err == f"hal-stage: error: not enough space in {tmp_path}/local: the data set needs 0.00 GB, 0.00 GB free\n"
    assert not (tmp_path / "local" / "ds").exists()


@pytest.mark.parametrize(
    ("make", "argv", "message"),
    [
        (lambda t: None, ["{t}/missing"], "{t}/missing: no such directory"),
        (lambda t: (t / "file").write_text("x"), ["{t}/file"], "{t}/file: not a directory"),
        (lambda t: data_set(t / "ds"), ["--dest", "{t}/ds/copy", "{t}/ds"], "overlap"),
        (
            lambda t: (data_set(t / "ds"), (t / "mine").mkdir(), (t / "mine" / "keep").write_text("x")),
            ["--dest", "{t}/mine", "{t}/ds"],
            "{t}/mine exists and is not a copy hal-stage made",
        ),
        (
            lambda t: (data_set(t / "ds"), (t / "f").write_text("x")),
            ["--dest", "{t}/f/sub", "{t}/ds"],
            "cannot use {t}/f",
        ),
    ],
)
def test_mistakes_are_one_line_and_exit_1(tmp_path, capsys, make, argv, message):
    make(tmp_path)
    code, err = run_main(capsys, *(a.format(t=tmp_path) for a in argv))
    assert code == 1 and err.startswith("hal-stage: error: ") and message.format(t=tmp_path) in err
    if (tmp_path / "mine").exists():
        assert (tmp_path / "mine" / "keep").read_text() == "x"  # never removed
