"""The driver contract's command line (docs/composable-driver.md):

    python -m hal_provision.compose.driver --driver sandbox|rest|/abs/path --pool NAME
        [--url URL] [--state FILE] [--config composable.json] list | attach HOST N | detach HOST N

One JSON object on stdout. Exit 0: done (or listed). Exit 1: refused, nothing changed,
{"error": "<one line>"}. Exit 2: usage, configuration, or the fabric failing or unreachable,
or anything read (composable.json, the state file, the fabric manager's or a site program's
answer) that breaks the contract, {"error": "<one line>"}. Never a traceback: even a fault of
this code's own is an exit 2, since an exit 1 would claim that nothing changed. A site's own
program (--driver /abs/path) is run with the same arguments minus --driver, and its answer is
checked against the contract.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from . import contract
from .contract import EXIT_ERROR, EXIT_OK, EXIT_REFUSED, DriverError, Refusal

SITE_PROGRAM_TIMEOUT_S = 600


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors answer in the contract's JSON too
        raise DriverError(f"usage: {contract.one_line(message)}")


def _count(text: str) -> int:
    """A command line's count: ASCII digits, at least 1 (not -2, 1.5, 1e999, NaN or ' 3')."""
    if not re.fullmatch(r"[0-9]{1,30}", text) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{contract.shown(text)} is not a number of GPUs (a whole number from 1)")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m hal_provision.compose.driver",
        description="Attach and detach a composable pool's GPUs (the driver contract of docs/composable-driver.md).",
    )
    p.add_argument("--driver", required=True, help="sandbox, rest, or the absolute path of a site's program")
    p.add_argument("--pool", required=True, help="the pool's name in composable.json")
    p.add_argument("--url", help="the fabric manager's base URL (rest)")
    p.add_argument("--state", type=Path, help="the JSON file of who holds what (sandbox)")
    p.add_argument("--config", type=Path, help="the rendered composable.json (sandbox)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("list", help="the pool's GPUs per host and free")
    for action in ("attach", "detach"):
        s = sub.add_parser(action, help=f"{action} N of the pool's GPUs {'to' if action == 'attach' else 'from'} HOST")
        s.add_argument("host")
        s.add_argument("count", type=_count)
    return p


def _built_in(args: argparse.Namespace):
    if args.driver == "rest":
        from .rest import RestDriver

        return RestDriver(args.pool, args.url or "")
    if args.driver == "sandbox":
        from .sandbox import SandboxDriver

        if args.config is None or args.state is None:
            raise DriverError("the sandbox driver needs --config (the rendered composable.json) and --state")
        config = contract.read_config(args.config)
        pool = contract.pool_from_config(config, args.pool, str(args.config))
        return SandboxDriver(pool, contract.active_holding(config, pool, str(args.config)), args.state)
    raise DriverError(f"--driver {args.driver!r} is none of sandbox, rest or an absolute path to a program")


def _site_program(args: argparse.Namespace, argv: list[str]) -> tuple[dict, int]:
    """Run the site's program with ARGV minus --driver; its answer, checked, and exit code."""
    program = args.driver
    if not os.access(program, os.X_OK) or not Path(program).is_file():
        raise DriverError(f"the driver program {program} does not exist or is not executable")
    passed, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
        elif a == "--driver":
            skip = True
        elif not a.startswith("--driver="):
            passed.append(a)
    try:
        proc = subprocess.run([program, *passed], text=True, capture_output=True, timeout=SITE_PROGRAM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise DriverError(f"the driver program {program} ran more than {SITE_PROGRAM_TIMEOUT_S} s") from None
    except OSError as e:
        raise DriverError(f"the driver program {program} cannot run: {e.strerror}") from None
    stderr = contract.one_line(proc.stderr)[-200:]
    try:
        answer = contract.loads(proc.stdout)
    except ValueError as e:
        raise DriverError(
            f"the driver program {program} exited {proc.returncode} without a JSON answer ({e})"
            + (f": {stderr}" if stderr else "")
        ) from None
    if proc.returncode not in (EXIT_OK, EXIT_REFUSED, EXIT_ERROR):
        raise DriverError(f"the driver program {program} exited {proc.returncode}" + (f": {stderr}" if stderr else ""))
    if proc.returncode != EXIT_OK and not (isinstance(answer, dict) and set(answer) == {"error"}):
        raise DriverError(f"the driver program {program} exited {proc.returncode} without an 'error' answer")
    problems = contract.shape_problems(args.command, answer)
    if problems or (proc.returncode == EXIT_OK and "error" in answer):
        raise DriverError(
            f"the driver program {program}'s answer breaks the contract: "
            + ("; ".join(problems) or "an 'error' with exit 0")
        )
    return answer, proc.returncode


def run(argv: list[str]) -> tuple[dict, int]:
    """The answer and exit code for ARGV; every failure becomes an {"error": ...} answer."""
    try:
        args = parser().parse_args(argv)
        if os.path.isabs(args.driver):
            return _site_program(args, argv)
        driver = _built_in(args)
        answer = driver.list() if args.command == "list" else getattr(driver, args.command)(args.host, args.count)
        return answer, EXIT_OK
    except Refusal as e:
        return {"error": contract.one_line(e)}, EXIT_REFUSED
    except DriverError as e:
        return {"error": contract.one_line(e)}, EXIT_ERROR
    except Exception as e:  # noqa: BLE001 - the contract's last word: a fault here is not a refusal
        return {"error": f"the driver failed: {type(e).__name__}: {contract.one_line(e)[:300]}"}, EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if any(a in ("-h", "--help") for a in argv):
        parser().print_help()
        return EXIT_OK
    answer, code = run(argv)
    print(json.dumps(answer))
    return code


if __name__ == "__main__":
    sys.exit(main())
