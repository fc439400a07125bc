"""Read cluster.yml into the model, keeping the line and column of every key.

Everything a user can get wrong here becomes a Finding (never a traceback): the file is
missing or unreadable, the YAML is malformed, a key is unknown, a value has the wrong type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path as FsPath
from typing import Any

from pydantic import ValidationError

from .findings import Finding, Level
from .model import Cluster

REPO_DEFAULT = FsPath(__file__).resolve().parent.parent / "inventory" / "hal" / "cluster.yml"


def default_path() -> FsPath:
    """The embedded HAL description: packaged copy when installed, the repo's file otherwise."""
    packaged = resources.files("hal_provision").joinpath("data", "hal.yml")
    if packaged.is_file():
        return FsPath(str(packaged))
    return REPO_DEFAULT


class Locator:
    """Maps a model path such as ('nodes', 3, 'hosts') to the (line, column) of its key."""

    def __init__(self, root: Any, file: str):
        self.root = root
        self.file = file

    def position(self, path) -> tuple[int | None, int | None]:
        from ruamel.yaml.comments import CommentedMap, CommentedSeq

        node = self.root
        best: tuple[int | None, int | None] = (None, None)
        for part in path:
            if isinstance(node, CommentedMap) and part in node:
                line, col = node.lc.key(part)
                best = (line + 1, col + 1)
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
                line, col = node.lc.item(part)
                best = (line + 1, col + 1)
                node = node[part]
            else:
                break
        return best

    def locate(self, finding: Finding) -> Finding:
        line, col = self.position(finding.path)
        if line is None:  # e.g. a missing top-level key: point at the start of the document
            line, col = 1, 1
        return finding.located(self.file, line, col)

    def locate_all(self, findings) -> list[Finding]:
        return [self.locate(f) for f in findings]


@dataclass
class Loaded:
    """The outcome of loading: a model (None when unusable) and the findings so far."""

    file: str
    model: Cluster | None
    findings: list[Finding] = field(default_factory=list)
    locator: Locator | None = None


def _yaml():
    """ruamel's round-trip loader: imported only when a file must be reported on line by line."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    return yaml


def load_text(text: str, file: str) -> Loaded:
    """Parse, validate and keep a way back from model paths to lines.

    The fast path parses with libyaml (YAML 1.2-style scalars, duplicate keys refused) and
    locates the checks' findings, when there are any, through libyaml's node tree; any error
    falls back to ruamel's round-trip path, which reports it with line and column.
    """
    bounds = _beyond_bounds(text, file)
    if bounds is not None:
        return Loaded(file, None, [bounds])
    data = _fast_parse(text)
    if data is not None:
        try:
            model = Cluster.model_validate(data)
        except ValidationError:
            pass  # report through the round-trip path below, with positions
        else:
            return Loaded(file, model, [], LazyLocator(text, file))
    return _load_roundtrip(text, file)


def _at(mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "above"


def explain_yaml_error(exc) -> str:
    """What a YAML parser error most often means in a hand-written description, in one line; the
    parser's own words when it is none of the usual ones."""
    problem, context = exc.problem or "", exc.context or ""
    if "mapping values are not allowed here" in problem:
        return (
            "a ':' this line cannot have: it is indented deeper than the key before it, or a plain value "
            "holds ': ' (quote such a value)"
        )
    if "flow sequence" in context or "flow mapping" in context:
        bracket = "[" if "sequence" in context else "{"
        return f"the '{bracket}' opened at {_at(exc.context_mark)} is not closed before this"
    if "'\\t'" in problem or "'\t'" in problem:
        return "a tab: YAML indents with spaces only"
    if "quoted scalar" in context:
        return f"the quoted value opened at {_at(exc.context_mark)} is never closed"
    if "expected <block end>" in problem:
        return (
            "this line's indentation matches no level above it, or a '- ' item and 'key: value' lines share one level"
        )
    if "could not find expected ':'" in problem:
        return "a line inside a mapping without 'key: value': a missing ':' or a wrong indentation"
    if "undefined alias" in problem:
        return f"an alias ({problem.split()[-1]}) with no anchor (&name) before it"
    if "duplicate key" in problem:
        key = problem.split('"')[1] if '"' in problem else "a key"
        return f"key {key} is given twice in the mapping that starts at {_at(exc.context_mark)}: keep one"
    return " ".join(p for p in (context, problem) if p) or "malformed YAML"


def _load_roundtrip(text: str, file: str) -> Loaded:
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        data = _yaml().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        col = mark.column + 1 if mark else None
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or "malformed YAML"
        message = f"YAML syntax: {explain_yaml_error(exc)} (the parser: {problem})"
        return Loaded(file, None, [Finding(Level.error, (), message, "yaml", file, line, col)])
    except YAMLError as exc:
        return Loaded(file, None, [Finding(Level.error, (), f"YAML syntax: {exc}", "yaml", file)])
    locator = Locator(data, file)
    if not isinstance(data, CommentedMap):
        return Loaded(
            file,
            None,
            [Finding(Level.error, (), "the file must be a YAML mapping (key: value)", "yaml", file, 1, 1)],
            locator,
        )
    try:
        model = Cluster.model_validate(data)
    except ValidationError as exc:
        return Loaded(file, None, [locator.locate(f) for f in _schema_findings(exc)], locator)
    return Loaded(file, model, [], locator)


