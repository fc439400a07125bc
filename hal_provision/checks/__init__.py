"""Semantic checks: small named functions over the model, each returning *all* its findings.

A check is registered with @check and receives the validated Cluster. It yields Findings with
a dotted path into cluster.yml; the loader's Locator adds file, line and column afterwards.
"""

from __future__ import annotations

import importlib
from typing import Callable, Iterable

from ..findings import Finding, error
from ..model import Cluster

CheckFn = Callable[[Cluster], Iterable[Finding]]
REGISTRY: dict[str, CheckFn] = {}


def check(fn: CheckFn) -> CheckFn:
    existing = REGISTRY.get(fn.__name__)
    if existing is not None and existing.__module__ != fn.__module__:
        raise ValueError(f"two checks are named {fn.__name__!r}: {existing.__module__} and {fn.__module__}")
    REGISTRY[fn.__name__] = fn
    return fn


CHECK_MODULES = (
    "accounts",
    "backup",
    "composable",
    "deploy",
    "fabric",
    "hardware",
    "health",
    "monitoring",
    "network",
    "nodes",
    "portal",
    "provisioning",
    "recipes",
    "services",
    "sharing",
    "slurm",
    "slurm_version",
    "software",
    "storage",
    "swsuite",
)


def run_all(cluster: Cluster) -> list[Finding]:
    # Importing each domain's module registers its checks.
    for module in CHECK_MODULES:
        importlib.import_module(f"{__name__}.{module}")

    findings: list[Finding] = []
    for name, fn in REGISTRY.items():
        try:
            for f in fn(cluster):
                findings.append(f if f.check else type(f)(f.level, f.path, f.message, name))
        except Exception as exc:  # a bug in one check must not hide the others' findings
            findings.append(
                error((), f"internal error in check {name}: {type(exc).__name__}: {exc} (please report it)", name)
            )
    return findings
