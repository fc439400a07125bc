"""The sandbox's bare-metal nodes (`sandbox up FILE --bare-metal N`): QEMU guests with empty
disks on the sandbox's own podman network, each booting from the network that the sandbox's
management node serves (dnsmasq, iPXE and nginx of roles/boot_server), powered through a Redfish
BMC: sushy-tools' emulator, libvirt-backed, one system per guest, on a loopback address of this
host (derive.bmc_endpoint) with HTTP basic auth.

What lives where: the guests' disks and libvirt domain XML under WORKDIR/disks, their serial
consoles under WORKDIR/logs, the image store (what `hal-provision image build` makes, bound into
the management node at provisioning.image_store) under WORKDIR/images, the emulator's
configuration, password file, state and pid under WORKDIR/bmc; the BMC credentials (a random
password, 0600) in WORKDIR/bmc/credentials.yml, which the derived model names.

Each domain's <description> carries the sandbox's label, so `sandbox down` removes only its own.
libvirtd is started here when it does not answer (a host without systemd as PID 1: CI machines).
The guests run under QEMU's emulation, not KVM (domain_xml says why).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import urllib.error
import uuid
import urllib.request
from pathlib import Path
from xml.sax.saxutils import escape

from .. import tools

LIBVIRT_URI = "qemu:///system"
GUEST_MEMORY_MIB = 2048  # the squashfs root (about 280 MB) is held in memory, with room for jobs
GUEST_DISK_GIB = 8  # empty: the guest boots from the network; a site's node would have its own disk
DESCRIPTION = "hal-provision sandbox {name}"
BMC_USER = "admin"


class BareMetalError(RuntimeError):
    pass


def _run(argv: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)
    if check and proc.returncode != 0:
        raise BareMetalError(f"{' '.join(argv[:3])} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc


def virsh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["virsh", "-c", LIBVIRT_URI, *args], check=check)


def ensure_libvirtd(log=print, timeout: float = 30) -> None:
    """libvirtd answering on qemu:///system: started (with virtlogd) when it does not answer, by
    systemd where it is PID 1, else as daemons of their own."""
    for tool in ("virsh", "qemu-img", "qemu-system-x86_64", "mksquashfs"):
        if shutil.which(tool) is None:
            raise BareMetalError(
                f"{tool} is not installed (the bare-metal sandbox needs: apt-get install qemu-system-x86 qemu-utils "
                "ipxe-qemu libvirt-daemon-system squashfs-tools)"
            )
    try:
        import libvirt  # noqa: F401  (sushy-emulator's libvirt driver, in this environment)
    except ImportError:
        raise BareMetalError(
            "libvirt's Python bindings are not installed: apt-get install libvirt-dev pkg-config, then "
            "pip install -e '.[baremetal]' (docs/admins-guide.md, Bare metal)"
        ) from None
    if Path("/dev/kvm").exists():
        _kvm_for_qemu(log)
    if virsh("version", check=False).returncode == 0:
        return
    if Path("/run/systemd/system").is_dir():
        _run(["systemctl", "start", "libvirtd.service"], check=False)
    else:
        for daemon in ("virtlogd", "libvirtd"):
            if _run(["pgrep", "-x", daemon], check=False).returncode != 0:
                _run([daemon, "-d"])
                log(f"{daemon} started")
    deadline = time.monotonic() + timeout
    while virsh("version", check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise BareMetalError(f"libvirtd does not answer on {LIBVIRT_URI} after {timeout:.0f} s")
        time.sleep(0.5)


def _kvm_for_qemu(log=print) -> None:
    """/dev/kvm read-write for group kvm, as Debian's udev rule makes it: libvirt runs QEMU as
    libvirt-qemu (group kvm), and a device of another group makes libvirt find KVM unusable and
    probe QEMU again on every call (minutes per `virsh define`, Redfish calls timing out). A
    privileged sandbox node (an NFS server) shares the host's /dev, and its systemd's
    static-nodes rule gives /dev/kvm the node's own kvm group at each of its boots: so this runs
    again before the guests are defined and before they are powered on."""
    import grp

    try:
        kvm = grp.getgrnam("kvm").gr_gid
    except KeyError:
        return
    st = os.stat("/dev/kvm")
    if st.st_gid != kvm or st.st_mode & 0o060 != 0o060:
        os.chown("/dev/kvm", -1, kvm)
        os.chmod("/dev/kvm", (st.st_mode & 0o7777) | 0o060)
        log("/dev/kvm: group kvm, read-write (as Debian's udev rule makes it), for libvirt's QEMU")


def bridge_of(network: str) -> str:
    """The host bridge of a podman network (netavark names it podmanN)."""
    proc = _run(["podman", "network", "inspect", network])
    data = json.loads(proc.stdout)
    return data[0]["network_interface"]


def domain_uuid(label: str, name: str) -> str:
    """The guest's libvirt UUID, the same each time the sandbox defines it (a domain defined again
    under its name must keep its UUID)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"hal-provision:{label}:{name}"))


