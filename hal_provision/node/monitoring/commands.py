"""Running the tools the collectors read, and the collectors' exit contract.

A collector prints line protocol on stdout and exits 0; when it cannot, it prints one
readable line on stderr and exits 1, without a traceback (Telegraf's exec input logs stderr
and drops the run).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable, Sequence


class CollectorError(Exception):
    """A failure worth one line on stderr: the tool is missing, failed or printed nonsense."""


def _shown(argv: Sequence[str]) -> str:
    text = " ".join(argv)
    return text if len(text) <= 60 else argv[0]


def run(argv: Sequence[str], timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run `argv` (no shell) to completion, its exit status unchecked. CollectorError, naming
    the command, when it cannot be started or outlives `timeout` seconds (it is killed)."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout or None, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise CollectorError(f"{argv[0]}: command not found") from None
    except PermissionError as exc:
        raise CollectorError(f"{argv[0]}: {exc.strerror}") from None
    except subprocess.TimeoutExpired:
        raise CollectorError(f"{_shown(argv)}: no answer within {timeout:g} s") from None


def last_stderr_line(done: subprocess.CompletedProcess) -> str | None:
    lines = [line for line in (done.stderr or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else None


def failure(argv: Sequence[str], done: subprocess.CompletedProcess) -> str:
    """One line for a command that exited non-zero: the last line it printed on stderr."""
    why = last_stderr_line(done) or f"exit status {done.returncode}"
    # "squeue: fatal: ..." names its program already
    return why if why.startswith(f"{os.path.basename(argv[0])}:") else f"{_shown(argv)}: {why}"


def run_command(argv: Sequence[str], timeout: float = 30.0) -> str:
    """stdout of `argv`; CollectorError when it cannot be run, fails or times out."""
    done = run(argv, timeout)
    if done.returncode != 0:
        raise CollectorError(failure(argv, done))
    return done.stdout


def guarded(name: str, main: Callable[[list[str]], int], argv: list[str]) -> int:
    """Run a collector's main; a CollectorError or OSError becomes one stderr line and 1."""
    try:
        return main(argv)
    except CollectorError as exc:
        print(f"hal_monitoring {name}: {exc}", file=sys.stderr)
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        print(f"hal_monitoring {name}: {exc.strerror or exc}{where}", file=sys.stderr)
    return 1


def emit(lines: Sequence[str]) -> None:
    """Print a run's lines at once (a partial run must not reach Telegraf half-written)."""
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
