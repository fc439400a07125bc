"""Software environment: Lmod modules and containers. Extension point, filled in by later work."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Strict


class Module(Strict):
    name: str = Field(description="Module name, e.g. wmlce.")
    version: str = Field(description="Module version, e.g. 1.7.0-py3.7.")
    kind: Literal["compiler", "mpi", "framework", "library", "tool"] = Field(
        description="What the module provides."
    )
    description: str = Field("", description="Free text (module whatis).")


class Software(Strict):
    modules: list[Module] = Field(default_factory=list, description="Environment modules.")


class Containers(Strict):
    runtime: Literal["apptainer", "singularity"] = Field(description="Container runtime.")
    version: str = Field("", description="Runtime version to install.")
    fakeroot: bool = Field(False, description="Allow users fakeroot (root inside containers).")
    gpu: bool = Field(True, description="Pass GPUs into containers (--nv).")
