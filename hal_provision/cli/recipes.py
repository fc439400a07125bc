"""`hal-provision recipes`: the model's training recipes, and the scaling benchmark's report."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .common import EXIT_UNUSABLE, checked, err, out

app = typer.Typer(no_args_is_help=True, help="Training recipes (ResNet-50 with PyTorch DDP) and the scaling benchmark.")


@app.command("list")
def list_recipes(
    file: Optional[Path] = typer.Argument(
        None, help="cluster.yml to use; the embedded HAL description if omitted.", show_default=False
    ),
) -> None:
    """Where each recipe is installed, how to submit it, and the benchmark's virtual partitions."""
    from ..model.recipes import cpu_layouts, cpu_scaling_partitions, gpu_partitions, scaling_partitions
    from ..render.recipes import recipe_dir

    _loaded, model = checked(file)
    r = model.recipes
    if r is None:
        out.print(f"cluster '{model.cluster.name}' has no training recipes (recipes)", markup=False)
        return
    d = recipe_dir(model)
    gpus = gpu_partitions(model.swsuite)
    runs = ", ".join(f"{p} ({gpus.get(p, '?')})" for p in scaling_partitions(r, model.swsuite))
    out.print(
        f"resnet50: ResNet-50, PyTorch DistributedDataParallel, {r.batch_per_gpu} images per GPU, AMP",
        style="bold",
        markup=False,
    )
    out.print(f"  installed in      {d} (login, development and compute nodes)", markup=False)
    out.print(
        f"  environment       {('module load ' + r.framework_module) if r.framework_module else 'the job owner'}",
        markup=False,
    )
    out.print(
        f"  submit            swbatch -p {r.virtual_partition} {d}/resnet50.swbatch [--data synthetic|DIR] ...",
        markup=False,
    )
    out.print(f"  wiring probe      swbatch -p gpuxN {d}/resnet50.swbatch --wiring-probe", markup=False)
    out.print(f"  benchmark         {d}/scaling.sh [OUTDIR] [STEPS]: {runs} GPUs", markup=False)
    layouts = cpu_layouts(model)
    if layouts:
        nodes = {vp.name: vp.nodes for vp in model.swsuite.virtual_partitions}
        cpu_runs = ", ".join(f"{p} ({nodes[p]})" for p in cpu_scaling_partitions(model.swsuite))
        for lay in layouts:
            out.print(
                f"  on CPUs           partition {lay.partition} ({lay.profile}): {lay.tasks_per_node} tasks per node "
                f"(one per socket), {lay.cpus_per_task} CPUs and {lay.threads} threads each",
                markup=False,
            )
        out.print(
            f"  submit on CPUs    swbatch -p cpunN {d}/resnet50.swbatch [--arch resnet18] [--image-size 64] ...",
            markup=False,
        )
        out.print(
            f"  benchmark on CPUs {d}/scaling.sh --cpu [OUTDIR [STEPS [OPTIONS]]]: {cpu_runs} nodes", markup=False
        )


@app.command()
def report(
    directory: Path = typer.Argument(
        ..., help="The benchmark's output directory (VPART-JOBID.out files).", show_default=False
    ),
    plot: Optional[Path] = typer.Option(None, "--plot", help="PNG to write (default DIR/scaling.png)."),
    no_plot: bool = typer.Option(False, "--no-plot", help="Only the table."),
) -> None:
    """The scaling table (GPUs, nodes, images/s, per GPU, efficiency; for CPU runs nodes, ranks,
    images/s, per node, efficiency) and the throughput plot from the jobs' RESULT lines."""
    from ..node.recipes.scaling import load_runs, render_table
    from ..node.recipes.scaling import plot as draw

    if not directory.is_dir():
        err.print(f"error: {directory}: not a directory", style="bold red", markup=False)
        raise typer.Exit(EXIT_UNUSABLE)
    runs, problems = load_runs(directory)
    for problem in problems:
        err.print(f"warning: {problem}", style="yellow", markup=False)
    if not runs:
        err.print(f"error: {directory}: no job output with a RESULT line", style="bold red", markup=False)
        raise typer.Exit(EXIT_UNUSABLE)
    out.print(render_table(runs), end="", markup=False, highlight=False)
    if not no_plot:
        target = plot or directory / "scaling.png"
        draw(runs, target)
        out.print(f"plot written to {target}", markup=False)
