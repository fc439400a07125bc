"""A plan for people (Rich tables) and for programs (one JSON document, keys sorted)."""

from __future__ import annotations

import re

from dataclasses import dataclass

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from .advice import commands_of
from .core import ComponentPlan, Plan
from ..hostlist import fold_or_dash

WIDTH = 100
"""The widest a printed plan gets, whatever the terminal's width."""
ADVICE_INDENT, CONTINUED = "  ", "    "


def to_json(plan: Plan) -> dict:
    """The whole plan as plain data; `json.dumps(..., sort_keys=True)` makes it stable."""
    return {
        "old": plan.old,
        "new": plan.new,
        "changed": plan.changed,
        "exit_code": plan.exit_code,
        "blocked": plan.blocked,
        "components": [
            {
                "name": c.name,
                "files": [
                    {"path": f.path, "change": f.change, **({"diff": f.diff} if f.diff is not None else {})}
                    for f in c.files
                ],
                "consequences": [
                    {"action": q.action, "hosts": q.hosts, "detail": q.detail, "commands": list(q.commands)}
                    for q in c.consequences
                ],
                "notes": c.notes,
            }
            for c in plan.components
        ],
        "jobs": None
        if plan.impacts is None
        else [
            {
                "job_id": i.job.job_id,
                "user": i.job.user,
                "state": i.job.state,
                "partition": i.job.partition,
                "nodes": i.job.nodes,
                "slurm_reason": i.job.reason,
                "blocking": i.blocking,
                "why": i.why,
            }
            for i in plan.impacts
        ],
        "node_states": plan.node_states,
        "summary": plan.summary,
        "advice": plan.advice,
        # Per line of advice, the commands in it (none for plain text), as they are to be run.
        "advice_commands": [list(commands_of(line)) for line in plan.advice],
    }


def renderables(plan: Plan, width: int = WIDTH) -> list[RenderableType]:
    """What `hal-provision plan` prints: the components, the jobs, a summary, the advice; the
    summary and the advice wrapped to `width` (print the tables at that width too)."""
    out: list[RenderableType] = [Text(f"OLD: {plan.old}\nNEW: {plan.new}")]
    if plan.changed:
        out.append(ComponentsTable(plan))
    out += _jobs(plan)
    out.append(Text("\n".join(wrap(plan.summary, width, "", ADVICE_INDENT)), style="bold"))
    out += [Text("\n".join(wrap(line, width, ADVICE_INDENT, CONTINUED))) for line in plan.advice]
    return out


def diffs(plan: Plan) -> list[str]:
    """The unified diffs of the changed files, component by component (with --diff)."""
    return [f.diff for c in plan.components for f in c.files if f.diff]


def wrap(line: str, width: int, indent: str, continued: str) -> list[str]:
    """`line` in lines of at most `width` columns, the first after `indent`, the others after
    `continued`, broken between words. A command of the line (Line.commands) is kept whole: it
    starts a line of its own when it does not fit on the current one, and only when it is wider
    than a line by itself is it broken, between shell words, every line of it but the last
    ending in ` \\` (a shell reads them as one command); the text after it starts a new line."""
    out: list[str] = []
    current, after_command = indent, False
    for unit, is_command in _units(line, commands_of(line)):
        if current.strip() and (after_command or len(current) + 1 + len(unit) > width):
            out.append(current)
            current = continued
        current += f" {unit}" if current.strip() else unit
        after_command = False
        if is_command and len(current) > width:  # alone on its line, and still too wide
            *whole, current = _continued(current, width)
            out += whole
            after_command = True
    return out + [current]


def _units(line: str, commands: tuple[str, ...]) -> list[tuple[str, bool]]:
    """The line's words, a command's words joined into one unit (True), in order."""
    spans, start = [], 0
    for command in sorted(commands, key=line.find):
        at = line.find(command, start)
        if at >= 0:
            spans.append((at, at + len(command)))
            start = at + len(command)
    units: list[tuple[str, bool]] = []
    position = 0
    for at, end in spans:
        units += [(word, False) for word in line[position:at].split()]
        # a mark glued to the command (`,` `)` a backquote) stays with it
        tail = re.match(r"\S*", line[end:])[0]
        head = line[:at].rsplit(" ", 1)[-1] if at and not line[at - 1].isspace() else ""
        if head:
            units.pop()
        units.append((head + line[at:end] + tail, True))
        position = end + len(tail)
    units += [(word, False) for word in line[position:].split()]
    return units


def _continued(text: str, width: int) -> list[str]:
    """An indented command too wide for a line, in lines that end in ` \\` (but the last),
    broken between shell words (never inside quotes), those after the first indented 4 more."""
    indent = text[: len(text) - len(text.lstrip())]
    words, word, quote = [], "", None
    for ch in text.lstrip():
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == " ":
            words.append(word)
            word = ""
            continue
        word += ch
    words.append(word)
    lines, current = [], indent + words[0]
    for word in words[1:]:
        if len(current) + 1 + len(word) + 2 > width:
            lines.append(current + " \\")
            current = f"{indent}    {word}"
        else:
            current += f" {word}"
    return lines + [current]


