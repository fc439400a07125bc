"""Checks: where services run."""

from __future__ import annotations

from collections import Counter

from ..findings import error, warning
from ..hostlist import nodeset, outside, overlap
from ..model import Cluster, Role
from . import check
from .common import nearest_host, shown

ALLOWED_ROLES: dict[str, tuple[Role, ...]] = {
    "slurmctld": (Role.management,),
    "slurmdbd": (Role.management,),
    "accounting_db": (Role.management,),
    "monitoring_db": (Role.management,),
    "ldap": (Role.management,),
    "portal": (Role.management, Role.login),
}

# Renderers name one host for these (DbdHost, StorageHost); further hosts would be ignored.
SINGLE_HOST = ("slurmdbd", "accounting_db")

# A configured section needs a host to run on.
SECTION_SERVICE = {"portal": "portal", "monitoring": "monitoring_db"}


def _placed(c: Cluster):
    for service, expr in c.services.model_dump().items():
        if expr is not None:
            yield service, nodeset(expr), ("services", service)


@check
def service_hosts_known_with_role(c: Cluster):
    """Each service on nodes of a role it may run on. A node group may play several roles
    (`also`): a service is allowed there when any of them is allowed, with a warning when the
    same nodes run jobs (a deskside server that is controller and compute node at once)."""
    for service, hosts, path in _placed(c):
        unknown = outside(hosts, c.all_hosts)
        if len(unknown):
            yield error(path, f"{service} placed on {shown(unknown)}, not in any node group" + nearest_host(c, unknown))
        allowed = ALLOWED_ROLES.get(service, tuple(Role))
        for group in c.nodes:
            here = overlap(hosts, nodeset(group.hosts))
            if not len(here):
                continue
            if not group.has(*allowed):
                yield error(
                    path,
                    f"{service} placed on {shown(here)}, a {'/'.join(r.value for r in group.roles)} node; it must "
                    "run on " + " or ".join(r.value for r in allowed) + " nodes (or add one of those roles to "
                    f"node group {group.name!r} with `also:`)",
                )
    # One warning per node group that runs jobs beside services that must not share a node.
    shared: dict[str, list[tuple[str, tuple]]] = {}
    for service, hosts, path in _placed(c):
        allowed = ALLOWED_ROLES.get(service, tuple(Role))
        for group in c.nodes:
            if (
                Role.compute in group.roles
                and Role.compute not in allowed
                and group.has(*allowed)
                and len(overlap(hosts, nodeset(group.hosts)))
            ):
                shared.setdefault(group.name, []).append((service, path))
    for name, services in shared.items():
        names = [s for s, _p in services]
        listed = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
        yield warning(
            services[0][1],
            f"{listed} run{'s' if len(names) == 1 else ''} on node group {name!r}, which also runs jobs: jobs get the "
            "nodes' memory less slurm.memory_reserve_mib, so keep that reserve large enough for them",
        )


@check
def single_host_services(c: Cluster):
    for service, hosts, path in _placed(c):
        if service in SINGLE_HOST and len(hosts) > 1:
            yield warning(
                path,
                f"{service} runs on one host, but {shown(hosts)} are named; only {hosts[0]} is used",
            )


@check
def configured_sections_have_hosts(c: Cluster):
    for section, service in SECTION_SERVICE.items():
        if getattr(c, section) is not None and getattr(c.services, service) is None:
            yield warning(
                ("services",),
                f"{section} is configured but services.{service} names no host for it; set services.{service}",
            )


# slurm.conf may name more SlurmctldHost lines, but the slurm role's restart order (the backup,
# then the primary), the shared-state check and `plan` know one backup: a third host would run
# a controller nothing here has tested.
MAX_CONTROLLERS = 2


@check
def slurmctld_at_most_two(c: Cluster):
    if len(c.controllers) > MAX_CONTROLLERS:
        yield error(
            ("services", "slurmctld"),
            f"slurmctld placed on {shown(nodeset(c.services.slurmctld))}; hal-provision runs a primary "
            "controller and at most one backup: name one or two hosts",
        )


@check
def slurmctld_hosts_distinct(c: Cluster):
    if len(c.slurmctld_named) == len(c.controllers):
        return
    twice = [host for host, times in Counter(c.slurmctld_named).items() if times > 1]
    if twice:
        yield error(
            ("services", "slurmctld"),
            f"services.slurmctld names {', '.join(twice)} more than once: a backup controller on the "
            "primary's own host survives nothing the primary does not; name a second management host "
            "as the backup, or the host once for a single controller",
        )
