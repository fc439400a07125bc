"""docs/cluster-yml.md, generated from the model: each section and key with its type, default and
description (the model's own Field descriptions), and the semantic checks that concern it.

Regenerate with `hal-provision schema --markdown > docs/cluster-yml.md`; tests/unit/cli/test_reference.py
fails while the file differs from what this module makes.

"The checks that concern a key" are found by reading the check modules' source (ast): a check
concerns a key when the key's section and the key's own name both appear in the check as a
string in a finding's path (`error(("slurm", "memory_reserve_mib"), ...)`, module constants
such as `HEALTH = ("health",)` resolved) or as an attribute read on the cluster argument
(`c.slurm.memory_reserve_mib`). It is a reading of the code, not a proof: a key read through a
helper in another module is not seen.
"""

from __future__ import annotations

import ast
import enum
import typing
from functools import cache
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from ..model import Cluster

CHECKS_DIR = Path(__file__).resolve().parents[1] / "checks"
REGENERATE = "hal-provision schema --markdown > docs/cluster-yml.md"
GENERIC = {"name", "description", "kind", "model", "default"}  # in too many checks to tell anything


# ---- types and defaults -----------------------------------------------------------------------


def type_text(annotation) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        parts = [type_text(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (list, tuple):
        return f"list of {type_text(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {type_text(args[0])} to {type_text(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def default_text(field) -> str:
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return "its defaults"
        return f"`{value!r}`" if value not in ([], {}) else ("`[]`" if value == [] else "`{}`")
    value = field.default
    if value is None or value is PydanticUndefined:
        return "null"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`" if value != "" else '`""`'


def _models_in(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models_in(a)]


# ---- the checks ---------------------------------------------------------------------------------


@cache
def check_words() -> dict[str, tuple[str, set[str]]]:
    """Check name -> (its module, the strings of its finding paths and cluster attribute reads)."""
    out: dict[str, tuple[str, set[str]]] = {}
    for path in sorted(CHECKS_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {
            t.id: {e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple)
            for t in node.targets
            if isinstance(t, ast.Name)
        }
        for fn in tree.body:
            if not isinstance(fn, ast.FunctionDef) or not any(
                isinstance(d, ast.Name) and d.id == "check" for d in fn.decorator_list
            ):
                continue
            param = fn.args.args[0].arg if fn.args.args else "c"
            words: set[str] = set()
            for node in ast.walk(fn):
                if isinstance(node, ast.Tuple):
                    for e in node.elts:
                        inner = e.value if isinstance(e, ast.Starred) else e
                        if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                            words.add(inner.value)
                        elif isinstance(inner, ast.Name):
                            words |= constants.get(inner.id, set())
                elif isinstance(node, ast.Name) and node.id in constants:
                    words |= constants[node.id]
                elif isinstance(node, ast.Attribute):
                    chain, base = [], node
                    while isinstance(base, ast.Attribute):
                        chain.append(base.attr)
                        base = base.value
                    if isinstance(base, ast.Name) and base.id == param:
                        words |= set(chain)
            out[fn.name] = (path.stem, words)
    return out


def checks_for(section: str, key: str | None) -> list[str]:
    found = []
    for name, (_module, words) in check_words().items():
        if section in words and (key is None or (key not in GENERIC and key in words)):
            found.append(name)
    return sorted(found)


def _check_list(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names) if names else ""


# ---- the document -------------------------------------------------------------------------------


def reference_markdown() -> str:
    out = [
        "# cluster.yml reference",
        "",
        f"Generated from the model (`hal_provision/model/`) by `{REGENERATE}`; do not edit.",
        "A test fails when this file is stale. `hal-provision init` writes a starter description;",
        "`inventory/hal/cluster.yml` is a complete one.",
        "",
        "Checks: the semantic checks (`hal_provision/checks/`) that report on or read the key, found by",
        "reading their source (see `hal_provision/cli/reference.py`); structural errors (a missing key, a",
        "wrong type, an unknown key) come from the model itself and are not listed.",
        "",
        "## Sections",
        "",
        "| section | type | default | description | checks |",
        "|---|---|---|---|---|",
    ]
    for key, field in Cluster.model_fields.items():
        out.append(
            f"| `{key}` | {type_text(field.annotation)} | {default_text(field)} | "
            f"{_cell(field.description)} | {_check_list(checks_for(key, None))} |"
        )
    seen: set[type[BaseModel]] = set()
    for key, field in Cluster.model_fields.items():
        for model in _models_in(field.annotation):
            _model_tables(model, key, key, seen, out)
    return "\n".join(out) + "\n"


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _model_tables(model: type[BaseModel], section: str, where: str, seen: set, out: list[str]) -> None:
    if model in seen:
        return
    seen.add(model)
    out += [
        "",
        f"## {model.__name__}",
        "",
        f"At `{where}`."
        + (
            f" {_cell(model.__doc__.strip().splitlines()[0])}"
            if model.__doc__ and model.__module__.startswith("hal_provision")
            else ""
        ),
        "",
        "| key | type | default | description | checks |",
        "|---|---|---|---|---|",
    ]
    nested = []
    for key, field in model.model_fields.items():
        out.append(
            f"| `{key}` | {type_text(field.annotation)} | {default_text(field)} | "
            f"{_cell(field.description)} | {_check_list(checks_for(section, key))} |"
        )
        nested += [(m, f"{where}.{key}") for m in _models_in(field.annotation)]
    for m, path in nested:
        _model_tables(m, section, path, seen, out)
