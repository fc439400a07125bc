"""Checks: the web portal (its node, TLS, the app catalogue against modules and virtual
partitions)."""

from __future__ import annotations

from ..findings import error, warning
from ..hostlist import nodeset
from ..model import Cluster, Role, slurmtime
from . import check
from .common import did_you_mean, unique

PORTAL = ("portal",)
APPS = ("portal", "apps")


def _known_module_refs(c: Cluster) -> list[str]:
    return c.software.known_refs() if c.software else []


def _modules_for(c: Cluster, ref: str):
    return c.software.resolve(ref) if c.software else []


def _visible_on_compute(c: Cluster, ref: str) -> bool:
    return c.software.loadable_on(ref, Role.compute)


@check
def portal_prerequisites(c: Cluster):
    """The portal logs users in against the directory, needs the cluster CA unless the site
    brings a certificate, and (Open OnDemand) stages each job in the user's shared home."""
    p = c.portal
    if p is None:
        return
    if c.accounts is None or c.services.ldap is None:
        yield error(
            (*PORTAL, "auth"),
            "the portal logs users in against the cluster directory, but "
            + ("accounts is not configured" if c.accounts is None else "services.ldap names no host")
            + ": configure accounts and services.ldap",
        )
    if p.tls.certificate is None and p.tls.key is None and c.services.ldap is None:
        yield error(
            (*PORTAL, "tls"),
            "no site certificate, and no cluster CA to sign one: the CA is made on "
            "the services.ldap host; set services.ldap or tls.certificate and tls.key",
        )
    if p.front_end == "open_ondemand" and c.services.portal is not None and c.accounts is not None:
        home = c.accounts.home_root
        missing = nodeset(c.services.portal).difference(c.hosts_mounting(home))
        if len(missing):
            yield error(
                ("services", "portal"),
                f"Open OnDemand stages every session in the user's home, but "
                f"{missing} does not mount the shared {home}: mount it there (storage), or use "
                "front_end: jupyterhub",
            )


@check
def portal_tls_complete(c: Cluster):
    p = c.portal
    if p is None:
        return
    if (p.tls.certificate is None) != (p.tls.key is None):
        given, missing = ("certificate", "key") if p.tls.key is None else ("key", "certificate")
        yield error(
            (*PORTAL, "tls", missing),
            f"tls.{given} is set but tls.{missing} is not: a site certificate "
            "needs both; leave both out for one from the cluster CA",
        )


@check
def portal_apps_unique(c: Cluster):
    if c.portal is not None:
        yield from unique(c.portal.apps, APPS, "app name", why="it names the form's choice and the OnDemand app")


@check
def portal_environment_module(c: Cluster):
    """The session software is a module on the compute nodes, and every app that does not
    bring its own container loads it (jupyterhub-singleuser comes from it)."""
    p = c.portal
    if p is None:
        return
    ref = p.user_environment.module
    path = (*PORTAL, "user_environment", "module")
    if "/" not in ref:
        yield error(
            path,
            f"{ref!r}: name the environment's module as NAME/VERSION; the role installs into that one version's prefix",
        )
    elif not _modules_for(c, ref):
        yield error(
            path,
            f"user environment module {ref!r} is not in software.modules" + did_you_mean(ref, _known_module_refs(c)),
        )
        return
    elif not _visible_on_compute(c, ref):
        yield error(path, f"user environment module {ref!r} is not visible on compute nodes, where sessions run")
    name = ref.partition("/")[0]
    for i, app in enumerate(p.apps):
        if app.container is None and not any(m.partition("/")[0] == name for m in app.modules):
            yield error(
                (*APPS, i, "modules"),
                f"app {app.name!r} does not load the user environment {name!r}: "
                "its sessions would find no jupyterhub-singleuser; add it to modules, or give a container",
            )


@check
def portal_app_modules_exist(c: Cluster):
    p = c.portal
    if p is None:
        return
    for i, app in enumerate(p.apps):
        for k, ref in enumerate(app.modules):
            where = (*APPS, i, "modules", k)
            if not _modules_for(c, ref):
                yield error(
                    where,
                    f"app {app.name!r} loads module {ref!r}, which is not in software.modules"
                    + did_you_mean(ref, _known_module_refs(c)),
                )
            elif not _visible_on_compute(c, ref):
                yield error(
                    where,
                    f"app {app.name!r} loads module {ref!r}, which compute nodes do not see "
                    "(roles, or a compiler level): the session would fail to start",
                )
        if app.container is not None and c.containers is None:
            yield error(
                (*APPS, i, "container"),
                f"app {app.name!r} runs in a container, but the model has no "
                "containers section (no Singularity/Apptainer on the nodes)",
            )


@check
def portal_app_virtual_partitions(c: Cluster):
    """Every offered virtual partition exists, holds one node (a session is one Jupyter server),
    and allows the app's hours."""
    p = c.portal
    if p is None:
        return
    vps = {vp.name: vp for vp in (c.swsuite.virtual_partitions if c.swsuite else [])}
    for i, app in enumerate(p.apps):
        for k, name in enumerate(app.virtual_partitions):
            where = (*APPS, i, "virtual_partitions", k)
            vp = vps.get(name)
            if vp is None:
                yield error(
                    where,
                    f"app {app.name!r} offers virtual partition {name!r}, which is not in "
                    "swsuite.virtual_partitions" + did_you_mean(name, vps),
                )
                continue
            job = c.job_shape(vp)  # None: swrun refuses its jobs, and a swsuite check says why
            if job is not None and job.nodes > 1:
                yield error(
                    where,
                    f"app {app.name!r} offers {name}, which spans {job.nodes} nodes; a portal session "
                    "is one server on one node: offer one-node virtual partitions",
                )
            if app.max_hours is not None and app.max_hours > vp.max_time_hours:
                yield warning(
                    (*APPS, i, "max_hours"),
                    f"app {app.name!r} allows {app.max_hours} hours, but {name} "
                    f"allows {vp.max_time_hours}: sessions there are capped at {vp.max_time_hours}",
                )
        if app.max_hours is not None:
            parts = {vps[n].partition for n in app.virtual_partitions if n in vps}
            for part in c.slurm.partitions:
                most = slurmtime.minutes(part.max_time) if part.name in parts else None
                if most is not None and app.max_hours * 60 > most:
                    yield warning(
                        (*APPS, i, "max_hours"),
                        f"app {app.name!r} allows {app.max_hours} hours, but partition {part.name!r} behind "
                        f"its virtual partitions has MaxTime {part.max_time}: Slurm refuses longer sessions "
                        f"there; use at most {int(most // 60)} hours",
                    )
        limit = app.max_hours or max((vps[n].max_time_hours for n in app.virtual_partitions if n in vps), default=None)
        if limit is not None and app.default_hours > limit:
            yield error(
                (*APPS, i, "default_hours"),
                f"app {app.name!r} presets {app.default_hours} hours, more than the {limit} it allows",
            )