def domain_xml(name: str, mac: str, bridge: str, disk: Path, console_log: Path, label: str) -> str:
    """A guest that boots from the network first (its disk is empty), its serial console kept in
    a file: Q35, one vCPU, a virtio NIC (iPXE is its option ROM, Debian's ipxe-qemu).

    QEMU's own emulation (TCG, libvirt type 'qemu'), not KVM: on this project's machines
    /dev/kvm is PVM (kvm_pvm: it runs only guests whose kernel is built for it), and a KVM guest
    stops in iPXE right after its banner (q35 or pc, virtio or e1000, every timer setting tried),
    while under TCG it boots the image in about 80 s. A site's nodes are real machines; nothing
    here depends on it."""
    return f"""<domain type='qemu'>
  <name>{escape(name)}</name>
  <uuid>{domain_uuid(label, name)}</uuid>
  <description>{escape(label)}</description>
  <memory unit='MiB'>{GUEST_MEMORY_MIB}</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='q35'>hvm</type>
    <boot dev='network'/>
    <boot dev='hd'/>
    <bios useserial='yes'/>
  </os>
  <features><acpi/><apic/></features>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='{escape(str(disk))}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <interface type='bridge'>
      <mac address='{mac}'/>
      <source bridge='{escape(bridge)}'/>
      <model type='virtio'/>
    </interface>
    <serial type='pty'>
      <log file='{escape(str(console_log))}' append='on'/>
      <target port='0'/>
    </serial>
    <console type='pty'><target type='serial' port='0'/></console>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
    <memballoon model='none'/>
  </devices>
</domain>
"""


def guests_of(label: str) -> list[str]:
    """The libvirt domains carrying the sandbox's label."""
    proc = virsh("list", "--all", "--name", check=False)
    if proc.returncode != 0:
        return []
    found = []
    for name in proc.stdout.split():
        if virsh("desc", name, check=False).stdout.strip() == label:
            found.append(name)
    return found


def define_guests(name: str, workdir: Path, guests: dict[str, str], network: str, log=print) -> None:
    """One powered-off guest per host (host -> boot MAC), with an empty disk; defined again
    (same name, same MAC) when it is there already, so a changed description takes effect."""
    label = DESCRIPTION.format(name=name)
    bridge = bridge_of(network)
    disks, logs = workdir.resolve() / "disks", workdir.resolve() / "logs"
    disks.mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    for host, mac in guests.items():
        state = virsh("domstate", host, check=False)
        if state.returncode == 0 and virsh("desc", host, check=False).stdout.strip() != label:
            raise BareMetalError(f"a libvirt domain {host} exists and is not this sandbox's: remove it first")
        disk = disks / f"{host}.qcow2"
        if not disk.exists():
            _run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), f"{GUEST_DISK_GIB}G"])
        xml = disks / f"{host}.xml"
        xml.write_text(domain_xml(host, mac, bridge, disk, logs / f"{host}-console.log", label))
        virsh("define", str(xml))
        log(f"guest {host} {mac} on {bridge} (off: power it on through its BMC)")


def destroy_guests(name: str, log=print) -> None:
    if shutil.which("virsh") is None:
        return
    for guest in guests_of(DESCRIPTION.format(name=name)):
        virsh("destroy", guest, check=False)
        virsh("undefine", guest, "--nvram", check=False)
        log(f"guest {guest} removed")


def _credentials(workdir: Path) -> tuple[Path, str]:
    """WORKDIR/bmc/credentials.yml (0600), made once with a random password: (path, password)."""
    import yaml

    path = workdir.resolve() / "bmc" / "credentials.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        return path, yaml.safe_load(path.read_text())["password"]
    password = secrets.token_urlsafe(18)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(
            f"# The sandbox's BMC emulator (made by sandbox up; never in git)\nusername: {BMC_USER}\npassword: {password}\n"
        )
    return path, password


def credentials_path(workdir: Path) -> Path:
    return workdir.resolve() / "bmc" / "credentials.yml"


def start_emulator(workdir: Path, address: str, port: int, guests: list[str], log=print, timeout: float = 30) -> None:
    """sushy-emulator on ADDRESS:PORT (libvirt driver, only the guests named, basic auth with the
    credentials file's password), detached; left as it is when it answers already."""
    import bcrypt

    base = f"http://{address}:{port}/redfish/v1/"
    bmc = workdir.resolve() / "bmc"
    path, password = _credentials(workdir)
    (bmc / "htpasswd").write_text(f"{BMC_USER}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(6)).decode()}\n")
    (bmc / "htpasswd").chmod(0o600)
    uuids = [virsh("domuuid", g).stdout.strip() for g in guests]
    config = bmc / "emulator.conf"
    config.write_text(
        "# sushy-tools' emulator for the sandbox's guests (made by sandbox up)\n"
        f"SUSHY_EMULATOR_LISTEN_IP = {address!r}\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_LIBVIRT_URI = {LIBVIRT_URI!r}\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(bmc / 'state')!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(bmc / 'htpasswd')!r}\n"
        f"SUSHY_EMULATOR_ALLOWED_INSTANCES = {[*guests, *uuids]!r}\n"
    )
    if _answers(base):
        stop_emulator(workdir)
    exe = tools.find("sushy-emulator")
    if exe is None:
        raise BareMetalError("sushy-emulator is not installed (pip install -e .[sandbox])")
    logs = workdir.resolve() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "bmc-emulator.log", "a") as out:
        proc = subprocess.Popen(
            [exe, "--config", str(config)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    (bmc / "emulator.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + timeout
    while not _answers(base):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise BareMetalError(f"sushy-emulator did not answer at {base} (see {logs / 'bmc-emulator.log'})")
        time.sleep(0.3)
    log(f"BMC emulator {base} ({len(guests)} systems, credentials {path})")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


def stop_emulator(workdir: Path) -> None:
    pid_file = workdir.resolve() / "bmc" / "emulator.pid"
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    pid_file.unlink(missing_ok=True)
