"""`hal-provision diagram`: the cluster's architecture as a picture, laid out by Graphviz's `dot`.

The drawing itself is the pure renderer hal_provision.render.diagram (DOT source); this command
runs `dot` on it and writes the result, atomically, so a failed run leaves an earlier picture
as it was.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import NoReturn, Optional

import graphviz
import typer

from ..files import write_atomic
from ..render.diagram import PATH, render
from .common import EXIT_UNUSABLE, checked, err, out


class Format(str, Enum):
    svg = "svg"
    png = "png"
    dot = "dot"


SUFFIXES = {".svg": Format.svg, ".png": Format.png, ".dot": Format.dot, ".gv": Format.dot}

NO_DOT = (
    "error: Graphviz's `dot` program is not installed (or not on PATH): install the Debian package "
    "graphviz (apt-get install graphviz), or write the DOT source with --format dot"
)


def diagram(
    file: Optional[Path] = typer.Argument(
        None, help="cluster.yml to use; the embedded HAL description if omitted.", show_default=False
    ),
    output: Optional[Path] = typer.Option(
        None,
        "-o",
        "--output",
        show_default=False,
        help="File to write (or an existing directory to write it into); default <cluster>-diagram.<format> here.",
    ),
    fmt: Optional[Format] = typer.Option(
        None,
        "--format",
        case_sensitive=False,
        show_default=False,
        help="svg, png, or dot (the Graphviz source). Default: from OUTPUT's suffix, else svg.",
    ),
) -> None:
    """Draw the cluster's architecture: users, login, compute, the InfiniBand fabric and storage
    top down, management, services and networks on the side."""
    fmt = _format(output, fmt)
    _loaded, model = checked(file)
    default_name = f"{model.cluster.name}-diagram.{fmt.value}"
    target = output or Path(default_name)
    if target.is_dir():
        target = target / default_name
    source = render(model)[PATH]
    if fmt is Format.dot:
        data = source.encode("utf-8")
    else:
        try:
            data = graphviz.Source(source, engine="dot").pipe(format=fmt.value, quiet=True)
        except graphviz.ExecutableNotFound:
            _fail(NO_DOT)
        except graphviz.CalledProcessError as exc:
            detail = (exc.stderr or b"").decode("utf-8", "replace").strip().splitlines()
            _fail(f"error: dot could not lay out the diagram: {detail[-1] if detail else exc}")
        except OSError as exc:  # found but not runnable (permissions, a file still being written)
            _fail(f"error: cannot run Graphviz's dot: {exc.strerror or exc}")
    try:
        write_atomic(target, data)
    except OSError as exc:
        _fail(f"error: cannot write {target}: {exc.strerror or exc}")
    out.print(f"drew cluster '{model.cluster.name}' into {target} ({fmt.value}, {len(data):,} bytes)", markup=False)


def _format(output: Optional[Path], fmt: Optional[Format]) -> Format:
    """--format, else OUTPUT's suffix, else svg; a suffix that says otherwise is an error."""
    suffix = output.suffix.lower() if output is not None and not output.is_dir() else ""
    by_suffix = SUFFIXES.get(suffix)
    if fmt is None:
        if suffix and by_suffix is None:
            _fail(f"error: cannot tell the format from {output}: name it .svg, .png or .dot, or give --format")
        return by_suffix or Format.svg
    if by_suffix is not None and by_suffix is not fmt:
        _fail(f"error: --format {fmt.value} but {output} ends in {suffix}; give one or make them agree")
    return fmt


def _fail(message: str) -> NoReturn:
    """One readable line on stderr, exit 2, no traceback."""
    err.print(message, style="bold red", markup=False)
    raise typer.Exit(EXIT_UNUSABLE)
