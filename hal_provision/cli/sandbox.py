"""`hal-provision sandbox up|down|status`: a scaled-down HAL in podman containers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from .. import tools
from ..model import Role
from ..render.writer import WriteError
from ..sandbox import lifecycle
from ..sandbox.derive import DEFAULT_SUBNET, SandboxError
from ..sandbox.image import DEFAULT_RELEASE, RELEASE_SLURM, ImageError
from ..sandbox.wheelhouse import WheelhouseError
from . import runner
from .common import checked, err, out

app = typer.Typer(no_args_is_help=True, help="A scaled-down copy of the cluster in podman containers, on this machine.")

WORKDIR = typer.Option(Path(".hal-sandbox"), "--workdir", help="Where the sandbox's rendered tree lives.")


def _plan(
    file: Optional[Path],
    workdir: Path,
    computes: int,
    subnet: str,
    caches: bool = True,
    cpu_only: bool = False,
    release: Optional[str] = None,
) -> lifecycle.Sandbox:
    _loaded, model = checked(file)
    try:
        return lifecycle.plan(
            model, workdir, computes=computes, subnet=subnet, caches=caches, cpu_only=cpu_only, release=release
        )
    except SandboxError as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(2) from None


def converge_sandbox(
    sb: lifecycle.Sandbox, *extra: str, log: Path | None = None, progress: runner.Progress | None = None
) -> runner.Run:
    """site.yml on the sandbox; Ansible's output into `log` (None: on this process's stdout)."""
    cmd = runner.playbook_cmd("site.yml", lifecycle.inventories(sb.inventory), *extra)
    return runner.run_playbook(cmd, log=log, progress=progress)


@app.command()
def up(
    file: Optional[Path] = typer.Argument(
        None, help="cluster.yml; the embedded HAL description if omitted.", show_default=False
    ),
    workdir: Path = WORKDIR,
    computes: int = typer.Option(2, min=1, max=8, help="Compute nodes in the sandbox."),
    subnet: str = typer.Option(DEFAULT_SUBNET, help="Private podman network for the sandbox."),
    converge: bool = typer.Option(True, help="Run playbooks/site.yml after the containers start."),
    caches: bool = typer.Option(
        True,
        help="Use this machine's caches: the node image that carries the roles' "
        "packages and the wheelhouse of the portal's Python packages. --no-caches: bare "
        "nodes that install everything from the public archives, as a new site's do.",
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Print Ansible's own output as it runs, instead of a progress line and a log file.",
    ),
    cpu_only: bool = typer.Option(
        False,
        "--cpu-only",
        help="Make the compute nodes a CPU-only group: their hardware "
        "profile without GPUs, only the cpu virtual partitions (the recipe trains on CPUs).",
    ),
    release: Optional[str] = typer.Option(
        None,
        help="The nodes' Debian release: "
        + ", ".join(f"{r} (Slurm {v})" for r, v in RELEASE_SLURM.items())
        + ". Default: the release of the description's cluster.os. The configs are rendered for that Slurm; a "
        f"release other than {DEFAULT_RELEASE} runs without the caches (they are Debian 12's).",
        show_default=False,
    ),
) -> None:
    """Build the node image if missing, start the containers, render and run site.yml."""
    sb = _plan(file, workdir, computes, subnet, caches, cpu_only, release)
    if sb.release != DEFAULT_RELEASE and caches:
        out.print(f"release {sb.release}: without this machine's caches (they are Debian 12's)", markup=False)
    try:
        sb = lifecycle.create(sb, log=lambda m: out.print(m, markup=False))
    except (lifecycle.LifecycleError, ImageError, WheelhouseError, WriteError, subprocess.CalledProcessError) as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(2) from None
    lifecycle.record_source(sb, file, computes, subnet, cpu_only)  # sb carries the release
    for stray in lifecycle.strays(sb):  # never removed here: it may still run jobs
        out.print(
            f"container {stray} is no longer in the model: drain it (playbooks/rolling.yml -e hosts={stray}), "
            f"then `podman rm -f {stray}`",
            markup=False,
        )
    if converge:
        log = None if verbose else _log_path(sb)
        try:
            run = converge_sandbox(sb, log=log, progress=None if verbose else runner.Progress("site.yml"))
        except runner.RunnerError as exc:  # no ansible-playbook: say so, no traceback
            err.print(f"error: {exc}", style="bold red", markup=False)
            raise typer.Exit(2) from None
        runner.report(run, "site.yml", sys.stdout if run.returncode == 0 else sys.stderr)
        if run.returncode != 0:
            err.print("fix it and run `hal-provision sandbox up` again", style="bold red", markup=False)
            raise typer.Exit(1)
    login = sb.cluster.groups_with_role(Role.login)[0].hosts
    comps = list(sb.cluster.slurm_nodes)
    # Every line works pasted into a new shell: absolute paths, the console script as invoked.
    ssh = f"ssh -i {sb.ssh.private_key.absolute()} -o UserKnownHostsFile={sb.ssh.known_hosts.absolute()}"
    me = tools.self_command()
    same = (f" {file.absolute()}" if file is not None else "") + (
        f" --workdir {workdir.absolute()}" if workdir != WORKDIR.default else ""
    )
    out.print(
        f"\nSandbox '{sb.name}' is up: {', '.join(sb.hosts)}. Try:\n"
        f"  {ssh} -t root@{sb.addresses[login]} su - haltest\n"
        f"      sinfo -N -o '%N %t %G'\n"
        f"      srun -N{len(comps)} --gres=gpu:{_gpu_type(sb)}:4 bash -c 'hostname; echo $CUDA_VISIBLE_DEVICES'\n"
        f"  {me} verify {Path(sb.inventory).absolute()}\n"
        f"  {me} sandbox status{same}\n"
        f"  {me} sandbox down{same}\n",
        markup=False,
    )


def _log_path(sb: lifecycle.Sandbox) -> Path:
    """Where a converge's Ansible output goes: WORKDIR/logs/site-<time>.log, one per run."""
    logs = sb.workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return (logs / f"site-{time.strftime('%Y%m%d-%H%M%S')}.log").absolute()


