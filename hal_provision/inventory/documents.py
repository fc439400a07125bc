"""The rendered inventory's files parsed as Ansible's yaml inventory plugin reads a directory:
in file-name order (Ansible reads a directory sorted), with PyYAML's safe loader (the YAML 1.1
resolver Ansible's own loader uses, here through libyaml)."""

from __future__ import annotations

import gc
from contextlib import contextmanager

SUFFIXES = (".yml", ".yaml")


def parse_documents(files: dict[str, str], skip_unreadable: bool = False) -> list[dict]:
    """One mapping per file of FILES ({path: text}), in path order; an empty file is {}.
    A file that is not YAML raises yaml.YAMLError, or is left out with `skip_unreadable`
    (an inventory Ansible could not read either: its groups stay unknown)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = []
    with cycle_collection_paused():
        for path in sorted(files):
            try:
                out.append(yaml.load(files[path], Loader=loader) or {})  # noqa: S506 - safe loader
            except yaml.YAMLError:
                if not skip_unreadable:
                    raise
    return out


def tree_documents(tree: dict[str, str], skip_unreadable: bool = False) -> list[dict]:
    """The inventory/*.yml (and *.yaml) files of a rendered tree ({relative path: text}, as
    render_all has it or a rendered directory holds it), parsed."""
    return parse_documents(
        {path: text for path, text in tree.items() if path.startswith("inventory/") and path.endswith(SUFFIXES)},
        skip_unreadable,
    )


@contextmanager
def cycle_collection_paused():
    """Building a large tree of fresh dicts makes the cycle collector run again and again over
    every object so far, though none of them can be garbage: with it paused, parsing the
    10,000-node inventory takes 0.45 s instead of 1.4 s. (Reference counting still frees.)"""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
