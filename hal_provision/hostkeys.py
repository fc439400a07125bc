"""SSH host keys of nodes that make new ones at each boot (network-booted, stateless): the key a
node offers now (`ssh-keyscan`), and the known_hosts file of its inventory brought up to date.
Used by `hal-provision reimage` and the bare-metal sandbox; docs/security.md says what this
trusts (the first key a node offers after a boot the controller asked for, on the provisioning
network)."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


def offered(address: str, timeout: int = 3) -> str | None:
    """The ed25519 host key the sshd at ADDRESS offers ("ssh-ed25519 BASE64"); None while none answers."""
    proc = subprocess.run(
        ["ssh-keyscan", "-T", str(timeout), "-t", "ed25519", address], capture_output=True, text=True, check=False
    )
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.startswith("#"):
            return f"{parts[1]} {parts[2]}"
    return None


def known_hosts_of(hostvars: dict) -> Path:
    """The known_hosts file a host's inventory makes ssh use (UserKnownHostsFile in
    ansible_ssh_common_args), else the user's own."""
    args = shlex.split(str(hostvars.get("ansible_ssh_common_args") or ""))
    for i, arg in enumerate(args):
        value = arg.split("=", 1)[1] if arg.startswith("UserKnownHostsFile=") else None
        if arg == "-o" and i + 1 < len(args) and args[i + 1].startswith("UserKnownHostsFile="):
            value = args[i + 1].split("=", 1)[1]
        if value:
            return Path(os.path.expanduser(value.split()[0]))
    return Path.home() / ".ssh" / "known_hosts"


def record(path: Path, names: list[str], key: str) -> None:
    """Every line of `names` dropped from the known_hosts file, `key` recorded for them (atomically;
    the file's mode kept, 0600 when new)."""
    kept = []
    if path.exists():
        for line in path.read_text().splitlines():
            first = line.split(" ", 1)[0] if line and not line.startswith("#") else ""
            if first and set(first.split(",")) & set(names):
                continue
            kept.append(line)
    kept.append(f"{','.join(names)} {key}")
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o600
    tmp = path.with_name(path.name + ".hal-tmp")
    tmp.write_text("\n".join(kept) + "\n")
    tmp.chmod(mode)
    tmp.replace(path)


def await_new(
    nodes: dict[str, tuple[str, Path]],
    before: dict[str, str | None],
    timeout: float,
    booted: Callable[[str, float], None] = lambda host, seconds: None,
    poll_s: float = 2,
) -> tuple[dict[str, float], list[str]]:
    """Until each node (host -> (address, its known_hosts file)) offers a host key other than
    its `before` one (None: any key): that key recorded under its name and address and
    `booted(host, seconds)` called. Returns the seconds each took, and the hosts still waiting
    when `timeout` ran out (empty when all came)."""
    started = time.monotonic()
    came: dict[str, float] = {}
    while True:
        for host, (address, known_hosts) in nodes.items():
            if host in came:
                continue
            key = offered(address)
            if key is not None and key != before.get(host):
                record(known_hosts, [host, address], key)
                came[host] = time.monotonic() - started
                booted(host, came[host])
        waiting = [h for h in nodes if h not in came]
        if not waiting or time.monotonic() - started > timeout:
            return came, waiting
        time.sleep(poll_s)
