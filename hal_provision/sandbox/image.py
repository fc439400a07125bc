"""Build the sandbox's node images locally: debootstrap + podman import, no container registry.

Two images per Debian release, the second built on the first:

* ``hal-node:bookworm`` (IMAGE), the bare node: Debian minbase, systemd, sshd and Python.
  The roles install every package from the public archive, as on a freshly installed node.
* ``hal-node:bookworm-packages`` (PACKAGES_IMAGE), the bare node with the Debian packages
  the roles install already in it, their services disabled, as sites boot nodes from an image
  that carries their packages. Measured here: the archive sends a node's 117 MB of packages
  in under 2 s, and installing them takes 48 s of dpkg on a 2-core machine, for every node of
  every sandbox. Built once per machine, and again when the roles' package lists change.

Debian 12 (bookworm, Slurm 22.05) is the default; ``--release trixie`` builds the same for
Debian 13 (Slurm 24.11). The Debian mirror is read from the host's own apt sources at run time,
so nothing here names a package registry; a trixie image gets the host's sources with the
release renamed. Usage: ``python3 -m hal_provision.sandbox.image [--force] [--bare] [--release R]``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hal_provision.files import cache_dir
from hal_provision.images.debian import ImageError, host_mirror
from hal_provision.images.debian import apt_sources_for as apt_sources_for  # the tests import it from here
from hal_provision.images.debian import copy_apt_sources as _copy_apt_sources
from hal_provision.images.recipe import role_services as recipe_role_services
from hal_provision.images.recipe import role_vars

# The Debian releases a sandbox node can run, each with the Slurm major its archive ships (the
# sandbox renders for that major, whatever the description's slurm.version says): the model's
# OPERATING_SYSTEMS (model/slurm_versions.py), written out here because the system's Python runs
# this builder without the model's packages; tests/unit/sandbox/test_sandbox.py keeps the two equal.
RELEASE_SLURM = {"bookworm": "22.05", "trixie": "24.11"}
DEFAULT_RELEASE = "bookworm"  # cluster.os's default, debian12


def image_name(release: str = DEFAULT_RELEASE) -> str:
    return f"localhost/hal-node:{release}"


def packages_image_name(release: str = DEFAULT_RELEASE) -> str:
    return f"localhost/hal-node:{release}-packages"


IMAGE = image_name()
# Bumped whenever what the image holds changes, so an older local image is rebuilt.
REVISION = "2"
REVISION_LABEL = "io.hal-provision.image-revision"
# openssh-server: Ansible and the tests reach every node over SSH, as on a real cluster.
PACKAGES = [
    "python3",
    "python3-apt",
    "systemd",
    "systemd-sysv",
    "dbus",
    "sudo",
    "procps",
    "iproute2",
    "ca-certificates",
    "openssh-server",
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
    "getty@tty1.service",
    "console-getty.service",
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "systemd-logind.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "systemd-timesyncd.service",
]


PACKAGES_IMAGE = packages_image_name()
PACKAGES_LABEL = "io.hal-provision.packages"
REPO = Path(__file__).resolve().parents[2]
# Packages a role must install itself: their installation reads site input prepared first.
NOT_IN_IMAGE = {
    "slapd": "ldap_server preseeds its domain, organization and admin password through debconf "
    "before it installs slapd; installed in the image, it would carry the builder's",
}
# Secrets and identities a package makes at installation; a node makes its own (the munge
# role generates the cluster key on its key host when none is there), never the image.
NODE_SECRETS = [
    "/etc/munge/munge.key",
    "/etc/ssl/private/ssl-cert-snakeoil.key",
    "/etc/ssl/certs/ssl-cert-snakeoil.pem",
]


def _role_vars(roles: Path, family: str, pattern: str) -> set[str]:
    """Plain names in the roles' `vars/<family>*.yml` under keys matching `pattern` (images/recipe.py)."""
    return role_vars(roles, family, pattern)


