"""`hal-provision plan [NEW] [--from OLD]`: what converging NEW would change, per component,
and which jobs it would lose or strand.

Exit codes as `terraform plan -detailed-exitcode`, not the other commands': 0 no change,
2 changes, 1 blocking (jobs would be lost or stranded, or a Slurm upgrade outside Slurm's
window or a downgrade) or the plan could not be made (an
invalid description, a missing deployed record, unreadable job data).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from ..findings import has_errors
from ..loader import Loaded
from ..model import Cluster
from .common import print_findings

EXIT_ERROR = 1


def plan(
    file: Optional[Path] = typer.Argument(
        None,
        metavar="NEW",
        show_default=False,
        help="The cluster.yml to converge; the embedded HAL description if omitted.",
    ),
    old: Optional[str] = typer.Option(
        None,
        "--from",
        metavar="OLD",
        help="The deployed cluster.yml: a FILE, or REV:PATH of a git repository. "
        "Default: the deployed record DIR.deployed beside the rendered tree.",
    ),
    rendered: Optional[Path] = typer.Option(
        None,
        "--rendered",
        metavar="DIR",
        help="Where NEW is rendered (`hal-provision render NEW -o DIR`): the "
        "commands to apply name DIR/inventory; without --from, DIR.deployed "
        "is OLD. A sandbox's tree (WORKDIR/rendered): both sides as the "
        "sandbox renders them, and its own render and bundle commands. "
        "Default: rendered/NAME, NAME being NEW's cluster name.",
    ),
    jobs: Optional[Path] = typer.Option(None, "--jobs", metavar="FILE", help="Saved `squeue --json` output."),
    nodes: Optional[Path] = typer.Option(None, "--nodes", metavar="FILE", help="Saved `sinfo --json` output."),
    live: Optional[Path] = typer.Option(
        None,
        "--live",
        metavar="INVENTORY",
        help="Read `squeue --json` and `sinfo --json` on the first slurmctld host of INVENTORY (through ansible).",
    ),
    diff: bool = typer.Option(False, "--diff", help="Show a unified diff of every changed file."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as one JSON document, nothing else."),
) -> None:
    """Compare NEW with what is deployed: each changed file, what its change does on which hosts
    (restart, reconfigure, sacctmgr, mmchconfig, file only), and the jobs it would lose or
    strand. Exit 0: no change; 2: changes; 1: blocking jobs, or an error."""
    from .common import err, out  # asked for per call: a console keeps the width it was made with
    from ..plan import PlanError, build
    from ..plan.jobs import parse_jobs, parse_nodes, read_file, run_on_controller
    from ..plan.sources import holds
    from ..plan.report import WIDTH, diffs, renderables, to_json
    from ..render import render_all

    try:
        new_loaded, new_model = _checked(_load(file), "NEW")
        tree_dir = _tree_dir(rendered, new_model)
        sandbox = _sandbox_of(tree_dir)
        render_tree = sandbox.render if sandbox else render_all
        old_tree, old_label = _old_side(old, rendered, new_model, render_tree)
        if live is not None and (jobs is not None or nodes is not None):
            raise PlanError("--live reads the jobs and nodes itself: give it without --jobs and --nodes")
        if live is not None:
            jobs_text, nodes_text = (run_on_controller(live, f"{c} --json") for c in ("squeue", "sinfo"))
            job_list = parse_jobs(jobs_text, f"squeue --json on {live}")
            node_map = parse_nodes(nodes_text, f"sinfo --json on {live}")
        else:
            job_list = parse_jobs(read_file(jobs, "--jobs"), f"--jobs {jobs}") if jobs is not None else None
            node_map = parse_nodes(read_file(nodes, "--nodes"), f"--nodes {nodes}") if nodes is not None else None
        new_tree = render_tree(new_model)
        named = [str(file)] if file is not None else []
        if sandbox:  # its own render (derived model, harness changes) and bundle, in its work directory
            render = shlex.join(
                ["hal-provision", "sandbox", "up", *named, *sandbox.up_options(new_model), "--no-converge"]
            )
            bundle_dir = sandbox.workdir / "bundles"
            bundle = shlex.join(
                ["hal-provision", "sandbox", "bundle", "--workdir", str(sandbox.workdir), "--out", str(bundle_dir)]
            )
        else:
            render = shlex.join(["hal-provision", "render", *named, "-o", str(tree_dir)])
            bundle_dir = Path("bundles") / new_model.cluster.name  # pull mode: where `bundle` writes, publish.yml reads
            bundle = shlex.join(["hal-provision", "bundle", *named, "--out", str(bundle_dir)])
        result = build(
            old_tree,
            new_tree,
            jobs=job_list,
            nodes=node_map,
            with_diff=diff,
            inventory=str(tree_dir / "inventory"),
            render=None if holds(tree_dir, new_tree) else render,
            bundle_dir=str(bundle_dir),
            bundle=bundle,
        )
    except PlanError as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(EXIT_ERROR) from None
    result.old, result.new = old_label, new_loaded.file

    if as_json:
        print(json.dumps(to_json(result), indent=2, sort_keys=True))
    else:
        width = min(out.width, WIDTH)  # wider than that, a plan is hard to read and to paste
        for renderable in renderables(result, width):
            out.print(renderable, width=width)
        for text in diffs(result):
            out.print(text, markup=False, highlight=False, end="")
    raise typer.Exit(result.exit_code)


@dataclass(frozen=True)
class _Sandbox:
    """A sandbox's rendered tree as the place the plan applies to (`--rendered WORKDIR/rendered`):
    both sides are rendered as `sandbox up` renders them there, from the model it derives with
    the options it was made with, and the render and bundle commands are the sandbox's."""

    workdir: Path

    def render(self, model: Cluster) -> dict[str, str]:
        from ..plan import PlanError
        from ..sandbox import lifecycle
        from ..sandbox.derive import SandboxError
        from ..sandbox.overlay import SANDBOX_INVENTORY

        try:
            files = lifecycle.rendered_files(lifecycle.made_again(self.workdir, model))
        except SandboxError as exc:
            raise PlanError(f"the sandbox at {self.workdir} cannot be made of it: {exc}") from None
        files.pop(SANDBOX_INVENTORY)  # its connection settings, which no converge records
        return files

    def up_options(self, model: Cluster) -> list[str]:
        from ..sandbox import lifecycle

        return lifecycle.up_options(self.workdir, model)


