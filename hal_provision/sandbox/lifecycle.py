"""Bring the sandbox cluster up and down with podman, and converge it with site.yml."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .. import tools
from ..hostlist import nodeset
from ..model import Cluster
from ..model.slurm_versions import operating_system, os_of_release
from ..render.writer import write_tree
from . import baremetal
from . import image as image_mod
from . import wheelhouse
from .derive import BMC_PORT, DEFAULT_SUBNET, SandboxError, bmc_endpoint, derive_sandbox, without_module_packages
from .overlay import NODE_PIP_CERT, SANDBOX_INVENTORY, SshAccess, privileged_hosts, sandbox_files
from .storage import shared_mounts

LABEL = "io.hal-provision.sandbox"
MODEL = "model.json"  # the derived model, beside the rendered tree
SOURCE = "sandbox.json"  # how it was made: the description and `sandbox up`'s options
# What site.yml runs against: the hal.provision.cluster inventory plugin reading the derived
# model itself (the groups and variables of the rendered inventory/hosts.yml, which `verify`
# and tests/infra go on reading), then inventory/sandbox.yml's SSH settings over it. The source
# sits in the rendered tree, so the plugin's default hal_rendered_dir, "{{ inventory_dir }}/../files",
# is the tree's files/ as with hosts.yml.
PLUGIN_SOURCE = "plugin-inventory/cluster.hal.yml"
PLUGIN_SOURCE_TEXT = (
    "# Written by `hal-provision sandbox`: the sandbox's hosts and groups, read from its derived\n"
    "# model by the hal.provision.cluster inventory plugin (site.yml runs with this, then\n"
    "# inventory/sandbox.yml; inventory/hosts.yml is the same inventory, for verify and tests).\n"
    "plugin: hal.provision.cluster\n"
    f"cluster_file: ../../{MODEL}\n"
)
REPO = Path(__file__).resolve().parents[2]


class LifecycleError(RuntimeError):
    pass


@dataclass(frozen=True)
class SharedMount:
    """A shared file system of the model, backed in the sandbox by one host directory."""

    name: str
    mount_point: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class Sandbox:
    name: str  # label value, also the network name
    workdir: Path
    cluster: Cluster
    shared: tuple[SharedMount, ...] = ()
    # The host's caches: the node image with the roles' packages in it and the wheelhouse the
    # portal installs from. Without them the nodes start bare and install everything from the
    # public archives, as a freshly installed site does.
    caches: bool = True
    # The nodes' Debian release (image.RELEASE_SLURM): its OS and Slurm major are the derived model's.
    release: str = image_mod.DEFAULT_RELEASE
    # The module environments whose Python packages this machine's pip could not find when the
    # sandbox was made: written without packages (create).
    without_packages: tuple[str, ...] = ()
    # Bare metal (sandbox up --bare-metal N): the compute nodes are QEMU guests that boot the
    # model's image from the management node (baremetal.py), not containers.
    bare_metal: bool = False

    @property
    def guests(self) -> dict[str, str]:
        """The bare-metal guests: host -> boot MAC (empty for a sandbox of containers)."""
        return {e.host: e.mac for e in self.cluster.boot_entries()} if self.bare_metal else {}

    @property
    def images(self) -> Path:
        """The image store of a bare-metal sandbox, bound into its boot server at provisioning.image_store."""
        return self.workdir.resolve() / "images"

    @property
    def rendered(self) -> Path:
        return self.workdir / "rendered"

    @property
    def addresses(self) -> dict[str, str]:
        """Host -> its address on the sandbox network (the model's primary network)."""
        return {host: self.cluster.host_address(host) for g in self.cluster.nodes for host in nodeset(g.hosts)}

    @property
    def ssh(self) -> SshAccess:
        """Root's key pair and the nodes' host keys, as a real site keeps them for Ansible."""
        d = self.workdir.resolve() / "ssh"
        return SshAccess(private_key=d / "id_ed25519", known_hosts=d / "known_hosts")

    def backing(self, mount: SharedMount) -> Path:
        return self.workdir.resolve() / "shared" / mount.name

    def scratch_disks(self) -> dict[str, list[tuple[str, Path, int]]]:
        """Host -> (device path in the node, backing file, size in GiB) of each local disk its
        profile's scratch is made of (derive.SCRATCH_STANDIN in a derived sandbox)."""
        out: dict[str, list[tuple[str, Path, int]]] = {}
        for g in self.cluster.nodes:
            profile = self.cluster.profile_of(g)
            if profile is None or profile.scratch is None:
                continue
            sizes = {d.device: d.size_gib for d in profile.local_disks}
            for host in nodeset(g.hosts):
                out[host] = [
                    (dev, self.workdir.resolve() / "disks" / f"{host}-{Path(dev).name}.img", sizes[dev])
                    for dev in profile.scratch.devices
                ]
        return out

    @property
    def inventory(self) -> Path:
        return self.rendered / "inventory"

    @property
    def hosts(self) -> list[str]:
        return [h for g in self.cluster.nodes for h in nodeset(g.hosts)]


def sandbox_name(cluster: Cluster) -> str:
    """The label and name prefix of a description's sandbox (the same for its derived model)."""
    return f"{cluster.cluster.name}-sandbox"


def plan(
    full: Cluster,
    workdir: Path,
    computes: int = 2,
    subnet: str = DEFAULT_SUBNET,
    caches: bool = True,
    cpu_only: bool = False,
    release: str | None = None,
    bare_metal: int = 0,
) -> Sandbox:
    """The sandbox of `full`: its derived model, rendered for the Slurm major of the nodes'
    release (None: the release of the description's cluster.os). The caches (the packages image
    and the wheelhouse) are Debian 12's: another release runs without them. `bare_metal`: that many
    compute nodes, QEMU guests booting the model's image (instead of `computes` containers)."""
    release = release or operating_system(full.cluster.os).release
    if release not in image_mod.RELEASE_SLURM:
        raise SandboxError(
            f"no sandbox nodes of Debian release {release!r} (known: {', '.join(image_mod.RELEASE_SLURM)})"
        )
    caches = caches and release == image_mod.DEFAULT_RELEASE
    cluster = derive_sandbox(
        full,
        computes=bare_metal or computes,
        subnet=subnet,
        cpu_only=cpu_only,
        os=os_of_release(release).name,
        bare_metal=bare_metal > 0,
        bmc_credentials=str(baremetal.credentials_path(workdir)),
    )
    keep = nodeset(",".join(g.hosts for g in cluster.nodes))
    shared = tuple(
        SharedMount(name, mount_point, tuple(hosts)) for (name, mount_point), hosts in shared_mounts(full, keep).items()
    )
    return Sandbox(
        name=sandbox_name(full),
        workdir=workdir,
        cluster=cluster,
        shared=shared,
        caches=caches,
        release=release,
        bare_metal=bare_metal > 0,
    )


def record_source(sb: Sandbox, file: Path | None, computes: int, subnet: str, cpu_only: bool = False) -> None:
    """What `sandbox up` was given, beside the derived model: the tests that scale the sandbox
    out and back run `sandbox up` again with the same description and one more compute node."""
    doc = {
        "file": str(file.absolute()) if file is not None else None,
        "computes": computes,
        "subnet": subnet,
        "caches": sb.caches,
        "cpu_only": cpu_only,
        "release": sb.release,
        "shared": [[m.name, m.mount_point, list(m.hosts)] for m in sb.shared],
        "without_packages": list(sb.without_packages),
        "bare_metal": len(sb.guests),
    }
    (sb.workdir / SOURCE).write_text(json.dumps(doc, indent=1) + "\n")


def workdir_of(rendered: Path) -> Path | None:
    """The work directory of the sandbox whose rendered tree RENDERED is (WORKDIR/rendered, with
    the derived model and sandbox.json beside it); None when it is no sandbox's."""
    rendered = Path(rendered)
    workdir = rendered.parent
    if rendered.name == "rendered" and (workdir / SOURCE).is_file() and (workdir / MODEL).is_file():
        return workdir
    return None


def _source(workdir: Path) -> dict:
    return json.loads((workdir / SOURCE).read_text())


def made_again(workdir: Path, full: Cluster) -> Sandbox:
    """The sandbox `sandbox up FULL` makes at WORKDIR with the options it was made with there
    (sandbox.json): what it would render, for `plan` on the sandbox."""
    source = _source(workdir)
    sb = plan(
        full,
        workdir,
        computes=source.get("computes", 2),
        subnet=source.get("subnet", DEFAULT_SUBNET),
        caches=source.get("caches", True),
        cpu_only=source.get("cpu_only", False),
        release=source.get("release"),
        bare_metal=source.get("bare_metal", 0),
    )
    missing = tuple(source.get("without_packages", []))
    if missing:
        sb = replace(sb, cluster=without_module_packages(sb.cluster, set(missing)), without_packages=missing)
    return sb


def up_options(workdir: Path, full: Cluster) -> list[str]:
    """The options of `sandbox up FULL` that make the sandbox at WORKDIR again as it was made."""
    source = _source(workdir)
    args = ["--workdir", str(workdir), "--computes", str(source.get("computes", 2))]
    if source.get("bare_metal"):
        args += ["--bare-metal", str(source["bare_metal"])]
    if source.get("subnet", DEFAULT_SUBNET) != DEFAULT_SUBNET:
        args += ["--subnet", source["subnet"]]
    if source.get("cpu_only"):
        args.append("--cpu-only")
    release = source.get("release") or image_mod.DEFAULT_RELEASE
    if release != operating_system(full.cluster.os).release:
        args += ["--release", release]
    if not source.get("caches", True) and release == image_mod.DEFAULT_RELEASE:
        args.append("--no-caches")
    return args


def strays(sb: Sandbox) -> list[str]:
    """The sandbox's containers that its model no longer has (after `up --computes` with fewer)."""
    return sorted(c["Names"][0] for c in containers(sb.name) if c["Names"][0] not in sb.addresses)


def host_pip_cert(environ: dict[str, str] | None = None, files: tuple[Path, ...] | None = None) -> Path | None:
    """The CA bundle the host's pip is told to trust (PIP_CERT, or `cert` in a pip
    configuration file), when there is one; None: pip's own (certifi), as on the nodes."""
    import configparser

    environ = os.environ if environ is None else environ
    if files is None:
        home = Path.home()
        files = (
            Path("/etc/xdg/pip/pip.conf"),
            Path("/etc/pip.conf"),
            home / ".pip/pip.conf",
            home / ".config/pip/pip.conf",
            *((Path(environ["PIP_CONFIG_FILE"]),) if environ.get("PIP_CONFIG_FILE") else ()),
        )
    value = environ.get("PIP_CERT")
    for path in files:
        if value is None and path.is_file():
            parser = configparser.ConfigParser()
            try:
                parser.read(path)
            except configparser.Error:
                continue
            value = parser.get("global", "cert", fallback=None) or value
    if value and Path(value).is_file():
        return Path(value).resolve()
    return None


def _podman(*args: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["podman", *args], text=True, capture_output=capture, check=False)
    if check and proc.returncode != 0:
        raise LifecycleError(f"podman {' '.join(args)} failed: {(proc.stderr or '').strip()}")
    return proc


def rendered_files(sb: Sandbox) -> dict[str, str]:
    """The sandbox's rendered tree: its model, with each directory user's SSH key replaced by
    the sandbox's own key pair for that user (see make_user_keys)."""
    shared = {m.mount_point: list(m.hosts) for m in sb.shared}
    return sandbox_files(
        with_user_keys(sb),
        sb.ssh,
        shared,
        pip_cert=host_pip_cert() is not None,
        wheelhouse=wheelhouse.NODE_WHEELHOUSE if sb.caches else None,
    )


def render(sb: Sandbox) -> None:
    write_tree({**rendered_files(sb), PLUGIN_SOURCE: PLUGIN_SOURCE_TEXT}, sb.rendered)
    # The derived model itself, so that tests can change it (disable a user, say) and render
    # the change the way an admin would.
    (sb.workdir / MODEL).write_text(sb.cluster.model_dump_json(indent=1, exclude_none=True) + "\n")


def load(workdir: Path) -> Sandbox:
    """The sandbox a previous `up` wrote into workdir: its derived model and what `up` was given,
    the shared mounts (found in the full model) among it, so that rendered_files(load(workdir))
    is the tree `up` rendered (a work directory from before they were recorded has none)."""
    cluster = Cluster.model_validate_json((workdir / MODEL).read_text())
    source = json.loads((workdir / SOURCE).read_text()) if (workdir / SOURCE).is_file() else {}
    shared = tuple(
        SharedMount(name, mount_point, tuple(hosts)) for name, mount_point, hosts in source.get("shared", [])
    )
    return Sandbox(
        name=f"{cluster.cluster.name}-sandbox",
        workdir=workdir,
        cluster=cluster,
        shared=shared,
        caches=source.get("caches", True),
        release=source.get("release", image_mod.DEFAULT_RELEASE),
        without_packages=tuple(source.get("without_packages", [])),
        bare_metal=bool(source.get("bare_metal")),
    )


def _keygen(key: Path, comment: str, log=print) -> None:
    """An ed25519 key pair, made once, private key 0600 in a 0700 directory (never in git)."""
    if key.is_file():
        return
    key.parent.mkdir(parents=True, exist_ok=True)
    key.parent.chmod(0o700)
    proc = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise LifecycleError(f"ssh-keygen failed: {proc.stderr.strip()}")
    key.chmod(0o600)
    log(f"ssh key {key}")


def make_root_key(sb: Sandbox, log=print) -> None:
    """Root's SSH key pair for the sandbox."""
    _keygen(sb.ssh.private_key, f"root@{sb.name}", log)


def make_user_keys(sb: Sandbox, log=print) -> None:
    """One key pair per directory user: the model's public keys belong to people whose private
    keys the sandbox cannot have, so the sandbox logs in as them with keys of its own."""
    for user in sb.cluster.accounts.users if sb.cluster.accounts else []:
        _keygen(sb.ssh.user_keys / user.name, f"{user.name}@{sb.name}", lambda _m: None)


def with_root_key(sb: Sandbox, cluster: Cluster) -> Cluster:
    """A bare-metal sandbox's model with its root public key baked into the images (what the
    enrolling push and Ansible reach the guests with), when made."""
    pub = Path(f"{sb.ssh.private_key}.pub")
    if not sb.bare_metal or cluster.provisioning is None or not pub.is_file():
        return cluster
    prov = cluster.provisioning.model_copy(update={"ssh_authorized_keys": [pub.read_text().strip()]})
    return cluster.model_copy(update={"provisioning": prov})


def with_user_keys(sb: Sandbox) -> Cluster:
    """The sandbox model with each directory user's keys replaced by the sandbox's pair, when made."""
    accounts = sb.cluster.accounts
    if accounts is None:
        return sb.cluster
    users = []
    for user in accounts.users:
        pub = sb.ssh.user_keys / f"{user.name}.pub"
        users.append(user.model_copy(update={"ssh_keys": [pub.read_text().strip()]}) if pub.is_file() else user)
    return sb.cluster.model_copy(update={"accounts": accounts.model_copy(update={"users": users})})


def fill_wheelhouse(sb: Sandbox, image: str, wheels: Path | None = None, log=print) -> dict[str, str]:
    """The wheelhouse filled with what this sandbox's portal and module environments pip-install,
    for the nodes of `image`; the module environments whose packages no pip source of this
    machine has (see wheelhouse.fill_available). Needs no container of the sandbox: `python -m
    hal_provision.sandbox.prefill` runs it ahead of `up`."""
    return wheelhouse.fill_available(
        rendered_files(sb), wheels or wheelhouse.default_dir(), image, host_pip_cert(), log
    )


CPU_SHARES_ENV = "HAL_CONTAINER_CPU_SHARES"


def cpu_shares_args(environ: dict | None = None) -> list[str]:
    """podman's --cpu-shares for the nodes, when $HAL_CONTAINER_CPU_SHARES names it: the test
    suite's side lanes start theirs with less than the default 1024, so that the scenario that
    decides the run's length gets the CPU first (a container is a cgroup: nice does not reach
    across cgroups)."""
    value = (os.environ if environ is None else environ).get(CPU_SHARES_ENV, "").strip()
    if not value:
        return []
    if not value.isdigit() or not 2 <= int(value) <= 262144:
        raise SandboxError(f"{CPU_SHARES_ENV}={value!r}: podman's --cpu-shares takes a whole number from 2 to 262144")
    return ["--cpu-shares", value]


def create(sb: Sandbox, log=print) -> Sandbox:
    """Render, build the image if missing, start the network and one container per host.
    Returns the sandbox as made: without the module environments whose packages this machine's
    pip cannot find (see wheelhouse.fill_available), when there are such."""
    for tool in ("podman", "ssh-keygen"):
        if tools.find(tool) is None:
            raise LifecycleError(f"{tool} is not installed (./bootstrap.sh demo installs it)")
    make_root_key(sb, log)
    make_user_keys(sb, log)
    if sb.bare_metal:  # the root key in the model's images: model.json and the tree say the same version
        sb = replace(sb, cluster=with_root_key(sb, sb.cluster))
        baremetal.ensure_libvirtd(log)
        build_images(sb, log)
    render(sb)
    image = image_mod.build_packages(release=sb.release) if sb.caches else image_mod.build(release=sb.release)
    wheels = None
    if sb.caches:
        wheels = wheelhouse.default_dir()
        missing = fill_wheelhouse(sb, image, wheels, log)
        for module, why in sorted(missing.items()):
            log(
                f"module {module}: its packages are in none of this machine's pip sources ({why}); the sandbox "
                "writes its modulefile and installs nothing for it, and the tests that need it skip"
            )
        if missing:
            sb = replace(
                sb, cluster=without_module_packages(sb.cluster, set(missing)), without_packages=tuple(sorted(missing))
            )
            render(sb)
    net = sb.name
    primary = sb.cluster.cluster.primary_network
    if _podman("network", "exists", net, check=False).returncode != 0:
        cidr = str(sb.cluster.networks[primary].cidr)
        _podman("network", "create", "--label", f"{LABEL}={sb.name}", "--subnet", cidr, net)
        log(f"network {net} ({cidr})")
    privileged = privileged_hosts(sb.cluster)
    for mount in sb.shared:
        sb.backing(mount).mkdir(parents=True, exist_ok=True)
    guests = sb.guests
    boot_server = sb.cluster.provisioning.boot_server if sb.bare_metal else None
    for host, ip in sb.addresses.items():
        if host in guests:
            continue
        state = _podman("container", "inspect", "--format", "{{.State.Status}}", host, check=False)
        if state.returncode == 0:
            if state.stdout.strip() != "running":
                _podman("start", host)
                log(f"container {host} started")
            continue
        args = [
            "run",
            "-d",
            "--name",
            host,
            "--hostname",
            host,
            "--label",
            f"{LABEL}={sb.name}",
            "--network",
            net,
            "--ip",
            ip,
            "--no-hosts",
            "--systemd",
            "always",
            "--stop-signal",
            "SIGRTMIN+3",
        ]
        if host in privileged:
            args.append("--privileged")
        if host == boot_server:  # dnsmasq answers the guests' DHCP; nginx serves the store read-only
            args += ["--cap-add", "NET_ADMIN,NET_RAW"]
            args += ["--mount", f"type=bind,src={sb.images},dst={sb.cluster.provisioning.image_store},ro=true"]
        args += cpu_shares_args()
        # The scratch's disks: a host loop device over a sparse file each, bound at the model's
        # device path (--device is ignored for privileged containers; a bound node is not).
        for device, backing, size_gib in sb.scratch_disks().get(host, []):
            args += ["--mount", f"type=bind,src={_loop_device(backing, size_gib)},dst={device}"]
        # Root's public key is the node's authorized key; the shared file systems are host
        # directories at the model's mount points.
        args += ["--mount", f"type=bind,src={sb.ssh.private_key}.pub,dst=/root/.ssh/authorized_keys,ro=true"]
        for mount in sb.shared:
            if host in mount.hosts:
                args += ["--mount", f"type=bind,src={sb.backing(mount)},dst={mount.mount_point}"]
        cert = host_pip_cert()
        if cert is not None:  # the nodes' pip reaches the index the way the host's does
            args += ["--mount", f"type=bind,src={cert},dst={NODE_PIP_CERT},ro=true"]
        if wheels is not None:
            args += ["--mount", f"type=bind,src={wheels},dst={wheelhouse.NODE_WHEELHOUSE},ro=true"]
        _podman(*args, image, "/sbin/init")
        log(f"container {host} {ip}{' (privileged)' if host in privileged else ''}")
    for host in sb.hosts:
        if host not in guests:
            _wait_booted(host)
    for host in sb.scratch_disks():
        if host not in guests:
            _settle_mount_namespaces(host, log)
    write_known_hosts(sb)
    for host, ip in sb.addresses.items():
        if host not in guests:
            _wait_ssh(host, ip)
    if guests:
        baremetal.ensure_libvirtd(log)  # again: a privileged node's systemd re-groups /dev/kvm at its boot
        baremetal.define_guests(sb.name, sb.workdir, guests, net, log)
        address = bmc_endpoint(sb.cluster.networks[primary].cidr)[1]
        baremetal.start_emulator(sb.workdir, address, BMC_PORT, list(guests), log)
    return sb


def build_images(sb: Sandbox, log=print) -> list:
    """The images the sandbox's guests boot, built into its store (images/build.py; nothing when
    the version is there), from its model (which has the sandbox's root key in them: create)."""
    from ..images import build as image_build
    from ..images import recipe as recipes

    cluster = sb.cluster
    prov = cluster.provisioning
    names = sorted({g.image for g in cluster.booted_groups})
    return [image_build.build(n, recipes.of_model(prov, n), sb.images, log=log) for n in names]


def _loop_device(backing: Path, size_gib: int) -> str:
    """The loop device over `backing` (a sparse file of `size_gib`, made when missing), with
    direct I/O: reads reach the disk, not the host's page cache of the file, as on an NVMe."""
    if tools.find("losetup") is None:
        raise LifecycleError("losetup is not installed (util-linux): the sandbox's scratch disks need it")
    backing.parent.mkdir(parents=True, exist_ok=True)
    if not backing.exists():
        with backing.open("wb") as f:
            f.truncate(size_gib * 2**30)
    found = _loops_over(backing)
    if found:
        return found[0]
    made = subprocess.run(
        ["losetup", "--find", "--show", "--direct-io=on", str(backing)], capture_output=True, text=True
    )
    if made.returncode != 0:
        raise LifecycleError(f"no loop device for {backing}: {made.stderr.strip()}")
    return made.stdout.strip()


# Each job's private /tmp (job_container/tmpfs, namespace/linux) holds its mount namespace by
# bind-mounting /proc/PID/ns/mnt, which the kernel refuses (EINVAL) unless the new namespace is
# newer than the caller's. Measured on this machine kind's kernel (6.18): namespace ids come
# from per-CPU batches, so inside a container whose namespace took its id from a later batch,
# a namespace made on another CPU can look older, and about half the jobs failed to start
# ("_create_ns: ns base mount failed: Invalid argument"); on the host (namespace id 1) never.
# Making namespaces on each CPU until one binds moves that CPU to a fresh batch (2,587 on CPU 0
# once); after that every job's namespace binds.
_SETTLE = r"""
set -u
d=$(mktemp -d /var/tmp/hal-ns-settle.XXXXXX)
mount --bind "$d" "$d"; mount --make-rprivate "$d"; touch "$d/.ns"
for cpu in $(seq 0 $(($(nproc) - 1))); do
  n=0
  until taskset -c "$cpu" unshare --mount="$d/.ns" true 2>/dev/null; do
    n=$((n + 1)); [ "$n" -lt 200000 ] || { echo "cpu$cpu unsettled"; break; }
  done
  umount "$d/.ns" 2>/dev/null || true
  echo "cpu$cpu $n"
done
umount "$d"; rm -rf "$d"
"""


SETTLE_SCRIPT = "/usr/local/sbin/hal-sandbox-settle-ns"
SETTLE_UNIT = "hal-sandbox-settle-ns.service"
_SETTLE_UNIT_TEXT = f"""[Unit]
Description=hal-provision sandbox: jobs' mount namespaces bindable on every CPU (see {SETTLE_SCRIPT})
DefaultDependencies=no
After=local-fs.target
Before=slurmd.service

[Service]
Type=oneshot
ExecStart={SETTLE_SCRIPT}
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""


def _settle_mount_namespaces(host: str, log=print) -> None:
    """Make jobs' mount namespaces bindable on every CPU of `host` (see _SETTLE) now, and at
    every start of its container (a unit before slurmd: a restarted container's namespace takes
    a new id, and the faults tests stop and start compute containers)."""
    install = (
        f"cat > {SETTLE_SCRIPT} && chmod 0755 {SETTLE_SCRIPT} && "
        f"printf '%s' {shlex.quote(_SETTLE_UNIT_TEXT)} > /etc/systemd/system/{SETTLE_UNIT} && "
        f"systemctl daemon-reload && systemctl enable --quiet {SETTLE_UNIT} && {SETTLE_SCRIPT}"
    )
    out = subprocess.run(
        ["podman", "exec", "-i", host, "bash", "-c", install],
        input="#!/bin/bash\n" + _SETTLE,
        capture_output=True,
        text=True,
        check=False,
    )
    counts = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.startswith("cpu"))
    if out.returncode != 0 or any(v == "unsettled" for v in counts.values()):
        raise LifecycleError(f"{host}: job mount namespaces cannot be bound: {out.stdout}{out.stderr}")
    made = sum(int(v) for v in counts.values())
    if made:
        log(f"{host}: {made} mount namespaces made before a job's could be bound on every CPU")


def _loops_over(backing: Path) -> list[str]:
    """The loop devices attached to `backing`."""
    found = subprocess.run(["losetup", "-j", str(backing), "-O", "NAME", "-n"], capture_output=True, text=True)
    return found.stdout.split() if found.returncode == 0 else []


def _detach_loops(workdir: Path, log=print) -> None:
    """Detach the loop devices over the sandbox's scratch disks (their containers are gone)."""
    disks = workdir / "disks"
    if not disks.is_dir() or tools.find("losetup") is None:
        return
    for backing in sorted(disks.glob("*.img")):
        for dev in _loops_over(backing):
            subprocess.run(["losetup", "-d", dev], capture_output=True)
            log(f"loop device {dev} ({backing.name}) detached")


def write_known_hosts(sb: Sandbox) -> None:
    """known_hosts for the sandbox: each node's own host key (made at its first start), under
    its name and address, so Ansible connects with strict host key checking as on a real site."""
    lines = []
    for host, ip in sb.addresses.items():
        if host in sb.guests:  # a guest's key is new at each boot: recorded when it boots (baremetal)
            continue
        key = _podman("exec", host, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()
        if len(key) < 2:
            raise LifecycleError(f"{host}: no SSH host key (is sshd in the node image?)")
        lines.append(f"{host},{ip} {key[0]} {key[1]}\n")
    sb.ssh.known_hosts.write_text("".join(lines))


def _wait_booted(host: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = _podman("exec", host, "systemctl", "is-system-running", check=False)
        if p.stdout.strip() in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise LifecycleError(f"{host}: systemd did not finish booting within {timeout:.0f} s")


def _wait_ssh(host: str, ip: str, timeout: float = 60) -> None:
    """Until the node's sshd greets from its address, as Ansible will reach it. A container
    started on the address of one removed a moment ago (the sandbox scaled in and out again)
    can be unreachable for seconds while the host's neighbour cache still holds the old one."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((ip, 22), timeout=3) as conn:
                conn.settimeout(3)
                if conn.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise LifecycleError(f"{host}: sshd at {ip}:22 did not answer within {timeout:.0f} s")
        time.sleep(0.5)


def inventories(inventory: Path | str) -> list[Path]:
    """The inventory sources every sandbox playbook reads, given the rendered tree's inventory/
    directory: the plugin's, then sandbox.yml (hal_provision.cli.runner runs the playbooks)."""
    rendered = Path(inventory).parent
    return [rendered / PLUGIN_SOURCE, rendered / SANDBOX_INVENTORY]


def containers(name: str) -> list[dict]:
    p = _podman("ps", "-a", "--filter", f"label={LABEL}={name}", "--format", "json", check=False)
    return json.loads(p.stdout or "[]") if p.returncode == 0 else []


# What the tests leave in the work directory for people to look at (the portal's browser
# screenshots): `sandbox down` keeps it, and removes everything else the sandbox made.
KEPT = ("screenshots",)


def destroy(name: str, workdir: Path | None, log=print) -> None:
    baremetal.destroy_guests(name, log)
    if workdir is not None:
        baremetal.stop_emulator(workdir)
    for c in containers(name):
        cname = c["Names"][0]
        # A container that stops by itself while podman kills it fails the first rm
        # ("container state improper"): the second one removes it.
        if _podman("rm", "-f", "-t", "2", cname, check=False).returncode != 0:
            _podman("rm", "-f", cname)
        log(f"container {cname} removed")
    if _podman("network", "exists", name, check=False).returncode == 0:
        _podman("network", "rm", "-f", name)
        log(f"network {name} removed")
    vols = _podman("volume", "ls", "-q", "--filter", f"label={LABEL}={name}", check=False).stdout.split()
    for v in vols:
        _podman("volume", "rm", "-f", v)
        log(f"volume {v} removed")
    if workdir is not None and workdir.exists():
        _detach_loops(workdir, log)
        kept = [workdir / name for name in KEPT if (workdir / name).exists()]
        for entry in workdir.iterdir():
            if entry not in kept:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        if kept:
            log(f"{workdir} removed but for the tests' artifacts: {', '.join(str(k) for k in kept)}")
        else:
            workdir.rmdir()
            log(f"{workdir} removed")
