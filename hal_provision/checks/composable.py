"""Checks: composable GPUs (pools cabled to hosts, layouts of how many GPUs each holds).

Each layout is checked, not only the active one: a layout that cannot be deployed is found
before a recomposition needs it.
"""

from __future__ import annotations

from ..findings import error, warning
from ..hostlist import nodeset, outside
from ..model import Cluster
from . import check
from .common import did_you_mean, nearest_host, shown, unique

POOLS = ("composable", "pools")
LAYOUTS = ("composable", "layouts")


def _layouts(c: Cluster):
    return [] if c.composable is None else list(enumerate(c.composable.layouts))


def _pools(c: Cluster):
    return [] if c.composable is None else list(enumerate(c.composable.pools))


@check
def composable_names_unique(c: Cluster):
    if c.composable is not None:
        yield from unique(c.composable.pools, POOLS, "pool name", why="hosts get the Slurm feature pool_<name>")
        yield from unique(c.composable.layouts, LAYOUTS, "layout name", why="composable.active names one")


@check
def composable_active_layout_exists(c: Cluster):
    comp = c.composable
    if comp is not None and comp.active_layout is None:
        yield error(
            ("composable", "active"),
            f"no layout is named {comp.active!r}" + did_you_mean(comp.active, [layout.name for layout in comp.layouts]),
        )


@check
def composable_rest_driver_has_url(c: Cluster):
    for i, pool in _pools(c):
        if pool.driver == "rest" and not pool.driver_url:
            yield error(
                (*POOLS, i, "driver_url"),
                f"pool {pool.name!r} uses the rest driver, which needs the base "
                "URL of the fabric manager's API: set driver_url",
            )


@check
def composable_pool_hosts_are_compute(c: Cluster):
    compute = c.slurm_nodes
    for i, pool in _pools(c):
        hosts = nodeset(pool.hosts)
        unknown = outside(hosts, c.all_hosts)
        if len(unknown):
            yield error(
                (*POOLS, i, "hosts"),
                f"{shown(unknown)} of pool {pool.name!r} not in any node group" + nearest_host(c, unknown),
            )
        other = outside(outside(hosts, unknown), compute)
        if len(other):
            yield error(
                (*POOLS, i, "hosts"),
                f"{shown(other)} of pool {pool.name!r} not compute nodes: pool GPUs "
                "are for Slurm jobs (node lines, gres.conf and the health check are the compute nodes')",
            )


@check
def composable_host_in_one_pool(c: Cluster):
    seen: dict[str, int] = {}
    for i, pool in _pools(c):
        for host in pool.host_names:
            if host in seen and seen[host] != i:
                first = c.composable.pools[seen[host]]
                yield error(
                    (*POOLS, i, "hosts"),
                    f"{host} is already cabled to pool {first.name!r} "
                    f"(composable.pools[{seen[host]}]): a host takes GPUs from one pool (a layout gives a "
                    "count per host, not per pool)",
                )
            seen.setdefault(host, i)


@check
def composable_pool_fits_hosts(c: Cluster):
    """The pool's socket exists on every cabled host, and a host with GPUs of its own has the
    pool's type (a Slurm node line carries one GPU type per host here)."""
    for i, pool in _pools(c):
        seen: set[str] = set()
        for host in pool.host_names:
            group = c.group_of(host)
            profile = c.profile_of(group) if group is not None else None
            if profile is None or group.hardware in seen:
                continue
            seen.add(group.hardware)
            if pool.socket >= profile.sockets:
                yield error(
                    (*POOLS, i, "socket"),
                    f"socket {pool.socket} of pool {pool.name!r}: profile "
                    f"{group.hardware!r} of {host} has {profile.sockets} socket(s), 0 to {profile.sockets - 1}",
                )
            if profile.gpus is not None and profile.gpus.type != pool.gpus.type:
                yield error(
                    (*POOLS, i, "gpus", "type"),
                    f"pool {pool.name!r} holds {pool.gpus.type} GPUs, profile "
                    f"{group.hardware!r} of {host} has {profile.gpus.type} GPUs of its own: a host's GPUs "
                    "are of one type",
                )


@check
def composable_layout_hosts_cabled(c: Cluster):
    if c.composable is None:
        return
    cabled = nodeset(",".join(c.composable.cabled_hosts))
    for i, layout in _layouts(c):
        for expr in layout.gpus:
            loose = outside(nodeset(expr), cabled)
            if len(loose):
                yield error(
                    (*LAYOUTS, i, "gpus"),
                    f"layout {layout.name!r}: {shown(loose)} cabled to no pool "
                    "(composable.pools[*].hosts)" + nearest_host(c, loose),
                )


@check
def composable_layout_within_slots(c: Cluster):
    if c.composable is None:
        return
    for i, layout in _layouts(c):
        for host, count in sorted(layout.per_host.items()):
            pool = c.composable.pool_of(host)
            if pool is not None and count > pool.slots_per_host:
                yield error(
                    (*LAYOUTS, i, "gpus"),
                    f"layout {layout.name!r} gives {host} {count} GPUs of pool "
                    f"{pool.name!r}, which has {pool.slots_per_host} slots per host (slots_per_host)",
                )


@check
def composable_pool_not_overcommitted(c: Cluster):
    if c.composable is None:
        return
    for i, layout in _layouts(c):
        for pool in c.composable.pools:
            held = c.composable.pool_counts(layout, pool)
            if sum(held.values()) > pool.gpus.count:
                taken = ", ".join(f"{host} {n}" for host, n in held.items() if n)
                yield error(
                    (*LAYOUTS, i, "gpus"),
                    f"layout {layout.name!r} takes {sum(held.values())} GPUs of pool "
                    f"{pool.name!r} ({taken}), which holds {pool.gpus.count}",
                )


@check
def composable_layout_virtual_partitions(c: Cluster):
    """A virtual partition a layout cannot satisfy (Cluster.layout_hides: not enough nodes with
    its GPUs per node) is hidden while that layout is active (the portal and the wrapper suite
    leave it out): a warning, not an error."""
    if c.composable is None or not c.swsuite.virtual_partitions:
        return
    for i, layout in _layouts(c):
        for why in c.with_layout(layout.name).hidden_virtual_partitions.values():
            yield warning((*LAYOUTS, i), f"layout {layout.name!r} hides {why}")
