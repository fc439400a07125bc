"""`hal-provision power`'s orchestration, and what `reimage` asks of a BMC.

For a hostlist: each host's BMC as the model says (`Cluster.bmc_of`), refused as a whole when a
host is unknown or has no BMC; the credentials read once per file they are in; the action run on
every host at once by a bounded pool of threads (each BMC answers in its own time); one result
per host, then folded as ClusterShell's clubak folds output: hosts with the same outcome in one
hostlist (`bm[01-02]: on`, `bm03: error: cannot reach ...`). The protocols are `redfish.py` and
`ipmi.py`; this module only chooses, runs and collects."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from . import BmcError, credentials, ipmi, redfish
from ..hostlist import fold

ACTIONS = ("on", "off", "cycle", "status")
FANOUT = 64  # BMCs asked at once (ClusterShell's default fanout)
TIMEOUT_S = 10  # a BMC's connection and answer
POLL_S = 1.0  # between two power-state reads while waiting


class TargetError(BmcError):
    """A hostlist that names hosts the model does not know, or hosts without a BMC."""


@dataclass(frozen=True)
class Result:
    host: str
    ok: bool
    outcome: str  # the state ('on', 'off'), what was sent, or why it failed


@dataclass(frozen=True)
class Folded:
    hosts: str  # a hostlist
    count: int
    ok: bool
    outcome: str

    @property
    def line(self) -> str:
        return f"{self.hosts}: {self.outcome if self.ok else 'error: ' + self.outcome}"


def protocol(target):
    """The module that speaks the target's protocol."""
    return redfish if target.protocol == "redfish" else ipmi


def targets(cluster, hosts: list[str]) -> dict:
    """host -> BmcTarget for each of `hosts`; a TargetError naming every unknown host (with the
    nearest name when it is one misspelt host) and every host without a BMC."""
    from ClusterShell.NodeSet import NodeSet

    from ..checks.common import nearest_host

    unknown, without, unaddressed, found = [], [], [], {}
    for host in hosts:
        group = cluster.group_of(host)
        if group is None:
            unknown.append(host)
        elif group.bmc is None:
            without.append((host, group.name))
        else:
            target = cluster.bmc_of(host)
            if target is None:
                unaddressed.append((host, group.name))
            else:
                found[host] = target
    problems = []
    if unknown:
        problems.append(
            f"{fold(unknown)}: not a host of cluster '{cluster.cluster.name}'"
            + nearest_host(cluster, NodeSet.fromlist(unknown))
        )
    for group in sorted({g for _h, g in without}):
        names = fold(h for h, g in without if g == group)
        problems.append(
            f"{names}: node group '{group}' has no `bmc` (say how to reach its BMCs: protocol, credentials)"
        )
    for group in sorted({g for _h, g in unaddressed}):
        names = fold(h for h, g in unaddressed if g == group)
        problems.append(
            f"{names}: no address on the BMC network (node group '{group}': give it `addresses` there, "
            "`bmc.network`, or a `bmc.endpoint`)"
        )
    if problems:
        raise TargetError("\n".join(problems))
    return found


def load_credentials(found: dict) -> dict:
    """host -> Credentials, each file read once; a CredentialsError with every file's problem."""
    by_key, problems = {}, []
    for target in found.values():
        key = credentials.key(target.credentials)
        if key in by_key:
            continue
        try:
            by_key[key] = credentials.load(target.credentials)
        except credentials.CredentialsError as exc:
            by_key[key] = None
            problems.append(str(exc))
    if problems:
        raise credentials.CredentialsError("\n".join(problems))
    return {host: by_key[credentials.key(t.credentials)] for host, t in found.items()}


def act(target, creds, action: str, wait_s: float = 0, timeout: float = TIMEOUT_S, sleep=time.sleep) -> str:
    """One host's action: its state for `status`; for on, off and cycle what was sent, or with
    `wait_s` the state it reached (on for on and cycle, off for off) within that many seconds."""
    speaker = protocol(target)
    if action == "status":
        return speaker.power_state(target, creds, timeout)
    if action not in ACTIONS:
        raise ValueError(f"unknown power action {action!r}")
    sent = speaker.power(target, creds, action, timeout)
    if not wait_s:
        return sent
    wanted = "off" if action == "off" else "on"
    deadline = time.monotonic() + wait_s
    while True:
        state = speaker.power_state(target, creds, timeout)
        if state == wanted:
            return state
        if time.monotonic() >= deadline:
            raise BmcError(f"{sent}, but still {state} after {wait_s:g} s")
        sleep(POLL_S)


def run(
    found: dict,
    creds: dict,
    action: str,
    wait_s: float = 0,
    fanout: int = FANOUT,
    timeout: float = TIMEOUT_S,
    each: Callable | None = None,
) -> list[Result]:
    """`action` on every host of `found` (host -> BmcTarget), `fanout` at a time; one Result per
    host in `found`'s order. `each(target, creds)`, when given, is run instead of the action
    (what `reimage` does: set the next boot, then cycle)."""

    def one(host: str) -> Result:
        try:
            if each is not None:
                outcome = each(found[host], creds[host])
            else:
                outcome = act(found[host], creds[host], action, wait_s, timeout)
            return Result(host, True, outcome)
        except BmcError as exc:
            return Result(host, False, str(exc))

    hosts = list(found)
    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(hosts))), thread_name_prefix="bmc") as pool:
        return list(pool.map(one, hosts))


def folded(results: list[Result]) -> list[Folded]:
    """Hosts with the same outcome in one hostlist, in the order of each outcome's first host."""
    groups: dict[tuple[bool, str], list[str]] = {}
    for r in results:
        groups.setdefault((r.ok, r.outcome), []).append(r.host)
    return [Folded(fold(hosts), len(hosts), ok, outcome) for (ok, outcome), hosts in groups.items()]


def report(action: str, results: list[Result]) -> dict:
    """The results for programs (`power --json`)."""
    return {
        "action": action,
        "hosts": {
            r.host: {"ok": True, "result": r.outcome} if r.ok else {"ok": False, "error": r.outcome} for r in results
        },
        "folded": [
            {"hosts": f.hosts, "count": f.count, "ok": f.ok, ("result" if f.ok else "error"): f.outcome}
            for f in folded(results)
        ],
        "failed": sum(1 for r in results if not r.ok),
    }


def set_next_boot_network(target, creds, timeout: float = TIMEOUT_S) -> str:
    """Make the host boot from the network (PXE) once, at its next start (Redfish: boot override
    Pxe, Once; IPMI: `chassis bootdev pxe`). A BmcError says why it could not."""
    return protocol(target).set_next_boot_network(target, creds, timeout)
