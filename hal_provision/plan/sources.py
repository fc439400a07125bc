"""Where the two sides of a plan come from, besides a description rendered in place.

OLD is usually the *deployed record*: site.yml's last play copies the rendered tree's files/
and inventory/ into `<DIR>.deployed/` beside it after a whole-cluster converge, so the plan
compares with what the nodes were last given, not with a description that may have been
edited since. A git revision of cluster.yml is the other way to name it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

COMPARED = ("files/", "inventory/")
"""The parts of a rendered tree that reach the nodes (diagram/ stays on the controller)."""


class PlanError(Exception):
    """A user mistake or an unusable input; the message is one line saying what and what to do."""


def compared(tree: dict[str, str]) -> dict[str, str]:
    """The deployed part of a rendered tree."""
    return {path: text for path, text in tree.items() if path.startswith(COMPARED)}


def record_dir(rendered: Path) -> Path:
    """The deployed record of rendered tree DIR: DIR.deployed, its sibling."""
    return rendered.with_name(rendered.name + ".deployed")


def read_record(record: Path) -> dict[str, str]:
    """The files/ and inventory/ of a deployed record, keyed as render_all keys them."""
    if not record.is_dir():
        raise PlanError(
            f"no deployed record at {record} (site.yml writes it after a whole-cluster converge): "
            "name what is deployed with --from FILE or --from REV:PATH, or converge once"
        )
    tree: dict[str, str] = {}
    try:
        for part in COMPARED:
            base = record / part
            for path in sorted(base.rglob("*")) if base.is_dir() else []:
                if path.is_file():
                    tree[path.relative_to(record).as_posix()] = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"cannot read the deployed record {record}: {exc}") from None
    if not tree:
        raise PlanError(f"the deployed record {record} holds no files/ or inventory/: converge once, or use --from")
    return tree


def holds(rendered: Path, tree: dict[str, str]) -> bool:
    """Whether rendered tree DIR holds `tree` (as `render -o DIR` writes it): each of its files
    with the same text, and no other under files/ (inventory/ may hold more sources, as the
    sandbox's sandbox.yml). The apply commands read DIR: they converge what it holds."""
    wanted = compared(tree)
    try:
        present = {path.relative_to(rendered).as_posix() for path in (rendered / "files").rglob("*") if path.is_file()}
        return present == {p for p in wanted if p.startswith("files/")} and all(
            (rendered / path).read_text(encoding="utf-8") == text for path, text in wanted.items()
        )
    except (OSError, UnicodeDecodeError):
        return False


def is_git_spec(spec: str) -> bool:
    """REV:PATH rather than a file: not an existing path, and a ':' with text on both sides."""
    rev, sep, path = spec.partition(":")
    return not Path(spec).exists() and bool(sep and rev and path)


def git_show(spec: str) -> str:
    """The text of PATH at revision REV, from the git repository that holds PATH.

    PATH is taken relative to the current directory (as a shell user means it), so
    `git -C <PATH's directory> show REV:./<name>` reads it whatever the repository's root.
    """
    rev, _sep, path = spec.partition(":")
    git = shutil.which("git")
    if git is None:
        raise PlanError(f"--from {spec}: git is not installed")
    where = Path(path).parent
    if where.is_dir():
        argv = [git, "-C", str(where), "show", f"{rev}:./{Path(path).name}"]
    else:  # the file's directory is gone from the working tree: the path is the repository's
        argv = [git, "show", f"{rev}:{path}"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PlanError(f"--from {spec}: git show failed: {exc}") from None
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise PlanError(f"--from {spec}: git show failed: {reason}")
    return done.stdout
