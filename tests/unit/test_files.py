"""hal_provision/files.py: where the caches live, and the one writer of a single file that a reader
sees whole or not at all."""

from __future__ import annotations

import errno
import io
import os
import stat

import pytest

from hal_provision import files
from hal_provision.files import cache_dir, write_atomic


def mode_of(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_text_as_utf8_and_bytes_as_they_are(tmp_path):
    write_atomic(tmp_path / "text", "café\n")
    write_atomic(tmp_path / "bytes", b"\x00\xff")
    assert (tmp_path / "text").read_bytes() == "café\n".encode("utf-8")
    assert (tmp_path / "bytes").read_bytes() == b"\x00\xff"


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o640])
def test_sets_the_mode_whatever_the_umask(tmp_path, mode):
    old = os.umask(0o077)
    try:
        write_atomic(tmp_path / "f", "x", mode=mode)
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "f") == mode


def test_replaces_an_existing_file_and_its_mode(tmp_path):
    target = tmp_path / "f"
    target.write_text("old")
    target.chmod(0o666)
    write_atomic(target, "new", mode=0o600)
    assert target.read_text() == "new"
    assert mode_of(target) == 0o600


@pytest.mark.parametrize("durable", [True, False])
def test_creates_the_directory(tmp_path, durable):
    target = tmp_path / "a" / "b" / "f"
    write_atomic(target, "x", durable=durable)
    assert target.read_text() == "x"


class DiskFillsHalfway(io.FileIO):
    def write(self, data):
        super().write(bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "f"
    target.write_text("old")
    monkeypatch.setattr(files.os, "fdopen", lambda fd, mode: DiskFillsHalfway(fd, mode.replace("b", "")))
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "new content")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_data_that_cannot_be_encoded_keeps_the_old_content(tmp_path):
    target = tmp_path / "f"
    target.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, "\udcff")  # a lone surrogate: not UTF-8
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_failed_rename_keeps_the_old_content_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "f"
    target.write_text("old")

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.os, "replace", refuse)
    with pytest.raises(PermissionError):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_an_interrupt_leaves_no_temporary(tmp_path, monkeypatch):
    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "f", "new")
    assert list(tmp_path.iterdir()) == []


def test_a_directory_that_refuses_fsync_still_gets_the_file(tmp_path, monkeypatch):
    real = os.fsync

    def files_only(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(22, "Invalid argument")
        real(fd)

    monkeypatch.setattr(files.os, "fsync", files_only)
    write_atomic(tmp_path / "f", "x")
    assert (tmp_path / "f").read_text() == "x"


def test_the_cache_directory(monkeypatch, tmp_path):
    monkeypatch.delenv(files.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir("inventory") == tmp_path / "xdg" / "hal-provision" / "inventory"
    monkeypatch.setenv(files.CACHE_ENV, str(tmp_path / "kept"))
    assert cache_dir("inventory") == tmp_path / "kept" / "inventory"
    monkeypatch.delenv(files.CACHE_ENV)
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir("wheelhouse") == tmp_path / "home" / ".cache" / "hal-provision" / "wheelhouse"
