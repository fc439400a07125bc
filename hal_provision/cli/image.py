"""`hal-provision image build|list|prune`: the node images of the model's provisioning section,
in the image store of the host it runs on (the management node). Thin over images/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from ..images import build as store_lib
from ..images import recipe as recipes
from ..images.debian import ImageError
from .common import checked, err, out

app = typer.Typer(
    no_args_is_help=True,
    help="Node images for network boot: build them from the model (debootstrap, the roles' packages, a "
    "squashfs root), list the store, prune old versions.",
)
EXIT_UNUSABLE = 2
FILE_ARG = typer.Argument(None, help="cluster.yml; the embedded HAL description if omitted.", show_default=False)
STORE_OPT = typer.Option(None, "--store", help="The image store (default: provisioning.image_store).")


def _fail(message: str, code: int = EXIT_UNUSABLE) -> None:
    err.print(f"error: {message}", style="bold red", markup=False)
    raise typer.Exit(code)


def _provisioning(file: Optional[Path]):
    _loaded, model = checked(file)
    if model.provisioning is None:
        _fail("the description has no `provisioning` section (no node images to build)")
    return model, model.provisioning


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


@app.command("build")
def build_cmd(
    file: Optional[Path] = FILE_ARG,
    names: Optional[List[str]] = typer.Option(None, "--image", help="Build only this image (repeatable)."),
    store: Optional[Path] = STORE_OPT,
    force: bool = typer.Option(False, "--force", help="Build again even when the version is in the store."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only each image's result line."),
) -> None:
    """Build each image of the model that the store lacks, as the model's version (a hash of what goes in)."""
    model, prov = _provisioning(file)
    wanted = list(names or prov.images)
    unknown = [n for n in wanted if n not in prov.images]
    if unknown:
        _fail(f"no image {', '.join(unknown)} under provisioning.images (known: {', '.join(prov.images)})")
    for name in wanted:
        bad = recipes.unknown_roles(prov.images[name].roles)
        if bad:
            _fail(
                f"provisioning.images.{name}.roles: {', '.join(bad)} {'is not a role' if len(bad) == 1 else 'are not roles'} of roles/"
            )
    target = store or Path(prov.image_store)
    for name in wanted:
        data = recipes.of_model(prov, name)
        try:
            built = store_lib.build(
                name,
                data,
                target,
                force=force,
                log=(lambda _m: None) if quiet else (lambda m: out.print(m, markup=False)),
            )
        except ImageError as exc:
            _fail(f"image {name}: {exc}", code=1)
        files = built.manifest["files"]
        out.print(
            f"{name}@{built.version}: {built.path} (root {_size(files['root.squashfs']['size'])}, kernel and initramfs "
            f"{_size(files['vmlinuz']['size'] + files['initrd.img']['size'])})",
            markup=False,
        )


@app.command("list")
def list_cmd(
    file: Optional[Path] = FILE_ARG,
    store: Optional[Path] = STORE_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print the store as JSON."),
) -> None:
    """List the store's images and versions, and which version the model boots."""
    _model, prov = _provisioning(file)
    current = {name: recipes.version(recipes.of_model(prov, name)) for name in prov.images}
    target = store or Path(prov.image_store)
    rows = [
        {
            "name": b.name,
            "version": b.version,
            "in_model": current.get(b.name) == b.version,
            "size": sum(f["size"] for f in b.manifest["files"].values()),
            "built_at": b.manifest.get("built_at"),
            "path": str(b.path),
        }
        for b in store_lib.list_store(target)
    ]
    missing = [
        {"name": n, "version": v, "in_model": True, "size": None, "built_at": None, "path": None}
        for n, v in current.items()
        if not any(r["name"] == n and r["version"] == v for r in rows)
    ]
    if as_json:
        print(json.dumps(rows + missing, indent=2))
        return
    for r in rows:
        mark = "model" if r["in_model"] else ""
        out.print(f"{r['name']}@{r['version']}  {_size(r['size'])}  {mark}".rstrip(), markup=False)
    for r in missing:
        out.print(f"{r['name']}@{r['version']}  not built (hal-provision image build)", markup=False)


@app.command("prune")
def prune_cmd(
    file: Optional[Path] = FILE_ARG,
    store: Optional[Path] = STORE_OPT,
    keep: int = typer.Option(1, "--keep", min=0, help="Older versions kept per image besides the model's."),
) -> None:
    """Remove old versions: every image keeps the model's version and the KEEP newest others."""
    _model, prov = _provisioning(file)
    current = {name: recipes.version(recipes.of_model(prov, name)) for name in prov.images}
    removed = store_lib.prune(store or Path(prov.image_store), current, keep)
    for b in removed:
        out.print(f"removed {b.name}@{b.version}", markup=False)
    if not removed:
        out.print("nothing to prune", markup=False)
