"""`hal-provision bundle [FILE] --out DIR`: the node bundle of pull mode (hal_provision/pull/bundle.py
builds it, hal_provision/release.py signs its release; this command writes them). DIR gets
<version>.tar.gz, <version>.json (the manifest) and current.json (the release, signed with the
cluster's key, made on the first run), which is replaced last; nothing is written on an error,
and a failure while writing leaves no partial file under DIR's names."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..files import write_atomic
from .common import EXIT_UNUSABLE, checked, err, out

FileArg = typer.Argument(None, help="cluster.yml to use; the embedded HAL description if omitted.", show_default=False)


def _fail(message: str) -> None:
    err.print(f"error: {message}", style="bold red", markup=False)
    raise typer.Exit(EXIT_UNUSABLE)


def require_pull(model) -> None:
    if not model.deploy_pull:
        _fail(f"deploy.mode is {model.deploy.mode!r}: a bundle is built for pull mode only (deploy: {{mode: pull}})")


def write_outputs(outputs: dict[str, bytes], directory: Path) -> None:
    """Every output written atomically, the bundle and manifest first and current.json last: a
    reader never sees half a file, and current.json never names a bundle that is not there."""
    for name, data in sorted(outputs.items(), key=lambda item: item[0] == "current.json"):
        write_atomic(directory / name, data)


def bundle(
    file: Optional[Path] = FileArg,
    out_dir: Path = typer.Option(
        ...,
        "--out",
        help="Directory to write the bundle, its manifest and current.json into (created; other files there are kept).",
        show_default=False,
    ),
    valid_days: int = typer.Option(
        30,
        "--valid-days",
        min=1,
        max=3650,
        help="Days until the release expires: a node refuses an expired one, so publish at least this often.",
    ),
    keys: Optional[Path] = typer.Option(
        None,
        "--keys",
        help="The release-key directory (default: $HAL_RELEASE_KEYS, "
        "else ~/.config/hal-provision/release-keys); the cluster's key pair is made "
        "there on the first run.",
        show_default=False,
    ),
) -> None:
    """Build the node bundle of a pull-mode cluster (deploy.mode pull) into DIR: <version>.tar.gz, its manifest
    <version>.json and current.json (the release, signed with the cluster's key), for playbooks/publish.yml to
    publish on the distribution points."""
    from ..render import render_all

    _loaded, model = checked(file)
    require_pull(model)
    write_bundle(model, render_all(model), out_dir, valid_days, keys)


def write_bundle(model, files: dict[str, str], out_dir: Path, valid_days: int, keys: Optional[Path]) -> None:
    """The bundle of `model`'s rendered tree FILES and its signed release written into OUT_DIR,
    and a line saying what was written (`bundle`, and `sandbox bundle` with the sandbox's tree)."""
    from ..pull import bundle as lib
    from .. import release

    if out_dir.exists() and not out_dir.is_dir():
        _fail(f"{out_dir} exists and is not a directory")
    built = lib.build(model, files)
    try:
        outputs = release.sign_outputs(built.outputs(), model.cluster.name, valid_days, keys)
    except (release.ReleaseError, OSError) as exc:
        _fail(f"cannot sign the release: {exc}")
    try:
        write_outputs(outputs, out_dir)
    except OSError as exc:
        _fail(f"cannot write {out_dir}: {exc}")
    signed = release.open_envelope(outputs["current.json"]) or {}
    out.print(
        f"bundle {built.version} for cluster '{model.cluster.name}': {len(built.manifest['files'])} files, "
        f"{len(built.manifest['nodes'])} pull nodes, in {out_dir}; release serial {signed.get('serial')}, "
        f"expires {signed.get('expires')}, signed with {release.key_paths(model.cluster.name, keys)[0]}",
        markup=False,
    )
