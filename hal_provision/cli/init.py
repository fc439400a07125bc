"""`hal-provision init`: write a small, valid, commented starter description for a new cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..discovery import DiscoveryError, discover, read_records
from ..discovery.gpu import gres_type
from ..files import write_atomic
from ..hostlist import HostlistError, fold, nodeset
from .common import EXIT_FINDINGS, EXIT_UNUSABLE, err, print_findings
from .starter import DEFAULT_CIDR, Build, Starter, gpu_profile, starter_text

# Profile keys a starter cannot do without; `model` gets a stand-in (discovery often cannot read it).
_REQUIRED = ("architecture", "sockets", "cores_per_socket", "threads_per_core", "memory_gib")


def init(
    name: str = typer.Argument(
        ..., help="The cluster's short name (Slurm's ClusterName); default host names start with it."
    ),
    output: Optional[Path] = typer.Option(
        None, "-o", "--output", help="File to write; NAME.yml if omitted.", show_default=False
    ),
    login: Optional[str] = typer.Option(None, help="Login hosts (hostlist); default NAME-login.", show_default=False),
    management: Optional[str] = typer.Option(
        None, help="Management hosts (hostlist), the first runs slurmctld; default NAME-mgmt.", show_default=False
    ),
    compute: Optional[str] = typer.Option(
        None, help="Compute hosts (hostlist); default NAME[01-04].", show_default=False
    ),
    gpus: int = typer.Option(4, min=0, max=64, help="GPUs per compute node (0: a CPU cluster)."),
    gpu_model: str = typer.Option("NVIDIA H100 80GB HBM3", help="GPU model name, as nvidia-smi prints it."),
    gpu_type: Optional[str] = typer.Option(
        None, help="Slurm GRES type; default from the GPU model (h100).", show_default=False
    ),
    gpu_memory_gib: int = typer.Option(80, min=1, help="Memory per GPU in GiB."),
    model: str = typer.Option("GPU server", help="The compute nodes' vendor model (informational)."),
    architecture: str = typer.Option("x86_64", help="x86_64, aarch64 or ppc64le."),
    sockets: int = typer.Option(2, min=1, help="CPU sockets per compute node."),
    cores_per_socket: int = typer.Option(32, min=1, help="Physical cores per socket."),
    threads_per_core: int = typer.Option(2, min=1, help="Hardware threads per core (SMT)."),
    memory_gib: int = typer.Option(512, min=1, help="Installed memory per compute node in GiB."),
    from_discover: Optional[Path] = typer.Option(
        None,
        "--from-discover",
        help="Compute hardware and hosts from `discover` records: a host's records "
        "directory, or a directory of them named after their hosts (playbooks/discover.yml's "
        "bench/out/discovery/). Hosts with the same hardware share a profile and a node group.",
        show_default=False,
    ),
    domain: str = typer.Option("", help="DNS domain; default NAME.example.org.", show_default=False),
    cidr: str = typer.Option(DEFAULT_CIDR, help="The management network's subnet."),
    force: bool = typer.Option(False, "--force", help="Replace FILE if it exists."),
) -> None:
    """Write a starter cluster.yml: the required sections filled from the options (or from `discover`
    records), every optional section commented out with what it brings in and what it needs."""
    output = output or Path(f"{name}.yml")
    if output.exists() and not force:
        _fail(f"{output} exists; give --force to replace it")
    if from_discover is not None:
        if compute is not None:
            _fail("--compute and --from-discover both name the compute hosts: give one")
        builds = _discovered(from_discover)
    else:
        profile = gpu_profile(
            model,
            architecture,
            sockets,
            cores_per_socket,
            threads_per_core,
            memory_gib,
            gpus,
            gpu_model,
            gpu_type or gres_type(gpu_model),
            gpu_memory_gib,
        )
        builds = [Build("gpu" if gpus else "cpu", _hosts(compute or f"{name}[01-04]", "--compute"), profile)]
    starter = Starter(
        name=name,
        login=_hosts(login or f"{name}-login", "--login"),
        management=_hosts(management or f"{name}-mgmt", "--management"),
        builds=builds,
        domain=domain,
        cidr=cidr,
    )
    text = starter_text(starter, str(output))
    _check(text, output)
    try:
        write_atomic(output, text)
    except OSError as exc:
        _fail(f"cannot write {output}: {exc.strerror}")
    hosts = sum(len(nodeset(h)) for h in (starter.login, starter.management, starter.compute))
    err.print(
        f"wrote {output}: cluster '{name}', {hosts} hosts in {len(builds) + 2} node groups; next: "
        f"hal-provision validate {output}",
        markup=False,
    )


def _fail(message: str, code: int = EXIT_UNUSABLE):
    err.print(f"error: {message}", style="bold red", markup=False)
    raise typer.Exit(code)


def _hosts(expr: str, option: str) -> str:
    try:
        return fold(nodeset(expr))
    except HostlistError as exc:
        _fail(f"{option}: {exc}")


def _check(text: str, output: Path) -> None:
    """The starter must validate: options that contradict each other (hosts in two groups, a
    subnet too small) are reported as the checks word them, and nothing is written."""
    from ..findings import has_errors
    from ..loader import validate_text

    loaded = validate_text(text, str(output))
    if loaded.model is None or has_errors(loaded.findings):
        print_findings(loaded.findings)
        _fail(
            f"the options above make no valid description; {output} not written",
            EXIT_UNUSABLE if loaded.model is None else EXIT_FINDINGS,
        )


def _record_dirs(root: Path) -> list[tuple[str, Path]]:
    """(host, records directory): ROOT itself when it holds records, else each sub-directory that does."""
    if not root.is_dir():
        _fail(f"--from-discover: {root} is not a directory")
    try:
        read_records(root)
        return [(root.resolve().name, root)]
    except DiscoveryError:
        pass
    found = []
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            read_records(sub)
        except DiscoveryError:
            continue
        found.append((sub.name, sub))
    if not found:
        _fail(
            f"--from-discover: no discovery records in {root} or its sub-directories "
            "(see `hal-provision discover --help`)"
        )
    return found


def _discovered(root: Path) -> list[Build]:
    by_profile: dict[str, tuple[dict, list[str]]] = {}
    for host, path in _record_dirs(root):
        try:
            profile = discover(read_records(path)).profile()
        except DiscoveryError as exc:
            _fail(f"--from-discover: {host}: {exc}")
        missing = [key for key in _REQUIRED if profile.get(key) is None]
        if profile.get("gpus") and any(d["socket"] is None for d in profile["gpus"]["devices"]):
            missing.append("gpus.devices[].socket")
        if missing:
            _fail(
                f"--from-discover: {host}: the records do not tell {', '.join(missing)} "
                f"(`hal-provision discover --records {path}` shows what they hold)"
            )
        if profile.get("gpus") and not profile["gpus"].get("nvlink"):
            profile["gpus"].pop("nvlink", None)
        by_profile.setdefault(repr(sorted(profile.items())), (profile, []))[1].append(host)
    builds = []
    for profile, hosts in by_profile.values():
        base = f"{profile['gpus']['type']}-node" if profile.get("gpus") else "cpu-node"
        name = base if len(by_profile) == 1 else f"{base}{len(builds) + 1}"
        profile["model"] = profile["model"] or f"{name} (model not discovered)"
        builds.append(Build(name, fold(hosts), profile, origin=f"read by discover on {fold(hosts)} ({root})"))
    return builds