class LazyLocator(Locator):
    """A Locator over libyaml's node tree, composed only when a position is first asked for.

    Gives the positions ruamel's round-trip tree gives (both report a key's and an item's start
    mark) at a fraction of the cost: locating one warning in a 100,000-node description must not
    cost a pure-Python parse of the whole file. Only text the fast path accepted gets here.
    """

    def __init__(self, text: str, file: str):
        self._text = text
        self._root = None
        self.file = file

    @property
    def root(self):
        if self._root is None:
            import yaml

            self._root = yaml.compose(self._text, Loader=_fast_loader(yaml))  # noqa: S506 - safe
        return self._root

    def locate_all(self, findings) -> list[Finding]:
        """Locate every finding with one node tree, then let it go (a large file's tree is
        megabytes; a later `locate` composes it again)."""
        try:
            return super().locate_all(findings)
        finally:
            self._root = None

    def position(self, path) -> tuple[int | None, int | None]:
        import yaml

        node = self.root
        best: tuple[int | None, int | None] = (None, None)
        for part in path:
            if isinstance(node, yaml.MappingNode):
                entry = next((kv for kv in node.value if _key_matches(kv[0], part)), None)
                if entry is None:
                    break
                mark = entry[0].start_mark
                node = entry[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                mark = node.start_mark
            else:
                break
            best = (mark.line + 1, mark.column + 1)
        return best


def _key_matches(key_node, part) -> bool:
    """Whether a mapping key, read as the fast loader reads it, equals a path part."""
    import yaml

    if not isinstance(key_node, yaml.ScalarNode):
        return False
    if isinstance(part, str):  # the usual case: no construction needed
        return key_node.tag == "tag:yaml.org,2002:str" and key_node.value == part
    loader = _fast_loader(yaml)("")
    try:
        return loader.construct_object(key_node, deep=True) == part
    finally:
        loader.dispose()


# What a description may hold, checked on libyaml's event stream (a state machine with no
# recursion) before any parser builds a tree: both builders recurse per level (libyaml's
# composer overflowed the C stack on a 400 KB file of nested brackets; ruamel's raised
# RecursionError at 3,000 levels), and aliases let a small file stand for a huge tree
# ("billion laughs") that validation would walk in full. A real description nests about ten
# levels and uses a few anchors.
MAX_DEPTH = 64
MAX_NODES = 2_000_000
TOO_DEEP = f"YAML nested deeper than {MAX_DEPTH} levels: a cluster description needs about ten"


def _beyond_bounds(text: str, file: str) -> Finding | None:
    """A located error where the text nests deeper than MAX_DEPTH or, with its aliases expanded,
    holds more than MAX_NODES nodes; None within bounds (syntax errors are the parsers' to report)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    sizes: dict[str, int] = {}  # anchor -> its node's size, aliases expanded
    open_nodes: list[list] = []  # [anchor, size so far] per open collection
    total = 0

    def error(event, message: str) -> Finding:
        mark = event.start_mark
        return Finding(Level.error, (), message, "yaml", file, mark.line + 1, mark.column + 1)

    def close(size: int, anchor: str | None) -> None:
        if anchor:
            sizes[anchor] = size
        if open_nodes:
            open_nodes[-1][1] += size

    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if len(open_nodes) >= MAX_DEPTH:
                    return error(event, TOO_DEEP)
                open_nodes.append([event.anchor, 1])
                total += 1
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, size = open_nodes.pop()
                close(size, anchor)
            elif isinstance(event, yaml.ScalarEvent):
                total += 1
                close(1, event.anchor)
            elif isinstance(event, yaml.AliasEvent):
                size = sizes.get(event.anchor, 1)
                total += size
                close(size, None)
            if total > MAX_NODES:
                return error(
                    event,
                    f"YAML stands for more than {MAX_NODES:,} values once its aliases (*name) "
                    "are expanded; write the description without such repetition",
                )
    except yaml.MarkedYAMLError as exc:
        if "nesting depth" in str(exc.problem):  # libyaml's own limit, met while scanning ahead
            mark = exc.problem_mark
            return Finding(Level.error, (), TOO_DEEP, "yaml", file, mark.line + 1, mark.column + 1)
        return None  # malformed: the parsers below report it with its position
    except yaml.YAMLError:
        return None
    return None


def _fast_parse(text: str):
    """Plain data through libyaml, or None when anything is unusual (then ruamel decides)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is a dependency
        return None
    loader_cls = _fast_loader(yaml)
    try:
        data = yaml.load(text, Loader=loader_cls)  # noqa: S506 - a SafeLoader subclass
    except Exception:  # syntax errors, duplicate keys, anything: the slow path reports it
        return None
    return data if isinstance(data, dict) else None


_FAST_LOADER = None


def _fast_loader(yaml):
    """A C-accelerated safe loader that resolves scalars like YAML 1.2 (ruamel's default):
    only true/false are booleans, no sexagesimal numbers (04:00:00 stays a string), no
    yes/no/on/off; and duplicate keys are refused."""
    global _FAST_LOADER
    if _FAST_LOADER is not None:
        return _FAST_LOADER
    import re

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class FastLoader(base):  # type: ignore[misc, valid-type]
        pass

    FastLoader.yaml_implicit_resolvers = {}
    rules = [
        ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
        ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
        (
            "tag:yaml.org,2002:float",
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
            "-+0123456789.",
        ),
        ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ]
    for tag, pattern, first in rules:
        FastLoader.add_implicit_resolver(tag, re.compile(pattern), list(first))

    def construct_mapping(loader, node, deep=False):
        seen = set()
        for key_node, _value in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep=True)

    def construct_int(loader, node):
        value = loader.construct_scalar(node)
        if value.startswith("0o"):
            return int(value[2:], 8)
        return int(value, 0) if value.startswith("0x") else int(value)

    FastLoader.add_constructor("tag:yaml.org,2002:map", construct_mapping)
    FastLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    _FAST_LOADER = FastLoader
    return FastLoader


