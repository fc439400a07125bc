"""Semantic checks: small named functions over the model, each returning *all* its findings.

A check is registered with @check and receives the validated Cluster. It yields Findings with
a dotted path into cluster.yml; the loader's Locator adds file, line and column afterwards.
"""

from __future__ import annotations

from typing import Callable, Iterable

from ..findings import Finding
from ..model import Cluster

CheckFn = Callable[[Cluster], Iterable[Finding]]
REGISTRY: dict[str, CheckFn] = {}


def check(fn: CheckFn) -> CheckFn:
    REGISTRY[fn.__name__] = fn
    return fn


def run_all(cluster: Cluster) -> list[Finding]:
    from . import hardware, network, nodes, services, slurm, swsuite  # noqa: F401  (registers)

    findings: list[Finding] = []
    for name, fn in REGISTRY.items():
        for f in fn(cluster):
            findings.append(f if f.check else type(f)(f.level, f.path, f.message, name))
    return findings
