#!/usr/bin/env python3
"""The recipe's job script and environment as they would be rendered for nodes like this one.

    python3 bench/cpu_job_script.py OUTDIR [--sockets N]

Loads the embedded HAL description, replaces the hardware profile of its compute nodes (the
AC922s, partition `gpu`, where cpun1/cpun2/cpun4 send jobs) by one that describes this machine
(from os.sched_getaffinity and /sys: cores, hardware threads per core; no GPUs), and writes
OUTDIR/resnet50.swbatch and OUTDIR/recipe.env with hal_provision.render.recipes, so
bench/resnet50_cpu.sh runs the job script's own CPU branch (its case for partition gpu) on
this machine. --sockets N describes the machine's cores as N sockets of cores/N each, so the
branch starts N tasks (bench/resnet50_cpu.sh passes its rank count; a one-socket machine would
otherwise get one task). Prints the layout it derived.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hal_provision.loader import REPO_DEFAULT, load_text  # noqa: E402
from hal_provision.model.recipes import cpu_layouts  # noqa: E402
from hal_provision.render.recipes import job_script, recipe_env  # noqa: E402


def machine_cores() -> tuple[int, int]:
    """(physical cores, hardware threads per core) of the CPUs this process may run on."""
    cpus = sorted(os.sched_getaffinity(0))
    cores = set()
    for cpu in cpus:
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(
                (base.joinpath("physical_package_id").read_text().strip(), base.joinpath("core_id").read_text().strip())
            )
        except OSError:
            cores.add(("0", str(cpu)))
    return len(cores), max(1, len(cpus) // len(cores))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir")
    parser.add_argument("--sockets", type=int, default=None, help="describe the cores as N sockets")
    args = parser.parse_args()
    cores, smt = machine_cores()
    sockets = args.sockets or 1
    if cores % sockets:
        parser.error(f"{cores} cores do not split into {sockets} sockets")
    model = load_text(REPO_DEFAULT.read_text(encoding="utf-8"), str(REPO_DEFAULT)).model
    model.hardware["ac922"] = model.hardware["ac922"].model_copy(
        update={
            "model": "this machine",
            "sockets": sockets,
            "cores_per_socket": cores // sockets,
            "threads_per_core": smt,
            "gpus": None,
        }
    )
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "resnet50.swbatch").write_text(job_script(model))
    (out / "recipe.env").write_text(recipe_env(model))
    for layout in cpu_layouts(model):
        print(
            f"partition {layout.partition}: {layout.tasks_per_node} task(s) x {layout.cpus_per_task} CPUs, "
            f"{layout.threads} thread(s) each ({cores} cores, SMT{smt}, as {sockets} socket(s))"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
