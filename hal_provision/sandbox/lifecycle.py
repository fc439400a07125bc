"""Bring the sandbox cluster up and down with podman, and converge it with site.yml."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..hostlist import nodeset
from ..model import Cluster
from ..render.writer import write_tree
from . import image as image_mod
from .derive import DEFAULT_SUBNET, derive_sandbox
from .overlay import privileged_hosts, sandbox_files

LABEL = "io.hal-provision.sandbox"
REPO = Path(__file__).resolve().parents[2]


class LifecycleError(RuntimeError):
    pass


@dataclass(frozen=True)
class Sandbox:
    name: str  # label value, also the network name
    workdir: Path
    cluster: Cluster

    @property
    def rendered(self) -> Path:
        return self.workdir / "rendered"

    @property
    def inventory(self) -> Path:
        return self.rendered / "inventory"

    @property
    def hosts(self) -> list[str]:
        return [h for g in self.cluster.nodes for h in nodeset(g.hosts)]


def plan(full: Cluster, workdir: Path, computes: int = 2, subnet: str = DEFAULT_SUBNET) -> Sandbox:
    cluster = derive_sandbox(full, computes=computes, subnet=subnet)
    return Sandbox(name=f"{cluster.cluster.name}-sandbox", workdir=workdir, cluster=cluster)


def _podman(*args: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["podman", *args], text=True, capture_output=capture, check=False)
    if check and proc.returncode != 0:
        raise LifecycleError(f"podman {' '.join(args)} failed: {(proc.stderr or '').strip()}")
    return proc


def render(sb: Sandbox) -> None:
    write_tree(sandbox_files(sb.cluster), sb.rendered)


def create(sb: Sandbox, log=print) -> None:
    """Render, build the image if missing, start the network and one container per host."""
    if shutil.which("podman") is None:
        raise LifecycleError("podman is not installed (./bootstrap.sh demo installs it)")
    render(sb)
    image_mod.build()
    net = sb.name
    primary = sb.cluster.cluster.primary_network
    if _podman("network", "exists", net, check=False).returncode != 0:
        cidr = str(sb.cluster.networks[primary].cidr)
        _podman("network", "create", "--label", f"{LABEL}={sb.name}", "--subnet", cidr, net)
        log(f"network {net} ({cidr})")
    privileged = privileged_hosts(sb.cluster)
    for group in sb.cluster.nodes:
        first = int(group.addresses[primary])
        for i, host in enumerate(nodeset(group.hosts)):
            state = _podman("container", "inspect", "--format", "{{.State.Status}}", host, check=False)
            if state.returncode == 0:
                if state.stdout.strip() != "running":
                    _podman("start", host)
                    log(f"container {host} started")
                continue
            from ipaddress import IPv4Address

            args = ["run", "-d", "--name", host, "--hostname", host, "--label", f"{LABEL}={sb.name}",
                    "--network", net, "--ip", str(IPv4Address(first + i)), "--no-hosts",
                    "--systemd", "always", "--stop-signal", "SIGRTMIN+3"]
            if host in privileged:
                args.append("--privileged")
            _podman(*args, image_mod.IMAGE, "/sbin/init")
            log(f"container {host} {IPv4Address(first + i)}{' (privileged)' if host in privileged else ''}")
    for host in sb.hosts:
        _wait_booted(host)


def _wait_booted(host: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = _podman("exec", host, "systemctl", "is-system-running", check=False)
        if p.stdout.strip() in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise LifecycleError(f"{host}: systemd did not finish booting within {timeout:.0f} s")


def ansible_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    env["ANSIBLE_ROLES_PATH"] = str(REPO / "roles")
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    return env


def playbook_cmd(sb: Sandbox, playbook: str = "site.yml", *extra: str) -> list[str]:
    path = REPO / "playbooks" / playbook
    if not path.is_file():
        raise LifecycleError(f"{path} not found: the sandbox runs from a hal-provision checkout")
    exe = shutil.which("ansible-playbook")
    if exe is None:
        raise LifecycleError("ansible-playbook is not installed (./bootstrap.sh demo installs it)")
    return [exe, "-i", str(sb.inventory), str(path), *extra]


def converge(sb: Sandbox, *extra: str) -> int:
    return subprocess.run(playbook_cmd(sb, "site.yml", *extra), env=ansible_env(), check=False).returncode


def containers(name: str) -> list[dict]:
    p = _podman("ps", "-a", "--filter", f"label={LABEL}={name}", "--format", "json", check=False)
    return json.loads(p.stdout or "[]") if p.returncode == 0 else []


def destroy(name: str, workdir: Path | None, log=print) -> None:
    for c in containers(name):
        cname = c["Names"][0]
        _podman("rm", "-f", "-t", "2", cname)
        log(f"container {cname} removed")
    if _podman("network", "exists", name, check=False).returncode == 0:
        _podman("network", "rm", "-f", name)
        log(f"network {name} removed")
    vols = _podman("volume", "ls", "-q", "--filter", f"label={LABEL}={name}", check=False).stdout.split()
    for v in vols:
        _podman("volume", "rm", "-f", v)
        log(f"volume {v} removed")
    if workdir is not None and workdir.exists():
        shutil.rmtree(workdir)
        log(f"{workdir} removed")
