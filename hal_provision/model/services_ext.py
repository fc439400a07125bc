"""Monitoring. An extension point, filled in by later work (the portal is in portal.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Name, Strict


class Monitoring(Strict):
    stack: Literal["telegraf-influxdb-grafana"] = Field(
        "telegraf-influxdb-grafana", description="Metrics pipeline."
    )
    interval_seconds: int = Field(60, gt=0, description="Collection interval.")
    collectors: list[Name] = Field(default_factory=list, description="Custom collectors to run.")
