"""`hal-provision reimage HOSTS`: network-booted nodes into the image version the model names,
through Slurm so that no job is killed.

1. Each node must boot an image (its group's `image`, a boot MAC) and the boot server must
   already serve the model's version for it (its iPXE script says `hal.image=NAME@VERSION`);
   else nothing happens and the message says to apply playbooks/boot-server.yml first.
2. Each node's BMC is told to boot from the network next time (Redfish boot override Pxe once,
   IPMI `chassis bootdev pxe`): a node with a disk of its own boots the image anyway.
3. slurmctld is asked to reboot them once their jobs end (`scontrol reboot ASAP
   nextstate=RESUME`, playbooks/reimage.yml): the nodes drain, running jobs finish, slurmd runs
   RebootProgram.
4. Each node that comes back answers SSH with a new host key (a stateless node makes its keys at
   each boot): that is how the reboot is seen, and the new key replaces the old one in the
   known_hosts file its inventory names (trust on first use, on the provisioning network: see
   docs/security.md). Then the controller enrols it (playbooks/enroll.yml in pull mode: the
   munge key, hal-converge and a converge from the published bundle; site.yml --limit in push
   mode) and waits until Slurm has it in service again; each node's image as its converge
   record says is printed.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

import typer

from .. import hostkeys
from ..hostlist import HostlistError, expand, fold
from ..images import recipe as recipes
from . import runner
from .common import checked, err, list_inventory, out

EXIT_UNUSABLE = 2
EXIT_FAILED = 1
POLL_S = 5
REASON = "hal-provision reimage"


def _fail(message: str, code: int = EXIT_UNUSABLE) -> None:
    err.print(f"error: {message}", style="bold red", markup=False)
    raise typer.Exit(code)


def served_image(url: str, timeout: float = 10) -> str | None:
    """NAME@VERSION the boot server's iPXE script at URL boots; None when it cannot be read."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            text = response.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return None
    found = re.search(r"\bhal\.image=(\S+)", text)
    return found.group(1) if found else None


def _playbook(inventory: Path, playbook: str, *extra: str, log: Path) -> None:
    cmd = runner.playbook_cmd(playbook, [inventory], *extra)
    run = runner.run_playbook(cmd, log=log)
    if run.returncode != 0:
        details = "; ".join(f"{f.host}: {f.task}: {f.message}" for f in getattr(run, "failures", [])[:5])
        _fail(f"{playbook} failed ({details or 'see ' + str(log)}); Ansible's output: {log}", EXIT_FAILED)


def reimage(
    hosts: str = typer.Argument(..., help="A hostlist of network-booted nodes, e.g. bm[01-02]."),
    file: Optional[Path] = typer.Option(
        None, "-f", "--file", help="cluster.yml; the embedded HAL description if omitted.", show_default=False
    ),
    inventory: Path = typer.Option(
        Path("rendered/inventory"), "-i", "--inventory", help="The rendered inventory directory (RENDERED/inventory)."
    ),
    timeout: int = typer.Option(
        7200, "--timeout", min=1, help="Seconds to wait for the nodes' jobs to end and the nodes to boot."
    ),
    log: Path = typer.Option(Path("reimage.log"), "--log", help="Where Ansible's own output goes (appended)."),
) -> None:
    """Reboot network-booted nodes into the image version the model names, through Slurm (`scontrol
    reboot ASAP`: after their jobs, none killed), enrol them, and wait until they are back in service."""
    from ..bmc import BmcError, power as bmc

    _loaded, model = checked(file)
    prov = model.provisioning
    if prov is None:
        _fail("the description has no `provisioning` section: no node boots an image from the network")
    try:
        chosen = expand(hosts)
    except HostlistError as exc:
        _fail(f"HOSTS: {exc}")
    entries = {e.host: e for e in model.boot_entries()}
    strangers = [h for h in chosen if h not in entries]
    if strangers:
        _fail(f"{fold(strangers)}: not network-booted nodes (a node group with `image` and a boot MAC)")
    versions = {name: recipes.version(recipes.of_model(prov, name)) for name in prov.images}
    server = model.address_on(prov.boot_server, prov.network)
    stale = {}
    for host in chosen:
        e = entries[host]
        wanted = f"{e.image}@{versions[e.image]}"
        url = f"http://{server}:{prov.http_port}/ipxe/{e.mac.replace(':', '-')}.ipxe"
        served = served_image(url)
        if served != wanted:
            stale[host] = (wanted, served, url)
    if stale:
        lines = [
            f"{h}: the boot server serves {s or 'nothing readable'} at {u}, the model {w}"
            for h, (w, s, u) in stale.items()
        ]
        _fail(
            "\n".join(lines)
            + "\nbuild the image there (hal-provision image build) and apply playbooks/boot-server.yml first"
        )
    try:
        listing = list_inventory(inventory)
    except Exception as exc:  # the inventory's own error, said once
        _fail(f"{inventory}: {exc}")
    hostvars = listing.get("_meta", {}).get("hostvars", {})
    pull = set(listing.get("deploy_pull", {}).get("hosts", []))
    addresses = {h: str(hostvars.get(h, {}).get("ansible_host") or entries[h].address or h) for h in chosen}
    before = {h: hostkeys.offered(addresses[h]) for h in chosen}

    with_bmc = [h for h in chosen if model.group_of(h).bmc is not None]
    if with_bmc:
        try:
            found = bmc.targets(model, with_bmc)
            creds = bmc.load_credentials(found)
        except BmcError as exc:
            _fail(str(exc))
        results = bmc.run(found, creds, "status", each=bmc.set_next_boot_network)
        failed = [r for r in results if not r.ok]
        if failed:
            _fail("\n".join(f"{r.host}: next boot from the network: {r.outcome}" for r in failed), EXIT_FAILED)
        out.print(f"{fold(with_bmc)}: next boot from the network (BMC)", markup=False)

    targets = ", ".join(sorted({f"{entries[h].image}@{versions[entries[h].image]}" for h in chosen}))
    reason = f"{REASON}: {targets}"
    names = fold(chosen)

    def slurm_step(tag: str, *extra: str) -> None:  # playbooks/reimage.yml's `request` or `wait`
        args = ("-e", f"reimage_hosts={names}", "-e", f"reimage_reason={reason}", *extra, "--tags", tag)
        _playbook(inventory, "reimage.yml", *args, log=log)

    slurm_step("request")
    out.print(
        f"{names}: reboot requested through Slurm ({reason}); waiting for their jobs and their boot", markup=False
    )
    started = time.monotonic()
    nodes = {h: (addresses[h], hostkeys.known_hosts_of(hostvars.get(h, {}))) for h in chosen}
    _came, waiting = hostkeys.await_new(
        nodes,
        before,
        timeout,
        lambda host, s: out.print(f"{host}: booted again after {s:.0f} s (new host key recorded)", markup=False),
        POLL_S,
    )
    if waiting:
        _fail(
            f"{fold(waiting)}: not booted again within {timeout} s (jobs still running, or the boot failed: "
            "see the node's console and `scontrol show node`)",
            EXIT_FAILED,
        )
    if set(chosen) <= pull:
        _playbook(inventory, "enroll.yml", "--limit", ",".join(chosen), log=log)
    else:
        _playbook(inventory, "site.yml", "--limit", ",".join(chosen), log=log)
    slurm_step("wait", "-e", f"reimage_wait_s={max(60, timeout - int(time.monotonic() - started))}")
    total = time.monotonic() - started
    out.print(f"{names}: back in service with {targets} ({total:.0f} s)", markup=False)