MARK = {"added": "+", "removed": "-", "modified": "~"}
TITLE = "Changes by component (files: + added, - removed, ~ modified)"
ACTION_MAX, HOSTS_MAX = 20, 22
WIDE_BORDERS = 13  # box lines and cell padding of the table of four columns
NARROW_BORDERS = 6  # of a component's table: no outer edges, no padding there


@dataclass
class ComponentsTable:
    """The changes by component, laid out for the console's width: file paths (and every other
    word of the detail column) are never broken; the other columns wrap instead. Where one
    table of four columns cannot give the detail column its longest word, each component
    becomes a table of its own under its name (Action, Hosts, detail), all of the same widths."""

    plan: Plan

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        rows = [_rows(c) for c in self.plan.components]
        cells = [[row[i] for r in rows for row in r] for i in range(3)]
        longest = _longest_word(cells[2])
        wants = (min(_longest_line(cells[0]), ACTION_MAX), min(_longest_line(cells[1]), HOSTS_MAX))
        names = max(len(c.name) for c in self.plan.components)
        if options.max_width - WIDE_BORDERS - names - sum(wants) >= longest:
            yield _one_table(self.plan.components, rows)
            return
        action, hosts = _share(
            options.max_width - NARROW_BORDERS - longest, wants, (_longest_word(cells[0]), _longest_word(cells[1]))
        )
        widths = (action, hosts, max(longest, options.max_width - NARROW_BORDERS - action - hosts))
        yield Text(TITLE)
        for index, (component, component_rows) in enumerate(zip(self.plan.components, rows)):
            table = Table(
                title=component.name,
                title_justify="left",
                title_style="bold",
                show_header=index == 0,
                show_edge=False,
                pad_edge=False,
            )
            for header, width in zip(("Action", "Hosts", "Files / detail"), widths):
                table.add_column(header, width=width, overflow="fold")
            for row in component_rows:
                table.add_row(*row)
            yield table

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(1, options.max_width)


Row = tuple[Text, Text, Text]  # action, hosts, files / detail


def _rows(component: ComponentPlan) -> list[Row]:
    rows = []
    for q in component.consequences:
        rows.append((Text(q.action), Text(_wrappable(q.hosts)), Text("\n".join(filter(None, [q.detail, *q.commands])))))
    for f in component.files:  # the change's mark in the Action column keeps long paths whole
        rows.append((Text(MARK[f.change], style="dim"), Text(""), Text(_node_path(f.path), style="dim")))
    rows += [(Text(""), Text(""), Text(note, style="italic")) for note in component.notes]
    return rows


def _longest_line(cells: list[Text]) -> int:
    return max((len(line) for cell in cells for line in cell.plain.splitlines()), default=1)


def _longest_word(cells: list[Text]) -> int:
    return max((len(word) for cell in cells for word in cell.plain.split()), default=1)


def _share(room: int, wants: tuple[int, int], words: tuple[int, int]) -> tuple[int, int]:
    """Two columns' widths within `room`: what they want if it fits, else each its longest word
    (unbroken) and the rest as they want more, else in proportion to their longest words."""
    if sum(wants) <= room:
        return wants
    base = words if sum(words) <= room else tuple(max(1, room * w // sum(words)) for w in words)
    extra = [max(0, want - b) for want, b in zip(wants, base)]
    spare = max(0, room - sum(base))
    first = base[0] + (spare * extra[0] // sum(extra) if sum(extra) else 0)
    return first, max(1, room - first)


def _one_table(components: list[ComponentPlan], rows: list[list[Row]]) -> Table:
    table = Table(title=TITLE, title_justify="left")
    table.add_column("Component", no_wrap=True)
    table.add_column("Action", max_width=ACTION_MAX, overflow="fold")
    table.add_column("Hosts", max_width=HOSTS_MAX, overflow="fold")
    table.add_column("Files / detail", overflow="fold")
    for index, (component, component_rows) in enumerate(zip(components, rows)):
        if index:
            table.add_section()
        for n, row in enumerate(component_rows):
            table.add_row(component.name if n == 0 else "", *row)
    return table


def _wrappable(hosts: str) -> str:
    """A hostlist with a space after each top-level comma, so a table cell wraps between hosts."""
    return re.sub(r",(?![^\[]*\])", ", ", hosts)


def _node_path(path: str) -> str:
    """files/etc/hosts -> /etc/hosts (where the node has it); inventory files as they are."""
    return path.removeprefix("files") if path.startswith("files/") else path


def _jobs(plan: Plan) -> list[RenderableType]:
    if plan.impacts is None:
        return []
    if not plan.impacts and not plan.node_states:
        return [Text("Jobs: none affected.")]
    out: list[RenderableType] = []
    if plan.impacts:
        table = Table(title="Job impact", title_justify="left")
        for column in ("", "Job", "User", "State", "Partition", "Nodes", "Why"):
            table.add_column(column, overflow="fold")
        for i in plan.impacts:
            j = i.job
            table.add_row(
                Text("BLOCKS", style="bold red") if i.blocking else Text("note", style="dim"),
                str(j.job_id),
                j.user,
                f"{j.state} ({j.reason})" if j.reason and j.reason != "None" else j.state,
                j.partition,
                fold_or_dash(j.hosts()),
                i.why,
            )
        out.append(table)
    if plan.node_states:
        out.append(Group(Text("Node states (sinfo):"), *(Text(f"  {s}") for s in plan.node_states)))
    return out
