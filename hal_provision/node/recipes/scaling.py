"""The ResNet-50 scaling benchmark: one job per virtual partition, then throughput and efficiency.

HAL's paper shows the recipe's throughput from 1 GPU to whole racks against ideal linear
scaling. This runs the same measurement on the cluster at hand, on GPUs (gpuxN) or on the CPUs
of whole nodes (cpunN):

    python3 scaling.py submit --script resnet50.swbatch --partitions gpux1,gpux2,gpux4,gpux8 \\
        --out DIR [--steps 50] [--dry-run] [-- RECIPE OPTIONS]
    python3 scaling.py report DIR [--plot DIR/scaling.png] [--no-plot]

`submit` runs, one after another (each waits for its job; no shell),

    swbatch -p VPART --output=DIR/VPART-%j.out --wait SCRIPT --data synthetic --steps-per-epoch N --epochs 1 \\
        [RECIPE OPTIONS]

and then `report`, which reads every DIR/*.out (named VPART-JOBID.out), takes the last
`RESULT {json}` line train_resnet50.py printed, and prints

    GPUs  nodes  images/s  per GPU  scaling efficiency (%)
       1      1    1250.0   1250.0                   100.0
       ...

Scaling efficiency of a run is its images/s per GPU over that of the run with the fewest GPUs.
CPU runs (RESULT "device": "cpu") scale over nodes instead: the table's columns are nodes,
ranks, images/s and per node, and efficiency is per-node throughput against the one-node run's.
One directory holds GPU runs or CPU runs, not both. The plot (images/s against GPUs, log2 axis, measured and ideal) needs matplotlib, imported only
in `plot`; everything else is standard library, so the cluster's python3 runs it as it is.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

RESULT_PREFIX = "RESULT "
COLUMNS = ("GPUs", "nodes", "images/s", "per GPU", "scaling efficiency (%)")
CPU_COLUMNS = ("nodes", "ranks", "images/s", "per node", "scaling efficiency (%)")


class ScalingError(Exception):
    """A job's output holds no usable result, or a command could not run; the message says which."""


@dataclass(frozen=True)
class Run:
    """One benchmark job's figures."""

    gpus: int  # 0 on CPUs
    nodes: int
    images_per_second: float
    batch_per_gpu: int  # per rank on CPUs
    job_id: str = ""
    partition: str = ""
    device: str = "cuda"
    ranks: int = 0  # on CPUs: srun tasks (one per socket)

    @property
    def units(self) -> int:
        """What the run scales over: GPUs, or nodes on CPUs."""
        return self.gpus if self.device == "cuda" else self.nodes

    @property
    def per_unit(self) -> float:
        return self.images_per_second / self.units

    @property
    def per_gpu(self) -> float:
        return self.images_per_second / self.gpus


def parse_result(text: str, source: str = "<output>") -> dict:
    """The last `RESULT {json}` line of a job's output, as a dictionary; ScalingError naming
    `source` when there is none (the job failed or was cut short) or it is not a JSON object."""
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_PREFIX):
            try:
                result = json.loads(line[len(RESULT_PREFIX) :])
            except ValueError as exc:
                raise ScalingError(f"{source}: the RESULT line is not JSON ({exc})") from None
            if not isinstance(result, dict):
                raise ScalingError(f"{source}: the RESULT line is not a JSON object")
            return result
    raise ScalingError(f"{source}: no RESULT line (did the job fail? its output is in that file)")


