"""`hal-provision storage plan|bench|dlio|report|probe`: thin commands over hal_provision.model.gpfs_plan and
the node programs (the fio benchmark, the DL I/O benchmark, the responsiveness probe)."""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path
from typing import List, Optional

import typer

from ..node import dl_io_bench as dlio_lib
from ..node import storage_bench as bench_lib
from ..node.monitoring import probe as probe_lib
from ..model import gpfs_tuning
from ..model import gpfs_plan as gpfs
from . import runner
from .common import checked, err, out

app = typer.Typer(
    no_args_is_help=True,
    help="Spectrum Scale tuning plans, the DL-style storage benchmarks "
    "(fio; small files in Python), the responsiveness probe.",
)

REPO = Path(__file__).resolve().parents[2]
BENCH_PLAYBOOK = REPO / "playbooks" / "storage-bench.yml"
DLIO_PLAYBOOK = REPO / "playbooks" / "dl-io-bench.yml"
EXIT_UNUSABLE = 2


def _fail(message: str, code: int = EXIT_UNUSABLE) -> None:
    err.print(f"error: {message}", style="bold red", markup=False)
    raise typer.Exit(code)


@app.command()
def plan(
    current: Path = typer.Option(
        ..., "--current", help="Output of `mmlsconfig -Y` (saved to a file).", exists=True, dir_okay=False
    ),
    file: Optional[Path] = typer.Argument(
        None, help="cluster.yml; the embedded HAL description if omitted.", show_default=False
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON (what the gpfs role reads)."),
) -> None:
    """Show what mmchconfig must change to reach the model's tuning, and what needs a restart."""
    _loaded, model = checked(file)
    if model.storage.gpfs is None:
        _fail("the description has no storage.gpfs section")
    try:
        settings = gpfs.parse_mmlsconfig(current.read_text())
    except gpfs.MmlsconfigError as exc:
        _fail(f"{current}: {exc}")
    result = gpfs.plan(gpfs_tuning.desired_state(model.storage.gpfs), settings)
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
        return
    for setting in result.overrides:
        out.print(
            f"left alone: {setting.attribute} {setting.value} on {','.join(setting.nodes)} (not a node class "
            "of the model; remove it with mmchconfig ...=DEFAULT -N if unintended)",
            markup=False,
        )
    if not result.changes:
        out.print("GPFS tuning matches the model: nothing to change", markup=False)
        return
    for change in result.changes:
        out.print(change.describe(), markup=False)
    out.print("\ncommands:", markup=False)
    for argv in result.commands():
        out.print("  " + " ".join(argv), markup=False)
    for deferred in result.deferred:
        out.print(f"  (needs GPFS down on every node) {deferred}", markup=False)
    if result.restart():
        scopes = ", ".join("all nodes" if s == gpfs_tuning.CLUSTER else s for s in result.restart())
        out.print(f"restart GPFS for the changes to take effect on: {scopes}", markup=False)


def _gather(
    results: Optional[Path],
    prefix: str,
    run_here,
    error: type[Exception],
    playbook: Path,
    inventory: Optional[Path],
    extra_vars: dict,
) -> Path:
    """The directory of per-node JSON results of a benchmark: run_here()'s document (--local:
    run_here is not None) or every chosen node's, through the benchmark's playbook."""
    results = results or Path(tempfile.mkdtemp(prefix=prefix))
    results.mkdir(parents=True, exist_ok=True)
    if run_here is not None:
        try:
            doc = run_here()
        except error as exc:
            _fail(str(exc), 1)
        (results / f"{doc['host']}.json").write_text(json.dumps(doc, sort_keys=True))
        return results
    if inventory is None:
        _fail("give --inventory (the rendered inventory directory) or --local")
    try:
        argv = runner.playbook_cmd(
            playbook.name,
            [inventory],
            "-e",
            json.dumps({**extra_vars, "bench_results": str(results.resolve()), "bench_report": False}),
        )
    except runner.RunnerError as exc:
        _fail(str(exc))
    rc = subprocess.run(argv, cwd=REPO, check=False, env=runner.ansible_env()).returncode
    if rc != 0:
        _fail(f"{playbook.name} failed (exit {rc})", 1)
    return results


@app.command()
def bench(
    mount: Path = typer.Option(..., "--mount", help="Directory on the file system under test (on every node)."),
    inventory: Optional[Path] = typer.Option(
        None, "--inventory", "-i", help="Ansible inventory of the nodes; omit with --local."
    ),
    nodes: str = typer.Option("nfs_clients", "--nodes", help="Inventory hosts or group pattern to run on."),
    size: str = typer.Option("small", "--size", help=f"One of {', '.join(bench_lib.SIZES)}."),
    results: Optional[Path] = typer.Option(None, "--out", help="Where the per-node JSON results go."),
    local: bool = typer.Option(False, "--local", help="Run on this machine only, without Ansible."),
) -> None:
    """Run the DL-style fio benchmark on the chosen nodes and print the per-node and aggregate table."""
    if size not in bench_lib.SIZES:
        _fail(f"unknown size {size!r}; one of {', '.join(bench_lib.SIZES)}")
    here = (lambda: bench_lib.run(mount, size)) if local else None
    results = _gather(
        results,
        "hal-storage-bench-",
        here,
        bench_lib.BenchError,
        BENCH_PLAYBOOK,
        inventory,
        {"bench_nodes": nodes, "bench_mount": str(mount), "bench_size": size},
    )
    report(results)


@app.command()
def dlio(
    dirs: List[str] = typer.Option(
        ..., "--dir", help="NAME=PATH of a directory to compare (repeat), e.g. shared=/home/bench local=/local/bench."
    ),
    inventory: Optional[Path] = typer.Option(
        None, "--inventory", "-i", help="Ansible inventory of the nodes; omit with --local."
    ),
    nodes: str = typer.Option("slurm_nodes", "--nodes", help="Inventory hosts or group pattern to run on."),
    files: int = typer.Option(dlio_lib.FILES, "--files", help="Files in the tree (ImageNet-like sizes)."),
    readers: int = typer.Option(dlio_lib.READERS, "--readers", help="Reader processes."),
    warm: bool = typer.Option(False, "--warm", help="Read from the page cache instead of dropping it first."),
    results: Optional[Path] = typer.Option(None, "--out", help="Where the per-node JSON results go."),
    local: bool = typer.Option(False, "--local", help="Run on this machine only, without Ansible."),
) -> None:
    """Time the DL input pattern (small files read whole in random order) in each directory of the chosen
    nodes and print the comparison table."""
    try:
        named = [dlio_lib.named_dir(d) for d in dirs]
    except argparse.ArgumentTypeError as exc:
        _fail(str(exc))
    if not local and not all(path.is_absolute() for _, path in named):
        _fail("each --dir needs an absolute path on the nodes")
    here = (lambda: dlio_lib.run(named, files, readers, warm=warm)) if local else None
    results = _gather(
        results,
        "hal-dl-io-bench-",
        here,
        dlio_lib.BenchError,
        DLIO_PLAYBOOK,
        inventory,
        {
            "bench_nodes": nodes,
            "bench_dirs": [f"{name}={path}" for name, path in named],
            "bench_files": files,
            "bench_readers": readers,
            "bench_warm": warm,
        },
    )
    try:
        out.print(dlio_lib.table(dlio_lib.load_results(results)), markup=False, end="")
    except dlio_lib.BenchError as exc:
        _fail(str(exc))
    out.print(f"results: {results}", markup=False)


@app.command()
def report(results: Path = typer.Argument(..., help="Directory of per-node JSON results.")) -> None:
    """Print the table of a directory of benchmark results."""
    try:
        out.print(bench_lib.table(bench_lib.load_results(results)), markup=False, end="")
    except bench_lib.BenchError as exc:
        _fail(str(exc))
    out.print(f"results: {results}", markup=False)


@app.command()
def probe(
    roots: List[str] = typer.Argument(..., help="Directories to list, e.g. /home."),
    stat_path: Optional[str] = typer.Option(None, "--stat", help="File to stat (default: each root itself)."),
    host: Optional[str] = typer.Option(None, "--host", help="Host tag (default: this host's name)."),
) -> None:
    """Print one responsiveness sample per directory as InfluxDB line protocol."""
    argv = [*roots] + (["--stat", stat_path] if stat_path else []) + (["--host", host] if host else [])
    raise typer.Exit(probe_lib.main(argv))