def load(path: str | FsPath | None = None) -> Loaded:
    fs_path = FsPath(path) if path is not None else default_path()
    shown = str(path) if path is not None else str(fs_path)
    try:
        text = fs_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Loaded(shown, None, [Finding(Level.error, (), "no such file", "io", shown)])
    except IsADirectoryError:
        return Loaded(shown, None, [Finding(Level.error, (), "is a directory, not a cluster file", "io", shown)])
    except (OSError, UnicodeDecodeError) as exc:
        return Loaded(shown, None, [Finding(Level.error, (), f"cannot read: {exc}", "io", shown)])
    return load_text(text, shown)


def validate(path: str | FsPath | None = None) -> Loaded:
    """Load + check in one call: what every command needs before it may render anything."""
    return _checked(load(path))


def validate_text(text: str, file: str) -> Loaded:
    """The same for a description that is not a file (`plan --from REV:PATH` reads it from git)."""
    return _checked(load_text(text, file))


def _checked(loaded: Loaded) -> Loaded:
    if loaded.model is not None:
        # Imported here: the inventory plugin reads a cached inventory through this module and
        # must not pay for the checks it does not run.
        from .checks import run_all

        found = run_all(loaded.model)
        located = loaded.locator.locate_all(found) if loaded.locator else found
        order = {Level.error: 0, Level.warning: 1, Level.info: 2}
        loaded.findings.extend(sorted(located, key=lambda f: (order[f.level], f.line or 0, f.column or 0)))
    return loaded


def _schema_findings(exc: ValidationError) -> list[Finding]:
    out = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not _is_pydantic_tag(p))
        kind = err["type"]
        if kind == "extra_forbidden":
            msg = f"unknown key {loc[-1]!r}" + _suggest(loc, exc)
        elif kind == "missing":
            msg = "required key is missing"
        else:
            msg = err["msg"]
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, ") :]
            if "input" in err and kind not in ("model_type", "dict_type", "list_type"):
                shown = repr(err["input"]) if not isinstance(err["input"], (dict, list)) else ""
                if shown and len(shown) < 80 and shown not in msg:
                    msg += f" (got {shown})"
        out.append(Finding(Level.error, loc, msg, "schema"))
    return out


def _is_pydantic_tag(part) -> bool:
    # pydantic inserts validator names such as 'function-after[...]' into some locations.
    return isinstance(part, str) and ("[" in part and part.endswith("]") and "-" in part)


def _suggest(loc, exc) -> str:
    """Name the closest allowed key, when one is close: 'did you mean ...?'."""
    import difflib

    model = _model_at(Cluster, loc[:-1])
    if model is None:
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _model_at(annotation, path):
    """The pydantic model class that the (schema) path points into, or None."""
    import types
    import typing

    from pydantic import BaseModel

    def strip(ann):
        if typing.get_origin(ann) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            return strip(args[0]) if len(args) == 1 else ann
        if typing.get_origin(ann) is typing.Annotated:
            return strip(typing.get_args(ann)[0])
        return ann

    ann = strip(annotation)
    for part in path:
        origin = typing.get_origin(ann)
        if origin is dict:
            ann = strip(typing.get_args(ann)[1])
        elif origin is list:
            ann = strip(typing.get_args(ann)[0])
        elif isinstance(ann, type) and issubclass(ann, BaseModel) and part in ann.model_fields:
            ann = strip(ann.model_fields[part].annotation)
        else:
            return None
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
