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
from ..hostlist import fold
from ..sandbox import lifecycle
from ..sandbox.baremetal import BareMetalError, ensure_libvirtd
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
    bare_metal: int = 0,
) -> lifecycle.Sandbox:
    _loaded, model = checked(file)
    try:
        return lifecycle.plan(
            model,
            workdir,
            computes=computes,
            subnet=subnet,
            caches=caches,
            cpu_only=cpu_only,
            release=release,
            bare_metal=bare_metal,
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
    bare_metal: int = typer.Option(
        0,
        "--bare-metal",
        min=0,
        max=4,
        help="Make the compute nodes N QEMU guests with empty disks that boot the model's image from the "
        "management node (DHCP, iPXE, HTTP), powered through a Redfish BMC emulator, then enrolled and converged "
        "by pull mode (needs a description with a `provisioning` section, /dev/kvm and libvirt).",
        show_default=False,
    ),
) -> None:
    """Build the node image if missing, start the containers, render and run site.yml."""
    sb = _plan(file, workdir, computes, subnet, caches, cpu_only, release, bare_metal)
    if sb.release != DEFAULT_RELEASE and caches:
        out.print(f"release {sb.release}: without this machine's caches (they are Debian 12's)", markup=False)
    try:
        sb = lifecycle.create(sb, log=lambda m: out.print(m, markup=False))
    except (
        lifecycle.LifecycleError,
        ImageError,
        WheelhouseError,
        WriteError,
        BareMetalError,
        subprocess.CalledProcessError,
    ) as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(2) from None
    lifecycle.record_source(sb, file, bare_metal or computes, subnet, cpu_only)  # sb carries the release
    for stray in lifecycle.strays(sb):  # never removed here: it may still run jobs
        out.print(
            f"container {stray} is no longer in the model: drain it (playbooks/rolling.yml -e hosts={stray}), "
            f"then `podman rm -f {stray}`",
            markup=False,
        )
    if converge:
        log = None if verbose else _log_path(sb)
        # The guests are enrolled once they boot (Ansible's patterns take names, not hostlist ranges).
        limit = ("--limit", "all" + "".join(f":!{g}" for g in sb.guests)) if sb.guests else ()
        try:
            run = converge_sandbox(sb, *limit, log=log, progress=None if verbose else runner.Progress("site.yml"))
        except runner.RunnerError as exc:  # no ansible-playbook: say so, no traceback
            err.print(f"error: {exc}", style="bold red", markup=False)
            raise typer.Exit(2) from None
        runner.report(run, "site.yml", sys.stdout if run.returncode == 0 else sys.stderr)
        if run.returncode != 0:
            err.print("fix it and run `hal-provision sandbox up` again", style="bold red", markup=False)
            raise typer.Exit(1)
        if sb.guests:
            bring_up_guests(sb, log=_log_path(sb, "baremetal"))
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


def _log_path(sb: lifecycle.Sandbox, what: str = "site") -> Path:
    """Where a converge's Ansible output goes: WORKDIR/logs/<what>-<time>.log, one per run."""
    logs = sb.workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return (logs / f"{what}-{time.strftime('%Y%m%d-%H%M%S')}.log").absolute()


GUEST_BOOT_TIMEOUT_S = 600


def bring_up_guests(sb: lifecycle.Sandbox, log: Path) -> dict[str, dict[str, float]]:
    """The bare-metal guests from power-off to idle in Slurm, as a site brings up new nodes: powered
    on through their BMC (Redfish), booted from the network, their new SSH host keys recorded when
    they answer, the pull-mode bundle published, each enrolled (playbooks/enroll.yml: the munge key,
    hal-converge, a converge from the bundle) and waited for until Slurm has it idle. Each step's
    seconds since power-on per guest go to WORKDIR/baremetal-timings.json (bench/baremetal.py)."""
    import json

    from .. import hostkeys
    from ..bmc import BmcError, power as bmc
    from .bundle import write_bundle

    guests = list(sb.guests)
    names = fold(guests)
    say = lambda m: out.print(m, markup=False)  # noqa: E731
    try:
        ensure_libvirtd(say)  # /dev/kvm as libvirt needs it, whatever a node's boot did to it
    except BareMetalError as exc:
        _fail_up(str(exc))
    try:
        found = bmc.targets(sb.cluster, guests)
        results = bmc.run(found, bmc.load_credentials(found), "on")
    except BmcError as exc:
        _fail_up(f"the guests' BMC: {exc}")
    started = time.monotonic()
    failed = [r for r in results if not r.ok]
    if failed:
        _fail_up("; ".join(f"{r.host}: power on: {r.outcome}" for r in failed))
    say(f"{names}: powered on through their BMC (Redfish)")
    timings: dict[str, dict[str, float]] = {h: {} for h in guests}

    def booted(host: str, seconds: float) -> None:
        timings[host]["ssh_s"] = round(seconds, 1)
        say(f"{host}: booted its image, sshd answers after {seconds:.0f} s")

    nodes = {h: (sb.addresses[h], sb.ssh.known_hosts) for h in guests}
    _came, waiting = hostkeys.await_new(nodes, {}, GUEST_BOOT_TIMEOUT_S, booted)
    if waiting:
        _fail_up(
            f"{fold(waiting)}: no sshd after {GUEST_BOOT_TIMEOUT_S} s: see their consoles, "
            f"{sb.workdir / 'logs'}/<host>-console.log"
        )
    bundles = sb.workdir / "bundles"
    write_bundle(sb.cluster, lifecycle.rendered_files(sb), bundles, 30, None)
    inventories = lifecycle.inventories(sb.inventory)
    for playbook, extra in (
        ("publish.yml", ("-e", f"bundle_dir={bundles.absolute()}")),
        ("enroll.yml", ("--limit", ",".join(guests))),
        (
            "reimage.yml",
            ("-e", f"reimage_hosts={names}", "-e", "reimage_reason=enrolled", "--tags", "wait"),
        ),
    ):
        run = runner.run_playbook(runner.playbook_cmd(playbook, inventories, *extra), log=log)
        if run.returncode != 0:
            runner.report(run, playbook, sys.stderr)
            _fail_up(f"{playbook} failed on the guests (Ansible's output: {log})")
        now = round(time.monotonic() - started, 1)
        for host in guests:
            timings[host][{"publish.yml": "published_s", "enroll.yml": "enrolled_s"}.get(playbook, "idle_s")] = now
        say(f"{playbook}: done after {now:.0f} s since power-on")
    (sb.workdir / "baremetal-timings.json").write_text(json.dumps(timings, indent=1, sort_keys=True) + "\n")
    say(f"{names}: idle in Slurm {max(t['idle_s'] for t in timings.values()):.0f} s after power-on")
    return timings


def _fail_up(message: str) -> None:
    err.print(f"error: {message}", style="bold red", markup=False)
    err.print("fix it and run `hal-provision sandbox up` again", style="bold red", markup=False)
    raise typer.Exit(1)


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
