"""`hal-provision dashboards`: every panel of the model's Grafana dashboards and its queries
(InfluxQL or PromQL, as monitoring.backend says)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..model.dashboards import dashboards
from .common import checked, out


def panels(
    file: Optional[Path] = typer.Argument(
        None, help="cluster.yml to use; the embedded HAL description if omitted.", show_default=False
    ),
) -> None:
    """List each dashboard's panels: title, kind, unit and every query in the language of
    monitoring.backend: InfluxQL (Grafana's macros $timeFilter and $__interval left in) or PromQL
    ($__interval, $__rate_interval and $__range left in)."""
    _loaded, model = checked(file)
    boards = dashboards(model)
    if not boards:
        out.print(f"cluster '{model.cluster.name}' has no Grafana dashboards (monitoring.grafana)", markup=False)
        return
    for n, board in enumerate(boards):
        if n:
            out.print()
        out.print(f"{board.uid}: {board.title} ({len(board.panels)} panels)", style="bold", markup=False)
        for panel in board.panels:
            out.print(f"  {panel.title} [{panel.kind}, {panel.unit}]", markup=False)
            for q in panel.queries:
                out.print(f"    {q.ref_id}: {q.text(model.monitoring.backend)}", markup=False)