def run_from_result(result: dict, job_id: str = "", partition: str = "", source: str = "<output>") -> Run:
    cpu = result.get("device") == "cpu"
    try:
        if cpu:
            run = Run(
                0,
                int(result["nodes"]),
                float(result["images_per_second"]),
                int(result["batch_per_rank"]),
                job_id,
                partition,
                "cpu",
                int(result["ranks"]),
            )
        else:
            run = Run(
                int(result["gpus"]),
                int(result["nodes"]),
                float(result["images_per_second"]),
                int(result["batch_per_gpu"]),
                job_id,
                partition,
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise ScalingError(f"{source}: the RESULT line lacks or garbles {exc}") from None
    if run.units < 1 or run.images_per_second <= 0:
        unit = "nodes" if cpu else "gpus"
        raise ScalingError(
            f"{source}: the RESULT line has {unit}={run.units}, images_per_second={run.images_per_second}"
        )
    return run


def load_run(path: Path) -> Run:
    """A Run from one job's output file, named VPART-JOBID.out by `submit`."""
    partition, _, job_id = path.stem.rpartition("-")
    text = path.read_text(errors="replace")
    return run_from_result(parse_result(text, str(path)), job_id, partition, str(path))


def load_runs(directory: Path) -> tuple[list[Run], list[str]]:
    """Every *.out in `directory`: (runs, one problem per file without a usable result). GPU and
    CPU runs do not scale over the same thing: the kind most files hold counts (GPUs on a tie),
    and each run of the other kind is a problem."""
    loaded, problems = [], []
    for path in sorted(directory.glob("*.out")):
        try:
            loaded.append((path, load_run(path)))
        except (ScalingError, OSError) as exc:
            problems.append(str(exc))
    kinds = [run.device for _, run in loaded]
    kind = "cpu" if kinds.count("cpu") > kinds.count("cuda") else "cuda"
    problems += [
        f"{path}: a {run.device} run among {kind} runs: give each kind its own directory"
        for path, run in loaded
        if run.device != kind
    ]
    return [run for _, run in loaded if run.device == kind], problems


def _ordered(runs: list[Run]) -> list[Run]:
    return sorted(runs, key=lambda r: (r.units, r.nodes, r.job_id))


def efficiency(runs: list[Run]) -> list[float]:
    """Per run, in the given order: its images/s per GPU (per node on CPUs) over the smallest
    run's (1.0 = linear)."""
    if not runs:
        return []
    base = _ordered(runs)[0].per_unit
    return [run.per_unit / base for run in runs]


def render_table(runs: list[Run]) -> str:
    """The runs as aligned text, fewest GPUs (nodes) first."""
    ordered = _ordered(runs)
    cpu = bool(ordered) and ordered[0].device == "cpu"
    rows = [CPU_COLUMNS if cpu else COLUMNS] + [
        ((str(r.nodes), str(r.ranks)) if cpu else (str(r.gpus), str(r.nodes)))
        + (f"{r.images_per_second:.1f}", f"{r.per_unit:.1f}", f"{e * 100:.1f}")
        for r, e in zip(ordered, efficiency(ordered))
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in rows) + "\n"


def plot(runs: list[Run], path: str | os.PathLike) -> None:
    """A PNG like the paper's throughput figure: images/s against GPUs on a log2 axis, the
    measured line with its efficiency at each point, and ideal linear scaling from the
    smallest run."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not runs:
        raise ScalingError("no runs to plot")
    ordered = _ordered(runs)
    cpu = ordered[0].device == "cpu"
    gpus = [r.units for r in ordered]
    base = ordered[0]
    fig = Figure(figsize=(6.4, 4.4), dpi=120)
    FigureCanvasAgg(fig)  # the Agg backend, without pyplot's global state
    ax = fig.add_subplot()
    ax.plot(gpus, [base.per_unit * g for g in gpus], linestyle="--", color="gray", label="ideal (linear)")
    ax.plot(gpus, [r.images_per_second for r in ordered], marker="o", label="measured")
    for run, eff in zip(ordered, efficiency(ordered)):
        ax.annotate(
            f"{eff:.0%}",
            (run.units, run.images_per_second),
            textcoords="offset points",
            xytext=(0, 8),
            ha="center",
            fontsize=8,
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(gpus)))
    ax.set_xticklabels([str(g) for g in sorted(set(gpus))])
    ax.minorticks_off()
    ax.set_xlabel("nodes (CPUs)" if cpu else "GPUs")
    ax.set_ylabel("images/s")
    batches = sorted({r.batch_per_gpu for r in ordered})
    ax.set_title(
        f"ResNet-50 training throughput (batch {','.join(map(str, batches))} per {'rank, on CPUs' if cpu else 'GPU'})"
    )
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.fspath(path), format="png")


def swbatch_command(partition: str, script: str, out: str, steps: int, recipe_args: list[str] = ()) -> list[str]:
    """One benchmark job: the script on `partition`, its output in OUT/VPART-JOBID.out; the
    recipe's own options (a smaller --arch or --image-size on CPUs) after the fixed ones."""
    return [
        "swbatch",
        "-p",
        partition,
        f"--output={os.path.join(out, partition)}-%j.out",
        "--wait",
        script,
        "--data",
        "synthetic",
        "--steps-per-epoch",
        str(steps),
        "--epochs",
        "1",
        *recipe_args,
    ]


def submit(
    script: str, partitions: list[str], out: str, steps: int, dry_run: bool = False, recipe_args: list[str] = ()
) -> int:
    """Run the jobs one after another; then report. Exit status: 1 if a job or the report failed."""
    status = 0
    if not dry_run:
        os.makedirs(out, exist_ok=True)
    for partition in partitions:
        argv = swbatch_command(partition, script, out, steps, recipe_args)
        print(f"scaling: {shlex.join(argv)}", flush=True)
        if dry_run:
            continue
        try:
            done = subprocess.run(argv, stdin=subprocess.DEVNULL)
        except OSError as exc:
            print(f"scaling: cannot run swbatch: {exc.strerror or exc}", file=sys.stderr)
            return 1
        if done.returncode != 0:
            print(f"scaling: the {partition} job failed (exit status {done.returncode}); going on", file=sys.stderr)
            status = 1
    if dry_run:
        return 0
    return report(Path(out), Path(out) / "scaling.png") or status


def report(directory: Path, plot_path: Path | None) -> int:
    """Print the table of every result in `directory` and write the plot. 1 if a file had no result."""
    runs, problems = load_runs(directory)
    for problem in problems:
        print(f"scaling: {problem}", file=sys.stderr)
    if not runs:
        print(f"scaling: no results in {directory}", file=sys.stderr)
        return 1
    sys.stdout.write(render_table(runs))
    if plot_path is not None:
        try:
            plot(runs, plot_path)
        except ImportError:
            print("scaling: matplotlib is not installed, so no plot (the table above has the figures)", file=sys.stderr)
        else:
            print(f"scaling: plot written to {plot_path}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scaling.py", description="ResNet-50 scaling benchmark over virtual partitions."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("submit", help="run the job on each virtual partition, then report")
    s.add_argument("--script", required=True, help="the recipe's job script (resnet50.swbatch)")
    s.add_argument("--partitions", required=True, help="virtual partitions, comma-separated, smallest first")
    s.add_argument("--out", required=True, help="directory for the jobs' output files")
    s.add_argument("--steps", type=int, default=50, help="steps per job (default 50)")
    s.add_argument("--dry-run", action="store_true", help="print the swbatch commands only")
    s.add_argument(
        "recipe_args",
        nargs=argparse.REMAINDER,
        help="after --: options for train_resnet50.py in every job (e.g. -- --arch resnet18)",
    )
    r = sub.add_parser("report", help="table and plot of the results in DIR")
    r.add_argument("directory", help="directory of VPART-JOBID.out files")
    r.add_argument("--plot", default=None, help="PNG to write (default DIR/scaling.png)")
    r.add_argument("--no-plot", action="store_true", help="table only")
    args = parser.parse_args(argv)
    if args.command == "submit":
        partitions = [p.strip() for p in args.partitions.split(",") if p.strip()]
        if not partitions or args.steps < 1:
            parser.error("submit needs at least one partition and --steps of at least 1")
        recipe_args = args.recipe_args[1:] if args.recipe_args[:1] == ["--"] else args.recipe_args
        return submit(args.script, partitions, args.out, args.steps, args.dry_run, recipe_args)
    directory = Path(args.directory)
    if not directory.is_dir():
        parser.error(f"{directory} is not a directory")
    return report(directory, None if args.no_plot else Path(args.plot or directory / "scaling.png"))


if __name__ == "__main__":
    sys.exit(main())