def _sandbox_of(tree_dir: Path) -> Optional[_Sandbox]:
    from ..sandbox import lifecycle

    workdir = lifecycle.workdir_of(tree_dir)
    return _Sandbox(workdir) if workdir is not None else None


def _tree_dir(rendered: Optional[Path], new_model: Cluster) -> Path:
    """The rendered tree the apply reads (and, without --from, whose record is OLD)."""
    return rendered if rendered is not None else Path("rendered") / new_model.cluster.name


def _load(file: Optional[Path]) -> Loaded:
    from ..loader import validate

    return validate(file)


def _checked(loaded: Loaded, side: str, *, findings: bool = True) -> tuple[Loaded, Cluster]:
    """The description's findings on stderr (with `findings=False` only when they end the plan);
    an unusable or invalid one ends the plan."""
    from ..plan import PlanError

    invalid = loaded.model is None or has_errors(loaded.findings)
    if findings or invalid:
        print_findings(loaded.findings)
    if invalid:
        raise PlanError(f"{side} ({loaded.file}) is not a valid description: nothing planned")
    return loaded, loaded.model


def _old_side(
    spec: Optional[str], rendered: Optional[Path], new_model: Cluster, render_tree
) -> tuple[dict[str, str], str]:
    """OLD's rendered tree (by `render_tree`) and where it came from: --from FILE, --from REV:PATH,
    or the record."""
    from ..plan import PlanError
    from ..plan.sources import git_show, is_git_spec, read_record, record_dir
    from ..loader import validate_text

    if spec is None:
        record = record_dir(_tree_dir(rendered, new_model))
        return read_record(record), str(record)
    if is_git_spec(spec):
        loaded = validate_text(git_show(spec), spec)
    elif not Path(spec).is_file():
        raise PlanError(f"--from {spec}: no such file (give the deployed cluster.yml, or REV:PATH in git)")
    else:
        loaded = _load(Path(spec))
    # OLD's warnings are those of what runs already, mostly NEW's again: printed, they doubled
    # every warning; NEW's are the ones this converge is about.
    _loaded, model = _checked(loaded, "OLD", findings=False)
    return render_tree(model), spec