def _gpu_type(sb: lifecycle.Sandbox) -> str:
    for p in sb.cluster.hardware.values():
        if p.gpus:
            return p.gpus.type
    return "gpu"


@app.command()
def down(
    file: Optional[Path] = typer.Argument(None, help="cluster.yml the sandbox was made from.", show_default=False),
    workdir: Path = WORKDIR,
) -> None:
    """Remove every container, network and volume the sandbox made, and its rendered tree (the
    tests' screenshots stay in WORKDIR/screenshots)."""
    _loaded, model = checked(file)
    name = lifecycle.sandbox_name(model)  # no derivation: whatever --computes it was made with
    try:
        lifecycle.destroy(name, workdir, log=lambda m: out.print(m, markup=False))
    except lifecycle.LifecycleError as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(2) from None
    out.print(f"sandbox '{name}' is gone", markup=False)


@app.command()
def status(file: Optional[Path] = typer.Argument(None, show_default=False), workdir: Path = WORKDIR) -> None:
    """List the sandbox's containers."""
    _loaded, model = checked(file)
    name = lifecycle.sandbox_name(model)
    cs = lifecycle.containers(name)
    if not cs:
        out.print(f"sandbox '{name}' is not running", markup=False)
        raise typer.Exit(1)
    for c in cs:
        out.print(f"{c['Names'][0]}\t{c['State']}", markup=False)


@app.command()
def bundle(
    workdir: Path = WORKDIR,
    out_dir: Path = typer.Option(
        ...,
        "--out",
        help="Directory to write the bundle, its manifest and current.json into (created; other files there are kept).",
        show_default=False,
    ),
    valid_days: int = typer.Option(30, "--valid-days", min=1, max=3650, help="Days until the release expires."),
    keys: Optional[Path] = typer.Option(
        None, "--keys", help="The release-key directory (as `hal-provision bundle`'s).", show_default=False
    ),
) -> None:
    """Build the node bundle of the sandbox's model as it renders it (its own connection settings and harness
    changes in the tree, as `sandbox up` rendered it last) into DIR, its release signed with the cluster's key:
    `hal-provision bundle` for the sandbox of a pull-mode cluster, which `plan` names on it."""
    from .bundle import require_pull, write_bundle

    if not (workdir / lifecycle.MODEL).is_file():
        err.print(
            f"error: no sandbox at {workdir} (no {lifecycle.MODEL}): `hal-provision sandbox up` makes one",
            style="bold red",
            markup=False,
        )
        raise typer.Exit(2)
    sb = lifecycle.load(workdir)
    require_pull(sb.cluster)
    write_bundle(sb.cluster, lifecycle.rendered_files(sb), out_dir, valid_days, keys)
