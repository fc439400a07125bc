"""Checks: where services run."""

from __future__ import annotations

from ..findings import error, warning
from ..hostlist import nodeset
from ..model import Cluster, Role
from . import check
from .common import hosts_by_role, outside, overlap, shown

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
    by_role = hosts_by_role(c)
    for service, hosts, path in _placed(c):
        unknown = outside(hosts, c.all_hosts)
        if len(unknown):
            yield error(path, f"{service} placed on {shown(unknown)}, not in any node group")
        allowed = ALLOWED_ROLES.get(service, tuple(Role))
        for role, members in by_role.items():
            wrong = overlap(hosts, members) if role not in allowed else ()
            if len(wrong):
                yield error(
                    path,
                    f"{service} placed on {shown(wrong)}, a {role.value} node; it must run on "
                    + " or ".join(r.value for r in allowed)
                    + " nodes",
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
                f"{section} is configured but services.{service} names no host for it; "
                f"set services.{service}",
            )
