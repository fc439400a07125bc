"""A node's Redfish service through sushy: its power state, power on, off and cycle, and a
one-time network (PXE) boot.

Each call opens its own session (sushy's session-or-basic authentication) and closes it, so a
BMC's few session slots are never left taken. `target.system` names the node's system in the
service's Systems collection (an Id such as System.Embedded.1, or a node's name behind one
endpoint); None asks for the only one. sushy's retries are bounded here: an unreachable BMC
fails in seconds, not in sushy's default half minute."""

from __future__ import annotations

from contextlib import contextmanager

from . import BmcError

RETRIES, RETRY_DELAY_S = 2, 1


@contextmanager
def system_of(target, creds, timeout: float = 10):
    """The node's sushy System, for the duration of a `with`; sushy's errors, here or in the
    `with` body, become a BmcError that says why."""
    import sushy
    from sushy import auth as sushy_auth
    from sushy import exceptions

    try:
        with sushy_auth.SessionOrBasicAuth(creds.username, creds.password) as authentication:
            root = sushy.Sushy(
                target.address,
                auth=authentication,
                verify=target.verify_tls,
                connect_timeout=timeout,
                read_timeout=timeout,
                server_side_retries=RETRIES,
                server_side_retries_delay=RETRY_DELAY_S,
            )
            if target.system is None:
                system = root.get_system()
            else:
                collection = root.get_system_collection()
                system = root.get_system(f"{collection.path.rstrip('/')}/{target.system}")
            yield system
    except exceptions.SushyError as exc:
        raise BmcError(why(exc, target)) from None


def why(exc: Exception, target) -> str:
    """sushy's error in an admin's words (its own text names the URL and Redfish's message)."""
    from sushy import exceptions

    if isinstance(exc, exceptions.AccessError):
        if exc.status_code == 403:
            return "refused (HTTP 403): the BMC user may not do this (its role lacks the privilege)"
        return f"refused the credentials (HTTP {exc.status_code}): wrong username or password?"
    if isinstance(exc, exceptions.ResourceNotFoundError):
        if target.system and target.system in str(exc):
            return f"{target.address} has no system {target.system!r}"
        return f"{target.address} answered 404 Not Found: is it a Redfish service?"
    if isinstance(exc, exceptions.UnknownDefaultError):
        return f"{target.address} lists more or fewer than one system: name it with bmc.system"
    if isinstance(exc, exceptions.HTTPError):
        return f"the BMC answered HTTP {exc.status_code}: {exc.detail or exc.code}"
    if isinstance(exc, exceptions.ConnectionError):
        reason = str(exc)
        for words, said in _UNREACHABLE:
            if words in reason:
                return f"cannot reach {target.address}: {said}"
        return f"cannot reach {target.address}"
    return str(exc)


# What requests says when a BMC cannot be reached, in the words an admin acts on; first match wins.
_UNREACHABLE = (
    ("CERTIFICATE_VERIFY_FAILED", "its TLS certificate is not trusted here (bmc.verify_tls: false accepts it)"),
    ("SSL", "the TLS handshake failed"),
    ("Connection refused", "connection refused"),
    ("timed out", "timed out"),
    ("Name or service not known", "unknown host name"),
    ("No route to host", "no route to host"),
)


def _state(system) -> str:
    """'on', 'off', 'powering on', ... ('unknown' where the BMC does not say)."""
    state = system.power_state
    return "unknown" if state is None else str(getattr(state, "value", state)).replace("Powering", "powering ").lower()


def power_state(target, creds, timeout: float = 10) -> str:
    with system_of(target, creds, timeout) as system:
        return _state(system)


def power(target, creds, action: str, timeout: float = 10) -> str:
    """Power `on`, `off` (forced) or `cycle` the node; what was sent. A cycle of a node that is
    off powers it on (a forced restart of an off system is refused by many BMCs)."""
    import sushy

    with system_of(target, creds, timeout) as system:
        if action == "cycle":
            if _state(system) == "off":
                reset, sent = sushy.RESET_ON, "was off: power on sent"
            else:
                reset, sent = sushy.RESET_FORCE_RESTART, "power cycle sent"
        elif action == "on":
            reset, sent = sushy.RESET_ON, "power on sent"
        elif action == "off":
            reset, sent = sushy.RESET_FORCE_OFF, "power off sent"
        else:
            raise ValueError(f"unknown power action {action!r}")
        allowed = system.get_allowed_reset_system_values()
        if allowed and reset not in allowed:
            values = ", ".join(sorted(str(getattr(v, "value", v)) for v in allowed))
            raise BmcError(f"the system does not offer reset {reset.value} (it offers {values})")
        system.reset_system(reset)
        return sent


def set_next_boot_network(target, creds, timeout: float = 10) -> str:
    """Boot the node from the network (PXE) once, at its next start."""
    import sushy

    with system_of(target, creds, timeout) as system:
        system.set_system_boot_options(sushy.BOOT_SOURCE_TARGET_PXE, enabled=sushy.BOOT_SOURCE_ENABLED_ONCE)
        return "next boot: network (PXE), once"


def boot_override(target, creds, timeout: float = 10) -> tuple[str | None, str | None]:
    """The system's boot override as its BMC reports it: (target, enabled), e.g. ('Pxe', 'Once')."""
    with system_of(target, creds, timeout) as system:
        boot = system.boot

        def value(v):
            return None if v is None else str(getattr(v, "value", v))

        return value(boot.target), value(boot.enabled)
