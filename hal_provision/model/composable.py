"""Composable GPUs: pools of GPUs in PCIe expansion chassis, attached to the hosts cabled to
them on demand, and named layouts of how many each host holds (the active one is deployed).

A host's GPUs are its hardware profile's own GPUs and, after them, the active layout's pool
GPUs (of the pool's type, on the pool's socket, device files numbered on from the host's own).
Cross-field checks (over-commitment, slots, cabling, sockets) are in checks/composable.py.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated

from pydantic import AfterValidator, Field

from ..hostlist import HostlistError, expand
from ..hostlist import check as check_hostlist
from .base import CleanPath, Hostlist, Name, Strict

DRIVERS = ("sandbox", "rest")


def _check_driver(value: str) -> str:
    if value not in DRIVERS and not value.startswith("/"):
        raise ValueError(
            f"{value!r} is not a driver: name one of {', '.join(DRIVERS)} or give the absolute path of a site's program"
        )
    return value


def _check_layout_keys(value: dict[str, int]) -> dict[str, int]:
    for key in value:
        try:
            check_hostlist(key)
        except HostlistError as exc:
            raise ValueError(f"{key!r}: {exc}") from None
    return value


class PoolGpus(Strict):
    type: Name = Field(description="Slurm GRES type of the pool's GPUs, e.g. v100; users ask --gres=gpu:<type>:N.")
    model: str = Field(description="Full model name, e.g. NVIDIA Tesla V100-SXM2-16GB.")
    memory_gib: int = Field(gt=0, description="Memory per GPU in GiB.")
    count: int = Field(ge=1, description="GPUs in the chassis.")


class GpuPool(Strict):
    name: Name = Field(description="Pool (chassis) name; unique. Hosts cabled to it get the Slurm feature pool_<name>.")
    description: str = Field("", description="Free text.")
    gpus: PoolGpus = Field(description="The chassis' GPUs: one type, and how many.")
    hosts: Hostlist = Field(
        description="Model hosts cabled to the chassis (a hostlist); each takes GPUs from one pool."
    )
    slots_per_host: int = Field(
        ge=1, description="Most pool GPUs one host can hold at once (its chassis link's slots)."
    )
    socket: int = Field(
        0, ge=0, description="Host CPU socket the chassis link hangs off (0-based): gres.conf's Cores of the pool GPUs."
    )
    driver: Annotated[CleanPath, AfterValidator(_check_driver)] = Field(
        "sandbox",
        description="What attaches and detaches the GPUs: sandbox (fake device files moved between "
        "sandbox containers), rest (a vendor's REST API at driver_url) or the absolute path of a site's program "
        "answering the same commands.",
    )
    driver_url: str | None = Field(None, description="Base URL of the fabric manager's API (the rest driver needs it).")

    @cached_property
    def host_names(self) -> list[str]:
        """The cabled hosts, expanded, sorted."""
        return sorted(expand(self.hosts))


class Layout(Strict):
    name: Name = Field(description="Layout name; unique. composable.active names the deployed one.")
    description: str = Field("", description="Free text.")
    gpus: Annotated[dict[str, int], AfterValidator(_check_layout_keys)] = Field(
        default_factory=dict,
        description="Hostlist -> pool GPUs each of its hosts holds; cabled hosts not named hold none.",
    )

    @cached_property
    def per_host(self) -> dict[str, int]:
        """Host -> pool GPUs, as written (a host named twice: the last count; a check reports it)."""
        return {host: count for expr, count in self.gpus.items() for host in expand(expr)}


class Composable(Strict):
    """Pools, layouts and the active layout."""

    pools: list[GpuPool] = Field(min_length=1, description="GPU pools (expansion chassis).")
    layouts: list[Layout] = Field(
        min_length=1, description="Named compositions: how many pool GPUs each cabled host holds."
    )
    active: Name = Field(
        description="The layout deployed (slurm.conf, gres.conf, the health check and the inventory follow it)."
    )

    def layout(self, name: str) -> Layout | None:
        return next((layout for layout in self.layouts if layout.name == name), None)

    @property
    def active_layout(self) -> Layout | None:
        return self.layout(self.active)

    def pool_of(self, host: str) -> GpuPool | None:
        """The first pool `host` is cabled to; None for a host cabled to none."""
        return next((pool for pool in self.pools if host in pool.host_names), None)

    @cached_property
    def cabled_hosts(self) -> list[str]:
        """Every host cabled to a pool, sorted, each once."""
        return sorted({host for pool in self.pools for host in pool.host_names})

    def counts(self, layout: Layout) -> dict[str, int]:
        """Every cabled host -> the pool GPUs it holds in `layout` (0 included), sorted by host;
        hosts the layout names that no pool cables are left out (a check reports them)."""
        written = layout.per_host
        return {host: written.get(host, 0) for host in self.cabled_hosts}

    def attached(self, pool: GpuPool) -> list[tuple[int, str]]:
        """The active layout's attachment of `pool`: (GPUs per host, the hosts holding that many,
        folded), fewest first; hosts holding none left out."""
        from ..hostlist import fold

        layout = self.active_layout
        by_count: dict[int, list[str]] = {}
        for host, n in self.pool_counts(layout, pool).items() if layout is not None else []:
            if n:
                by_count.setdefault(n, []).append(host)
        return [(n, fold(hosts)) for n, hosts in sorted(by_count.items())]

    def pool_counts(self, layout: Layout, pool: GpuPool) -> dict[str, int]:
        """The pool's hosts -> the GPUs each holds from it in `layout` (a host takes from its first pool)."""
        written = layout.per_host
        return {host: written.get(host, 0) for host in pool.host_names if self.pool_of(host) is pool}
