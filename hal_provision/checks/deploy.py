"""Checks: deploy (pull mode: the distribution points, whom each serves, the herd size, the
port and the timer's schedule)."""

from __future__ import annotations

from ..findings import error
from ..hostlist import nodeset, outside, overlap, union
from ..model import Cluster
from ..model.oncalendar import calendar_problem
from . import check
from .common import nearest_host, plural, repeated_hosts, shown

DEPLOY = ("deploy",)
DISTRIBUTION = (*DEPLOY, "distribution")


def _serves_path(c: Cluster, i: int) -> tuple:
    """Where point i's served nodes are written: its `serves`, else its entry, else (the
    default point) deploy.mode."""
    written = c.deploy.distribution
    if written is None:
        return (*DEPLOY, "mode")
    return (*DISTRIBUTION, i, "serves") if written[i].serves is not None else (*DISTRIBUTION, i)


@check
def deploy_points_are_hosts_that_do_not_pull(c: Cluster):
    """A distribution point is a model host, and not a pull node (it serves the bundle its
    nodes converge from; a pull node converges itself and would serve a half-written tree)."""
    if not c.deploy_pull or c.deploy.distribution is None:
        return
    pulling = c.deploy_pull_nodes
    for i, point in enumerate(c.deploy.distribution):
        path = (*DISTRIBUTION, i, "host")
        if point.host not in c.all_hosts:
            yield error(path, f"{point.host!r} is not a host of the model" + nearest_host(c, nodeset(point.host)))
        elif point.host in pulling:
            yield error(
                path,
                f"{point.host} is a pull node (a compute node in deploy.mode pull): a distribution point "
                "must be a host the controller converges, e.g. a management host",
            )


@check
def deploy_serves_pull_nodes_only(c: Cluster):
    """Each point's `serves` names model hosts, and of those pull nodes only."""
    if not c.deploy_pull or c.deploy.distribution is None:
        return
    pulling = c.deploy_pull_nodes
    for i, point in enumerate(c.deploy.distribution):
        if point.serves is None:
            continue
        served = nodeset(point.serves)
        unknown = outside(served, c.all_hosts)
        path = (*DISTRIBUTION, i, "serves")
        if len(unknown):
            yield error(
                path,
                f"{shown(unknown)} {'is not a host' if len(unknown) == 1 else 'are not hosts'} of the "
                "model" + nearest_host(c, unknown),
            )
        others = outside(overlap(served, c.all_hosts), pulling)
        if len(others):
            yield error(
                path,
                f"{shown(others)} {'is not a pull node' if len(others) == 1 else 'are not pull nodes'}: "
                "in deploy.mode pull the compute nodes converge themselves; the controller converges the "
                "rest, which no point serves",
            )


@check
def deploy_every_pull_node_served_once(c: Cluster):
    """Every pull node is served by exactly one distribution point; `serves` is left out only
    where there is one point."""
    if not c.deploy_pull:
        return
    written = c.deploy.distribution or []
    if len(written) > 1:
        for i, point in enumerate(written):
            if point.serves is None:
                yield error(
                    (*DISTRIBUTION, i),
                    f"point {point.host} has no `serves`: with "
                    f"{plural(len(written), 'point')}, each says which pull nodes it serves (a hostlist)",
                )
        if any(p.serves is None for p in written):
            return
    points = c.deploy_points
    for i, j, twice in repeated_hosts([overlap(p.serves, c.deploy_pull_nodes) for p in points]):
        yield error(
            _serves_path(c, i),
            f"{shown(twice)} {'is' if len(twice) == 1 else 'are'} also served by "
            f"{points[j].host} (deploy.distribution[{j}]): each pull node fetches from exactly one point",
        )
    unserved = outside(c.deploy_pull_nodes, union(p.serves for p in points))
    if len(unserved):
        yield error(
            DISTRIBUTION,
            f"{shown(unserved)} {'is a pull node' if len(unserved) == 1 else 'are pull nodes'} "
            "that no distribution point serves: add them to a point's `serves`",
        )


@check
def deploy_herd_size(c: Cluster):
    """No distribution point serves more than deploy.herd_size pull nodes (a herd: what one
    management node can feed; BlueBanquise's 500-600)."""
    if not c.deploy_pull:
        return
    limit = c.deploy.herd_size
    for i, point in enumerate(c.deploy_points):
        herd = len(overlap(point.serves, c.deploy_pull_nodes))
        if herd > limit:
            need = -(-len(c.deploy_pull_nodes) // limit)
            yield error(
                _serves_path(c, i),
                f"{point.host} serves {herd} pull nodes, more than deploy.herd_size "
                f"({limit}): split them over more distribution points (at least {need} for "
                f"{len(c.deploy_pull_nodes)} pull nodes), each with its own `serves`",
            )


@check
def deploy_port_in_range(c: Cluster):
    """The points serve bundles on a TCP port, 1-65535."""
    if not 1 <= c.deploy.port <= 65535:
        yield error((*DEPLOY, "port"), f"{c.deploy.port} is not a TCP port: write 1-65535 (default 8181)")


@check
def deploy_schedule_is_a_calendar(c: Cluster):
    """The hal-converge timer's schedule is an OnCalendar= expression systemd takes (the forms
    model/oncalendar.py accepts, checked without systemd)."""
    problem = calendar_problem(c.deploy.schedule)
    if problem is not None:
        yield error((*DEPLOY, "schedule"), problem)