def role_packages(roles: Path = REPO / "roles", family: str = "Debian") -> list[str]:
    """The distribution packages the roles install on `family`, from their own vars files
    (`__<role>_<what>_packages`, `__<role>_<what>_package`): the image never carries more or
    less than they ask for."""
    return sorted(_role_vars(roles, family, r"__\w+_packages?"))


def role_services(roles: Path = REPO / "roles", family: str = "Debian") -> list[str]:
    """The services the roles enable and start where a node runs them (images/recipe.py)."""
    return recipe_role_services(roles, family)


def image_packages(roles: Path = REPO / "roles") -> list[str]:
    """What the packages image installs: the roles' packages but those they must install themselves."""
    return [p for p in role_packages(roles) if p not in NOT_IN_IMAGE and p not in PACKAGES]


def packages_revision(packages: list[str]) -> str:
    """Names the packages image's content: the base image's revision, the package list, the
    services it leaves to the roles and how it is built."""
    text = " ".join([REVISION, *packages, services_file(), packages_script()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _label(image: str, label: str) -> str | None:
    proc = subprocess.run(
        ["podman", "image", "inspect", "--format", f'{{{{index .Labels "{label}"}}}}', image],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def image_exists(image: str = IMAGE) -> bool:
    """The image is there and of this revision (an older one lacks what the sandbox needs)."""
    return _label(image, REVISION_LABEL) == REVISION


def packages_image_exists(packages: list[str], image: str = PACKAGES_IMAGE) -> bool:
    return _label(image, PACKAGES_LABEL) == packages_revision(packages)


def _run(cmd: list[str], **kw) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def lock_path(image: str) -> Path:
    """The lock a build of IMAGE holds, beside the other caches (podman's storage, like the cache
    directory, is the user's own)."""
    return cache_dir("image-locks") / (image.rsplit("/", 1)[-1].replace(":", "-") + ".lock")


@contextlib.contextmanager
def build_lock(image: str):
    """One build of IMAGE at a time: a second builder (tests/run-all.sh's, while the one
    ./bootstrap.sh started beside pip still runs; two sandboxes coming up at once) waits for the
    first and then finds the image there, instead of building it a second time beside it."""
    path = lock_path(image)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"{image}: another build runs, waiting for it", flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _built_once(image: str, there, make) -> str:
    """IMAGE, made by `make()` under its build lock unless `there()` says it is; checked again
    once the lock is held, as another builder may have made it meanwhile."""
    if not there():
        with build_lock(image):
            if not there():
                return make()
    print(f"{image} exists")
    return image


def build(image: str | None = None, force: bool = False, release: str = DEFAULT_RELEASE) -> str:
    if release not in RELEASE_SLURM:
        raise ImageError(f"no node image for Debian release {release!r} (known: {', '.join(RELEASE_SLURM)})")
    image = image or image_name(release)
    return _built_once(image, lambda: not force and image_exists(image), lambda: _build(image, release))


def _build(image: str, release: str) -> str:
    for tool in ("debootstrap", "podman", "tar"):
        if shutil.which(tool) is None:
            raise ImageError(f"{tool} is not installed (apt-get install debootstrap podman)")
    mirror = host_mirror()
    with tempfile.TemporaryDirectory(prefix="hal-node-") as tmp:
        root = Path(tmp) / "root"
        _run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", release, str(root), mirror],
            stdout=subprocess.DEVNULL,
        )
        _copy_apt_sources(root, release)
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
        _run(
            [
                "podman",
                "import",
                "--change",
                'CMD ["/sbin/init"]',
                "--change",
                "STOPSIGNAL SIGRTMIN+3",
                "--change",
                f"LABEL {REVISION_LABEL}={REVISION}",
                "-",
                image,
            ],
            stdin=tar.stdout,
            stdout=subprocess.DEVNULL,
        )
        tar.stdout.close()
        if tar.wait() != 0:
            raise ImageError("tar of the image root failed")
    return image


# Run inside `podman build` on the bare image: the packages, as the roles' apt would install
# them (recommends included), without starting anything; then the services that the packages
# enabled and that the roles enable themselves where a node runs them are disabled again (a
# compute node must not start MariaDB or chronyd because the image has them), everything else
# stays as the packages left it; what the packages generated as a node's own secret is removed.
_PACKAGES_SCRIPT = r"""
set -eu
export LC_ALL=C
export DEBIAN_FRONTEND=noninteractive
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 0755 /usr/sbin/policy-rc.d
systemctl list-unit-files --state=enabled --no-legend | awk '{print $1}' | sort > /tmp/enabled.before
apt-get update -q
apt-get install -y -q $(apt-cache pkgnames | sort -u | comm -12 - /tmp/wanted) {excluded}
systemctl list-unit-files --state=enabled --no-legend | awk '{print $1}' | sort > /tmp/enabled.after
comm -13 /tmp/enabled.before /tmp/enabled.after | comm -12 - /tmp/services | xargs -r systemctl disable
rm -f /usr/sbin/policy-rc.d {secrets} /tmp/wanted /tmp/services /tmp/enabled.*
apt-get clean
find /var/lib/apt/lists -type f -delete
touch -d @0 /var/lib/apt/lists
"""


# Recommends the roles never install (their apt tasks say install_recommends: false) and that
# would run in every node of every scenario: the node exporter's textfile scripts, each on its
# own timer. `NAME-` on apt's command line keeps a package out.
NOT_RECOMMENDED = ("prometheus-node-exporter-collectors",)


def packages_script() -> str:
    return _PACKAGES_SCRIPT.replace("{secrets}", " ".join(NODE_SECRETS)).replace(
        "{excluded}", " ".join(f"{p}-" for p in NOT_RECOMMENDED)
    )


def services_file() -> str:
    """The unit names the packages script disables, sorted as `comm` needs them: in byte order
    of the whole name ("prometheus-alertmanager.service" before "prometheus.service"), not of the
    role's service name, or comm silently skips every name after the first out of order."""
    return "".join(f"{u}\n" for u in sorted(f"{s}.service" for s in role_services()))


def build_packages(image: str | None = None, force: bool = False, release: str = DEFAULT_RELEASE) -> str:
    """The packages image, FROM the bare one (built first when missing)."""
    image = image or packages_image_name(release)
    packages = image_packages()
    return _built_once(
        image,
        lambda: not force and packages_image_exists(packages, image),
        lambda: _build_packages(image, build(release=release), packages),
    )


def _build_packages(image: str, base: str, packages: list[str]) -> str:
    revision = packages_revision(packages)
    script = packages_script()
    with tempfile.TemporaryDirectory(prefix="hal-node-packages-") as tmp:
        ctx = Path(tmp)
        (ctx / "wanted").write_text("".join(f"{p}\n" for p in sorted(packages)))
        (ctx / "services").write_text(services_file())
        (ctx / "install.sh").write_text(script)
        (ctx / "Containerfile").write_text(
            f"FROM {base}\n"
            "COPY wanted services /tmp/\n"
            "COPY install.sh /tmp/install.sh\n"
            "RUN sh /tmp/install.sh && rm /tmp/install.sh\n"
            f"LABEL {REVISION_LABEL}={REVISION} {PACKAGES_LABEL}={revision}\n"
        )
        _run(["podman", "build", "--quiet", "--tag", image, str(ctx)], stdout=subprocess.DEVNULL)
    return image


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--force", action="store_true", help="rebuild even if the image exists")
    ap.add_argument("--bare", action="store_true", help="only the bare image, not the packages image on it")
    ap.add_argument("--print-mirror", action="store_true", help="print the host's Debian mirror and exit")
    ap.add_argument(
        "--release",
        choices=sorted(RELEASE_SLURM),
        default=DEFAULT_RELEASE,
        help="the nodes' Debian release (default %(default)s)",
    )
    args = ap.parse_args(argv)
    if args.print_mirror:
        try:
            print(host_mirror())
        except ImageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        build(force=args.force, release=args.release)
        if not args.bare:
            build_packages(force=args.force, release=args.release)
    except (ImageError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
