"""Build the sandbox node image locally: debootstrap + podman import, no container registry.

The Debian mirror is read from the host's own apt sources at run time, so nothing here names
a package registry. Usage: ``python3 -m hal_provision.sandbox.image [--force]``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

IMAGE = "localhost/hal-node:bookworm"
# Bumped whenever what the image holds changes, so an older local image is rebuilt.
REVISION = "2"
REVISION_LABEL = "io.hal-provision.image-revision"
SUITE = "bookworm"
# openssh-server: Ansible and the tests reach every node over SSH, as on a real cluster.
PACKAGES = [
    "python3", "python3-apt", "systemd", "systemd-sysv", "dbus", "sudo", "procps",
    "iproute2", "ca-certificates", "openssh-server",
]
# Host keys are made by each node at its first start, never baked into the shared image:
# ssh.service's own ExecStartPre (sshd -t) needs them, so the drop-in puts ssh-keygen first.
SSH_HOSTKEYS_DROPIN = (
    "# hal-provision node image: every container makes its own SSH host keys at first start.\n"
    "[Service]\n"
    "ExecStartPre=\n"
    "ExecStartPre=/usr/bin/ssh-keygen -A\n"
    "ExecStartPre=/usr/sbin/sshd -t\n"
)
# Units that make no sense in a container and only slow its boot or spin.
MASKED_UNITS = [
    "getty@tty1.service", "console-getty.service", "systemd-udevd.service",
    "systemd-udev-trigger.service", "systemd-logind.service", "apt-daily.timer",
    "apt-daily-upgrade.timer", "systemd-timesyncd.service",
]


class ImageError(RuntimeError):
    pass


def host_mirror(etc_apt: Path = Path("/etc/apt")) -> str:
    """The first Debian archive URI of the host's apt sources that carries the main suite."""
    candidates: list[str] = []
    for src in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        for stanza in src.read_text().split("\n\n"):
            fields = dict(
                (k.strip(), v.strip())
                for k, _, v in (ln.partition(":") for ln in stanza.splitlines() if ":" in ln and not ln.startswith("#"))
            )
            suites = fields.get("Suites", "").split()
            if any(s == SUITE or s.startswith(SUITE) and "security" not in s for s in suites) and "security" not in fields.get("URIs", ""):
                candidates.extend(fields.get("URIs", "").split())
    lists = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]
    for lst in lists:
        if lst.is_file():
            for ln in lst.read_text().splitlines():
                m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", ln.strip())
                if m and m.group(2) == SUITE and "security" not in m.group(1):
                    candidates.append(m.group(1))
    if not candidates:
        raise ImageError(f"no Debian '{SUITE}' archive found in the host's apt sources under {etc_apt}")
    return candidates[0]


def image_exists(image: str = IMAGE) -> bool:
    """The image is there and of this revision (an older one lacks what the sandbox needs)."""
    proc = subprocess.run(["podman", "image", "inspect", "--format", f'{{{{index .Labels "{REVISION_LABEL}"}}}}', image],
                          capture_output=True, text=True, check=False)
    return proc.returncode == 0 and proc.stdout.strip() == REVISION


def _run(cmd: list[str], **kw) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def build(image: str = IMAGE, force: bool = False) -> str:
    if image_exists(image) and not force:
        print(f"{image} exists")
        return image
    for tool in ("debootstrap", "podman", "tar"):
        if shutil.which(tool) is None:
            raise ImageError(f"{tool} is not installed (apt-get install debootstrap podman)")
    mirror = host_mirror()
    with tempfile.TemporaryDirectory(prefix="hal-node-") as tmp:
        root = Path(tmp) / "root"
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(root), mirror],
             stdout=subprocess.DEVNULL)
        # The container uses the same archives as the host.
        for rel in ("sources.list", "sources.list.d"):
            src = Path("/etc/apt") / rel
            dst = root / "etc/apt" / rel
            if src.is_dir():
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src, dst)
            elif src.is_file():
                shutil.copy2(src, dst)
        (root / "etc/machine-id").write_text("")
        for key in (root / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        dropin = root / "etc/systemd/system/ssh.service.d/hal-hostkeys.conf"
        dropin.parent.mkdir(parents=True, exist_ok=True)
        dropin.write_text(SSH_HOSTKEYS_DROPIN)
        (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
        for unit in MASKED_UNITS:
            link = root / "etc/systemd/system" / unit
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.exists() or link.is_symlink():
                link.unlink()
            link.symlink_to("/dev/null")
        # Empty apt lists, dated at the epoch: the apt module's cache_valid_time must see
        # them as stale, or it skips the update and finds no packages.
        lists = root / "var/lib/apt/lists"
        for f in lists.glob("*"):
            if f.is_file():
                f.unlink()
        _run(["touch", "-d", "@0", str(lists)])
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        _run(["podman", "import", "--change", 'CMD ["/sbin/init"]', "--change", "STOPSIGNAL SIGRTMIN+3",
              "--change", f"LABEL {REVISION_LABEL}={REVISION}", "-", image], stdin=tar.stdout, stdout=subprocess.DEVNULL)
        tar.stdout.close()
        if tar.wait() != 0:
            raise ImageError("tar of the image root failed")
    return image


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    ap.add_argument("--image", default=IMAGE)
    ap.add_argument("--print-mirror", action="store_true", help="print the host's Debian mirror and exit")
    args = ap.parse_args(argv)
    if args.print_mirror:
        try:
            print(host_mirror())
        except ImageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        build(args.image, args.force)
    except (ImageError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
