"""A node's BMC over IPMI through ipmitool (`-I lanplus`, IPMI 2.0's RMCP+).

The password goes to ipmitool in its environment (IPMI_PASSWORD, read with -E), never on the
command line, where any user of the controller could read it in the process list. ipmitool's
own retries are bounded (-N seconds, -R retries) and the run has a deadline beside them."""

from __future__ import annotations

import os
import subprocess

from . import BmcError
from .. import tools

RETRIES = 2


def command(target, creds, *args: str, timeout: float = 10) -> list[str]:
    """The ipmitool command line for `args` (e.g. 'chassis', 'power', 'status'): no secret in it."""
    program = tools.find("ipmitool") or "ipmitool"
    interval = str(max(1, int(timeout // (RETRIES + 1))))
    return [program, "-I", "lanplus", "-H", target.address, "-U", creds.username, "-E"] + [
        "-N",
        interval,
        "-R",
        str(RETRIES),
        *args,
    ]


def run(target, creds, *args: str, timeout: float = 10) -> str:
    """ipmitool's stdout for `args`; a BmcError with ipmitool's own error otherwise."""
    argv = command(target, creds, *args, timeout=timeout)
    env = dict(os.environ, IPMI_PASSWORD=creds.password)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout * 2 + 5, check=False)
    except FileNotFoundError:
        raise BmcError("ipmitool is not installed (Debian: apt-get install ipmitool)") from None
    except subprocess.TimeoutExpired:
        raise BmcError(f"ipmitool gave no answer from {target.address} within {timeout * 2 + 5:.0f} s") from None
    if proc.returncode != 0:
        raise BmcError(why(proc.stderr or proc.stdout, target))
    return proc.stdout


def why(text: str, target) -> str:
    """ipmitool's error in an admin's words."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if any("Unable to establish IPMI v2" in line for line in lines):
        return f"no IPMI session with {target.address}: wrong username or password, IPMI over LAN off, or no answer"
    return "; ".join(lines[-2:]) or f"ipmitool failed on {target.address}"


def power_state(target, creds, timeout: float = 10) -> str:
    """'on' or 'off', from 'Chassis Power is on'."""
    text = run(target, creds, "chassis", "power", "status", timeout=timeout)
    words = text.strip().split()
    if not words or words[-1] not in ("on", "off"):
        raise BmcError(f"unexpected answer to `chassis power status`: {text.strip()!r}")
    return words[-1]


def power(target, creds, action: str, timeout: float = 10) -> str:
    """`chassis power on|off|cycle`; what was sent. A cycle of a node that is off powers it on
    (IPMI refuses a cycle in that state)."""
    if action not in ("on", "off", "cycle"):
        raise ValueError(f"unknown power action {action!r}")
    if action == "cycle" and power_state(target, creds, timeout) == "off":
        run(target, creds, "chassis", "power", "on", timeout=timeout)
        return "was off: power on sent"
    run(target, creds, "chassis", "power", action, timeout=timeout)
    return f"power {action} sent"


def set_next_boot_network(target, creds, timeout: float = 10) -> str:
    """`chassis bootdev pxe`: the next boot only (no `persistent` option)."""
    run(target, creds, "chassis", "bootdev", "pxe", timeout=timeout)
    return "next boot: network (PXE), once"
