"""Portal and monitoring. Extension points, filled in by later work."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Name, Strict


class Portal(Strict):
    kind: Literal["open_ondemand"] = Field("open_ondemand", description="Portal software.")
    auth: Literal["ldap", "pam"] = Field("ldap", description="How users log in.")
    apps: list[Name] = Field(default_factory=list, description="Interactive apps offered.")


class Monitoring(Strict):
    stack: Literal["telegraf-influxdb-grafana"] = Field(
        "telegraf-influxdb-grafana", description="Metrics pipeline."
    )
    interval_seconds: int = Field(60, gt=0, description="Collection interval.")
    collectors: list[Name] = Field(default_factory=list, description="Custom collectors to run.")
