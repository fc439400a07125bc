"""Run Debian's real Slurm daemons on a rendered tree, on the host, without containers.

The renderers are checked by the programs that will read their output in production:

* ``slurmctld`` loads the rendered slurm.conf, gres.conf, topology.conf and cgroup.conf, and
  ``scontrol`` reports what it really understood (nodes, partitions, switches, settings).
* ``slurmd -C`` / ``slurmd -G`` run under a synthetic hwloc topology of the node's hardware
  profile and fake ``/dev/nvidiaN`` devices: what slurmd would detect, and whether it accepts
  the rendered gres.conf (Cores=, Links=) for that hardware.
* ``slurmdbd`` parses the rendered slurmdbd.conf and gets as far as connecting to MariaDB.

Two Slurm majors run the same checks (``SlurmInstall``): the host's (Debian 12, 22.05) and
Debian 13's 24.11 from a root that ``hal_provision.sandbox.slurmroot`` builds in the user's
cache. The root's programs (munged and scontrol included) run with ``chroot`` in the same
private namespaces, which show the root the scratch directory at its own path, the rendered
Slurm configs as its /etc/slurm, the rendered /etc/hosts, /proc, /sys and /dev; the tree is
rendered for the major (``slurm.version``), so each daemon reads what its version expects.

Each daemon runs in a private UTS + mount + network namespace: its hostname is the service
host of the description, ``/etc/hosts`` is the rendered one (bind-mounted), the service
host's rendered addresses sit on the namespace's loopback, and no packet leaves the host, so
the rendered ports are kept and concurrent runs cannot collide. A private ``munged`` with its
own key and socket authenticates. Everything lives in a fresh scratch directory and is
removed afterwards; daemons get SIGKILL if the test process dies (PR_SET_PDEATHSIG).

Only the keys in ``slurm_conf_rewrites`` / ``slurmdbd_conf_rewrites`` are rewritten, each
under a ``# harness:`` comment saying why; every other line stays byte-identical (a test
checks this). SlurmctldPort and SlurmdPort need no rewrite: the network namespace is private.
Needs root; see ``missing_requirements``.
"""

from __future__ import annotations

import ctypes
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from hal_provision.render import render_all
from infra.deployed import retry  # tests/ is on sys.path: this package's own parent

SLURM_DIR = "files/etc/slurm"
HOSTS_FILE = "files/etc/hosts"

# Program -> Debian package that provides it.
REQUIRED_PROGRAMS = {
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "slurmdbd": "slurmdbd",
    "scontrol": "slurm-client",
    "munged": "munge",
    "lstopo": "hwloc",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "mount": "mount",
    "ip": "iproute2",
    "timeout": "coreutils",
    "chroot": "coreutils",
    "setpriv": "util-linux",
    "systemd-analyze": "systemd",
}
_SBIN = ("/usr/local/sbin", "/usr/sbin", "/sbin")

START_TIMEOUT = 15.0  # s: slurmctld answers `scontrol ping` in < 1 s on a 2-core VM
COMMAND_TIMEOUT = 20.0  # s: any single command
STOP_TIMEOUT = 5.0  # s: SIGTERM, then SIGKILL
POLL = 0.05  # s: between looks at a socket or a log while a daemon starts


class HarnessError(AssertionError):
    """The daemons could not be brought up or queried; the message carries their logs."""


def missing_requirements() -> list[str]:
    """What this host lacks to run the acceptance tests (empty when all is there)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("must run as root (namespaces, bind mounts, mknod)")
    for prog, package in REQUIRED_PROGRAMS.items():
        if _which(prog) is None:
            problems.append(f"{prog} not found (Debian package {package})")
    return problems


def _which(prog: str) -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN])
    return shutil.which(prog, path=path)


def _prog(prog: str) -> str:
    found = _which(prog)
    if found is None:
        raise HarnessError(f"{prog} not found (Debian package {REQUIRED_PROGRAMS[prog]})")
    return found


_libc = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process goes away."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


# ---- which Slurm ---------------------------------------------------------------------------

HOST_MAJOR = "22.05"  # Debian 12's


@dataclass(frozen=True)
class SlurmInstall:
    """The Slurm the daemons come from: the host's (root None) or a root's, run with chroot.

    Only the daemons and their clients (slurmctld, slurmd, slurmdbd, scontrol, munged, timeout)
    come from the root; namespaces, mounts and lstopo's synthetic topology (hwloc's XML, read
    by the root's hwloc) are the host's.
    """

    major: str
    root: Path | None = None

    @property
    def name(self) -> str:
        return f"Slurm {self.major}" + (f" from {self.root}" if self.root else " (host)")

    def argv(self, prog: str, *args: str) -> list[str]:
        if self.root is None:
            return [_prog(prog), *args]
        for bin_dir in ("usr/sbin", "usr/bin"):
            if (self.root / bin_dir / prog).exists():
                return [_prog("chroot"), str(self.root), f"/{bin_dir}/{prog}", *args]
        raise HarnessError(f"{prog} not found in the {self.major} root {self.root}")

    def mount_steps(self, scratch: "Scratch", dev: str = "bind") -> list[str]:
        """Shell lines, in a private mount namespace, that show the root what the host's daemons
        see: the scratch directory at its own path (on a tmpfs /tmp, so the cached root is never
        written), the rendered configs as /etc/slurm, the rendered /etc/hosts, /proc, /sys, and
        /dev: the host's (`dev` "bind") or a fresh tmpfs ("tmpfs", slurmd's emulated node)."""
        if self.root is None:
            return []
        r = self.root
        q = lambda p: shlex.quote(str(p))  # noqa: E731
        steps = [
            f"mount -t tmpfs -o mode=1777 none {q(r / 'tmp')}",
            f"mkdir -p {q(r / scratch.root.relative_to('/'))}",
            f"mount --bind {q(scratch.root)} {q(r / scratch.root.relative_to('/'))}",
            f"mount --bind {q(scratch.conf_dir)} {q(r / 'etc/slurm')}",
            f"mount --bind {q(scratch.hosts_file)} {q(r / 'etc/hosts')}",
            f"mount --bind /proc {q(r / 'proc')}",
            f"mount --rbind /sys {q(r / 'sys')}",
        ]
        if dev == "tmpfs":
            steps.append(f"mount -t tmpfs -o mode=755 none {q(r / 'dev')}")
        else:
            steps.append(f"mount --rbind /dev {q(r / 'dev')}")
        return steps

    def dev_dir(self) -> str:
        """Where /dev of the daemons lies, seen from the host's side of the mount namespace."""
        return str(self.root / "dev") if self.root else "/dev"


HOST_SLURM = SlurmInstall(HOST_MAJOR)


# ---- rewriting the rendered files ---------------------------------------------------------


@dataclass(frozen=True)
class Rewrite:
    """One harness-only change to a rendered key; value None comments the line out."""

    key: str
    value: str | None
    reason: str
    add_if_missing: bool = False
    optional: bool = False  # the model decides whether the rendered file sets the key


def slurm_conf_rewrites(scratch: Path, munge_socket: Path, controller: str = "") -> list[Rewrite]:
    """The harness's keys; `controller` names a backup's own pid and log files (two slurmctld
    on one pid file: the second kills the first as a stale daemon). Both share the state."""
    own = f"-{controller}" if controller else ""
    return [
        Rewrite("SlurmUser", "root", "the scratch files belong to root; no slurm account needed"),
        Rewrite("StateSaveLocation", str(scratch / "state"), "fresh state for every run"),
        Rewrite("SlurmdSpoolDir", str(scratch / "spool"), "nothing under /var/lib"),
        Rewrite("SlurmctldPidFile", str(scratch / f"slurmctld{own}.pid"), "nothing under /run"),
        Rewrite("SlurmdPidFile", str(scratch / "slurmd.pid"), "nothing under /run"),
        Rewrite("SlurmctldLogFile", str(scratch / f"log/slurmctld{own}.log"), "log kept with the run"),
        Rewrite("SlurmdLogFile", str(scratch / "log/slurmd.log"), "log kept with the run"),
        Rewrite(
            "AccountingStorageType",
            "accounting_storage/none",
            "no slurmdbd and MariaDB here (slurmdbd.conf is checked on its own)",
        ),
        Rewrite(
            "AccountingStorageTRES",
            None,
            "with accounting_storage/none slurmctld stops: 'fatal: slurmdbd is required to run with TRES gres/gpu'",
        ),
        Rewrite(
            "AccountingStorageEnforce",
            None,
            "enforcement needs the slurmdbd that accounting_storage/none replaces: 'error: You can "
            "not have AccountingStorageEnforce set for AccountingStorageType='accounting_storage/none''",
            optional=True,
        ),
        Rewrite(
            "AuthInfo",
            f"socket={munge_socket}",
            "the private munged's socket",
            add_if_missing=True,
        ),
    ]


def slurmdbd_conf_rewrites(scratch: Path, munge_socket: Path) -> list[Rewrite]:
    return [
        Rewrite("SlurmUser", "root", "the scratch files belong to root; no slurm account needed"),
        Rewrite("LogFile", str(scratch / "log/slurmdbd.log"), "log kept with the run"),
        Rewrite("PidFile", str(scratch / "slurmdbd.pid"), "nothing under /run"),
        Rewrite(
            "AuthInfo",
            f"socket={munge_socket}",
            "the private munged's socket",
            add_if_missing=True,
        ),
    ]


_KEY_LINE = re.compile(r"^([A-Za-z]+)=")


def line_key(line: str) -> str | None:
    """The parameter a line sets ('SlurmUser=slurm' -> 'SlurmUser'); None for others."""
    m = _KEY_LINE.match(line)
    return m.group(1) if m else None


def apply_rewrites(text: str, rewrites: list[Rewrite], file: str) -> str:
    """Rewrite only the named keys, each preceded by a '# harness:' comment saying why."""
    by_key = {r.key: r for r in rewrites}
    seen: set[str] = set()
    out = []
    for line in text.splitlines(keepends=True):
        key = line_key(line)
        rewrite = by_key.get(key) if key else None
        if rewrite is None:
            out.append(line)
            continue
        seen.add(key)
        out.append(_rewritten(rewrite, line.rstrip("\n")))
    for rewrite in rewrites:
        if rewrite.key in seen or (rewrite.optional and not rewrite.add_if_missing):
            continue
        if not rewrite.add_if_missing:
            raise HarnessError(f"the rendered {file} no longer sets {rewrite.key}; update the harness rewrites")
        out.append(_rewritten(rewrite, None))
    return "".join(out)


def _rewritten(rewrite: Rewrite, original: str | None) -> str:
    if rewrite.value is None:
        return f"# harness: dropped {original!r}: {rewrite.reason}\n"
    return f"# harness: {rewrite.reason}\n{rewrite.key}={rewrite.value}\n"


def untouched_lines(text: str, rewrites: list[Rewrite]) -> list[str]:
    """The lines the harness must leave byte-identical: all but its keys and comments."""
    keys = {r.key for r in rewrites}
    return [
        line
        for line in text.splitlines(keepends=True)
        if line_key(line) not in keys and not line.startswith("# harness:")
    ]


# ---- scratch tree -------------------------------------------------------------------------


def for_major(cluster, major: str):
    """`cluster` with slurm.version `major`, validated again as a description saying so would be."""
    if cluster.slurm.version == major:
        return cluster
    data = cluster.model_dump(mode="json", exclude_none=True)
    data["slurm"]["version"] = major
    return type(cluster).model_validate(data)


@dataclass
class Scratch:
    """A rendered tree plus the harness's own files, in a fresh directory under /tmp.

    /tmp rather than pytest's tmp_path: munged's socket path must fit in 108 bytes.
    """

    root: Path
    rendered: dict[str, str] = field(repr=False)
    slurm: SlurmInstall = HOST_SLURM

    @classmethod
    def create(cls, cluster, slurm: SlurmInstall = HOST_SLURM) -> "Scratch":
        """The tree of `cluster` rendered for `slurm`'s major (its slurm.version set to it)."""
        root = Path(tempfile.mkdtemp(prefix="halprov-"))
        root.chmod(0o755)  # munged wants o+x on every directory above its socket
        rendered = render_all(for_major(cluster, slurm.major))
        for rel, text in rendered.items():
            target = root / "rendered" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        for sub in ("state", "spool", "log"):
            (root / sub).mkdir()
        scratch = cls(root, rendered, slurm)
        scratch.munge_dir.mkdir()
        scratch.munge_dir.chmod(0o755)  # whatever the umask: munged checks the socket's dir
        return scratch

    @property
    def conf_dir(self) -> Path:
        return self.root / "rendered" / SLURM_DIR

    @property
    def slurm_conf(self) -> Path:
        return self.conf_dir / "slurm.conf"

    @property
    def hosts_file(self) -> Path:
        return self.root / "rendered" / HOSTS_FILE

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    def munged_argv(self) -> list[str]:
        """munged in the foreground on this scratch's key (made on first use) and socket."""
        m = self.munge_dir
        key = m / "munge.key"
        if not key.exists():
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(1024))
        return self.slurm.argv(
            "munged",
            "--foreground",
            f"--socket={self.munge_socket}",
            f"--key-file={key}",
            f"--pid-file={m / 'munged.pid'}",
            f"--log-file={self.root / 'log/munged.log'}",
            f"--seed-file={m / 'munged.seed'}",
        )

    def rendered_text(self, name: str) -> str:
        return self.rendered[f"{SLURM_DIR}/{name}"]

    def install_harness_configs(self) -> None:
        """Rewrite the harness keys of slurm.conf and slurmdbd.conf in place."""
        self.slurm_conf.write_text(
            apply_rewrites(
                self.rendered_text("slurm.conf"),
                slurm_conf_rewrites(self.root, self.munge_socket),
                "slurm.conf",
            ),
            encoding="utf-8",
        )
        dbd = self.conf_dir / "slurmdbd.conf"
        dbd.write_text(
            apply_rewrites(
                self.rendered_text("slurmdbd.conf"),
                slurmdbd_conf_rewrites(self.root, self.munge_socket),
                "slurmdbd.conf",
            ),
            encoding="utf-8",
        )
        dbd.chmod(0o600)  # slurmdbd: "fatal: slurmdbd.conf file ... should be 600"

    def install_backup_config(self, host: str) -> Path:
        """slurm.conf for the backup controller `host`: the harness's rewrites with its own pid
        and log files, beside the primary's (the other rendered files are read from there)."""
        path = self.conf_dir / f"slurm-{host}.conf"
        path.write_text(
            apply_rewrites(
                self.rendered_text("slurm.conf"), slurm_conf_rewrites(self.root, self.munge_socket, host), "slurm.conf"
            ),
            encoding="utf-8",
        )
        return path

    def log(self, name: str) -> str:
        path = self.root / "log" / name
        return path.read_text(errors="replace") if path.exists() else f"({path} does not exist)"

    def remove(self) -> None:
        if os.environ.get("HAL_PROVISION_KEEP_SCRATCH"):
            return
        shutil.rmtree(self.root, ignore_errors=True)


def host_addresses(hosts_text: str, host: str) -> list[str]:
    """Addresses /etc/hosts gives to a short host name (IPv4 lines only)."""
    found = []
    for line in hosts_text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and host in fields[1:] and ":" not in fields[0]:
            found.append(fields[0])
    return found


# ---- processes ----------------------------------------------------------------------------


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(STOP_TIMEOUT)


class Namespace:
    """A private UTS + mount + network namespace, held open by a `cat` on our pipe.

    Inside: hostname `host`, the rendered /etc/hosts, loopback up and carrying the host's
    rendered addresses. Commands enter it with nsenter. When the test process dies, the pipe
    closes and the holder exits.
    """

    def __init__(self, host: str, hosts_file: Path, addresses: list[str], mounts: list[str] = ()):
        """`mounts`: more shell lines for the namespace (SlurmInstall.mount_steps)."""
        if not addresses:
            raise HarnessError(f"the rendered /etc/hosts gives no address to {host}")
        steps = [
            f"mount --bind {shlex.quote(str(hosts_file))} /etc/hosts",
            *mounts,
            f"hostname {shlex.quote(host)}",
            "ip link set lo up",
            *(f"ip addr add {shlex.quote(a)}/32 dev lo" for a in addresses),
            "echo ready",
            "exec cat >/dev/null",
        ]
        self.host = host
        self.addresses = addresses
        self.holder = subprocess.Popen(
            [_prog("unshare"), "--uts", "--mount", "--net", "--", "sh", "-ec", "\n".join(steps)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent,
        )
        ready, _, _ = select.select([self.holder.stdout], [], [], COMMAND_TIMEOUT)
        line = self.holder.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            _stop(self.holder)
            err = self.holder.stderr.read().decode(errors="replace").strip()
            self.close()
            raise HarnessError(f"could not set up the namespace for {host}: {err}")

    def argv(self, *argv: str) -> list[str]:
        return [_prog("nsenter"), "-t", str(self.holder.pid), "-u", "-m", "-n", "--", *argv]

    def link(self, other: "Namespace") -> None:
        """A veth pair between this namespace and `other`, each routing the other's rendered
        addresses over it: two hosts that reach each other, and still nothing else."""
        mine, theirs = "hal-peer0", "hal-peer1"
        steps = [
            [
                _prog("ip"),
                "link",
                "add",
                mine,
                "netns",
                str(self.holder.pid),
                "type",
                "veth",
                "peer",
                "name",
                theirs,
                "netns",
                str(other.holder.pid),
            ],
            *([*ns.argv(_prog("ip"), "link", "set", dev, "up")] for ns, dev in ((self, mine), (other, theirs))),
            *(
                [*a.argv(_prog("ip"), "route", "add", f"{addr}/32", "dev", dev, "src", a.addresses[0])]
                for a, b, dev in ((self, other, mine), (other, self, theirs))
                for addr in b.addresses
            ),
        ]
        for argv in steps:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
            if done.returncode != 0:
                raise HarnessError(f"could not link {self.host} and {other.host}: {' '.join(argv)}: {done.stderr}")

    def run(self, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(*argv),
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            env={**os.environ, **(env or {})},
        )

    def spawn(self, *argv: str, output: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
        with open(output, "wb") as out:
            return subprocess.Popen(
                self.argv(*argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                preexec_fn=_die_with_parent,
            )

    def close(self) -> None:
        if self.holder.stdin and not self.holder.stdin.closed:
            self.holder.stdin.close()
        _stop(self.holder)
        for stream in (self.holder.stdout, self.holder.stderr):
            if stream:
                stream.close()


class ServiceHost:
    """One service host of the description: its namespace and a private munged."""

    def __init__(self, scratch: Scratch, host: str, peer: "ServiceHost | None" = None):
        """`peer`: a host of the same scratch this one reaches over a link, whose munged (its
        socket a path in the scratch, the same key) serves both."""
        self.scratch = scratch
        self.host = host
        self.stack = ExitStack()
        try:
            addresses = host_addresses(scratch.hosts_file.read_text(), host)
            self.ns = Namespace(host, scratch.hosts_file, addresses, scratch.slurm.mount_steps(scratch))
            self.stack.callback(self.ns.close)
            if peer is None:
                self._start_munged()
            else:
                self.ns.link(peer.ns)
        except BaseException:
            self.stack.close()
            raise

    def _start_munged(self) -> None:
        sock = self.scratch.munge_socket
        proc = self.ns.spawn(*self.scratch.munged_argv(), output=self.scratch.root / "log/munged.out")
        self.stack.callback(_stop, proc)
        if not retry(lambda: sock.exists() or proc.poll() is not None, START_TIMEOUT, POLL) or not sock.exists():
            raise HarnessError(
                "munged did not create its socket:\n"
                + self.scratch.log("munged.out")
                + "\n"
                + self.scratch.log("munged.log")
            )

    def spawn(self, name: str, *argv: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        """A foreground daemon in this host's namespace, stopped with the host."""
        proc = self.ns.spawn(*argv, output=self.scratch.root / f"log/{name}.out", env=env)
        self.stack.callback(_stop, proc)
        return proc

    def close(self) -> None:
        self.stack.close()


class Controller:
    """slurmctld on the rendered configuration, answering scontrol in its namespace."""

    def __init__(self, scratch: Scratch, host: str, backup_of: "Controller | None" = None):
        """slurmctld on `host`; `backup_of`: the running primary this one is the backup of, on
        its own slurm.conf (Scratch.install_backup_config), linked to the primary's host."""
        self.scratch = scratch
        self.host = host
        conf = scratch.slurm_conf if backup_of is None else scratch.install_backup_config(host)
        self.log_name = "slurmctld.log" if backup_of is None else f"slurmctld-{host}.log"
        self.env = {"SLURM_CONF": str(conf)}
        self.service = ServiceHost(scratch, host, None if backup_of is None else backup_of.service)
        try:
            self.proc = self.service.spawn(
                "slurmctld" if backup_of is None else f"slurmctld-{host}",
                *scratch.slurm.argv("slurmctld", "-D", "-f", str(conf)),
            )
            retry(lambda: self.proc.poll() is not None or self._up(), START_TIMEOUT, 0.1)
            if self.proc.poll() is not None or not self._up():
                status = self.proc.poll()
                what = (
                    f"exited with status {status}"
                    if status is not None
                    else f"did not answer `scontrol ping` within {START_TIMEOUT:.0f} s"
                )
                raise HarnessError(
                    f"slurmctld on {host} {what}.\n"
                    f"--- slurmctld log ---\n{self.log()}\n"
                    f"--- slurmctld output ---\n{scratch.log(self.log_name.replace('.log', '.out'))}"
                )
        except BaseException:
            self.service.close()
            raise

    def _up(self) -> bool:
        """`scontrol ping` says this host's slurmctld is UP (a backup's line too, not only the
        primary's)."""
        return f"at {self.host} is UP" in self.ping()

    def ping(self) -> str:
        return self.service.ns.run(*self.scratch.slurm.argv("scontrol", "ping"), env=self.env).stdout

    def scontrol(self, *args: str) -> str:
        result = self.service.ns.run(*self.scratch.slurm.argv("scontrol", *args), env=self.env)
        if result.returncode != 0:
            raise HarnessError(
                f"scontrol {' '.join(args)} failed ({result.returncode}): {result.stderr}\n"
                f"--- slurmctld log ---\n{self.log()}"
            )
        return result.stdout

    def log(self) -> str:
        return self.scratch.log(self.log_name)

    def close(self) -> None:
        self.service.close()


def run_slurmdbd_until_storage(scratch: Scratch, host: str, wait_for: tuple[str, ...]) -> str:
    """Start slurmdbd on `host` until its log shows one of `wait_for`; return the log."""
    service = ServiceHost(scratch, host)
    try:
        proc = service.spawn(
            "slurmdbd", *scratch.slurm.argv("slurmdbd", "-D"), env={"SLURM_CONF": str(scratch.slurm_conf)}
        )
        retry(
            lambda: proc.poll() is not None or any(s in scratch.log("slurmdbd.log") for s in wait_for),
            START_TIMEOUT,
            POLL,
        )
    finally:
        service.close()
    return scratch.log("slurmdbd.log") + "\n" + scratch.log("slurmdbd.out")


# ---- slurmd on an emulated node -----------------------------------------------------------


def synthetic_topology(profile) -> str:
    """hwloc's synthetic description of a hardware profile: packages, NUMA, cores, PUs."""
    return f"pack:{profile.sockets} [numa] core:{profile.cores_per_socket} pu:{profile.threads_per_core}"


def nvidia_minor(path: str) -> int:
    m = re.fullmatch(r"/dev/nvidia(\d+)", path)
    if not m:
        raise HarnessError(f"cannot emulate GPU device {path} (only /dev/nvidiaN)")
    return int(m.group(1))


def run_slurmd(
    scratch: Scratch, profile, device_files: list[str], *args: str, for_seconds: float | None = None
) -> subprocess.CompletedProcess:
    """`slurmd <args>` on an emulated node of `profile`.

    A private network namespace with only its loopback up: slurmd -D tries to register with the
    controller at its rendered address (24.11's resolves it through the rendered /etc/hosts),
    and no packet of it may leave this machine.
    hwloc reads a synthetic topology (HWLOC_XMLFILE, HWLOC_THISSYSTEM=1); /dev is a private
    tmpfs holding /dev/null and character devices 195:N for the GPUs, because slurmd waits
    forever ("Waiting for gres.conf file") for a device file that does not exist.
    `for_seconds`: a daemon run (-D) stopped after that long (SIGTERM); its status is then 124.
    """
    xml = scratch.root / f"topology-{profile.sockets}x{profile.cores_per_socket}x{profile.threads_per_core}.xml"
    if not xml.exists():
        subprocess.run(
            [_prog("lstopo"), "--input", synthetic_topology(profile), "--of", "xml", str(xml)],
            check=True,
            capture_output=True,
            timeout=COMMAND_TIMEOUT,
        )
    slurm = scratch.slurm
    dev = slurm.dev_dir()
    in_dev = lambda f: shlex.quote(dev + f.removeprefix("/dev"))  # noqa: E731
    slurmd = slurm.argv("slurmd", *args, "-f", str(scratch.slurm_conf))
    if for_seconds:  # the root's own timeout inside the chroot, the host's outside it
        slurmd = (
            [*slurmd[:2], "/usr/bin/timeout", f"{for_seconds:g}", *slurmd[2:]]
            if slurm.root
            else [_prog("timeout"), f"{for_seconds:g}", *slurmd]
        )
    sock = shlex.quote(str(scratch.munge_socket))
    steps = [
        "ip link set lo up",
        *slurm.mount_steps(scratch, dev="tmpfs"),
        *([] if slurm.root else ["mount -t tmpfs -o mode=755 none /dev"]),
        f"mknod -m 666 {in_dev('/dev/null')} c 1 3",
        f"mknod -m 444 {in_dev('/dev/urandom')} c 1 9",
        *(f"mknod -m 666 {in_dev(f)} c 195 {nvidia_minor(f)}" for f in device_files),
        # 24.11's slurmd makes a MUNGE credential even for -C/-G ("Munge encode failed ...
        # slurmd initialization failed" without munged); 22.05's does not. Both get one.
        f"{shlex.join([_prog('setpriv'), '--pdeathsig', 'KILL', *scratch.munged_argv()])} "
        f">>{shlex.quote(str(scratch.root / 'log/munged.out'))} 2>&1 &",
        "munged=$!",
        f"i=0; until [ -S {sock} ]; do i=$((i + 1)); "
        f"[ $i -le {int(START_TIMEOUT / POLL)} ] || {{ echo 'munged did not start' >&2; exit 1; }}; "
        f"sleep {POLL}; done",
        "set +e",
        shlex.join(slurmd),
        "status=$?",
        "kill $munged; wait $munged",
        "exit $status",
    ]
    env = {**os.environ, "HWLOC_XMLFILE": str(xml), "HWLOC_THISSYSTEM": "1"}
    try:
        return subprocess.run(
            [_prog("unshare"), "--mount", "--net", "--", "sh", "-ec", "\n".join(steps)],
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
            env=env,
            preexec_fn=_die_with_parent,
        )
    except subprocess.TimeoutExpired as exc:
        raise HarnessError(f"slurmd {' '.join(args)} did not finish: {exc.stderr!r}") from None


# ---- reading scontrol and slurmd output ---------------------------------------------------

_FIELD = re.compile(r"(\w+)=(\S*)")


def fields(line: str) -> dict[str, str]:
    """'A=1 B=x y' -> {'A': '1', 'B': 'x'}: Key=Value pairs of one scontrol -o record."""
    return dict(_FIELD.findall(line))


def records(text: str, first_key: str) -> dict[str, dict[str, str]]:
    """One-line records (scontrol -o, slurmd -G) keyed by the value of `first_key`."""
    out = {}
    for line in text.splitlines():
        f = fields(line)
        if first_key in f:
            out[f[first_key]] = f
    return out


def show_config(text: str) -> dict[str, str]:
    """`scontrol show config` -> {key: value} for every 'Key = Value' line."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            out[key.strip()] = value.strip()
    return out


def slurm_minutes(value: str) -> int | None:
    """A Slurm time ('60', '04:00:00', '1-00:00:00', 'UNLIMITED') in minutes; None = no limit."""
    if value.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    days, _, rest = value.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        h, m, s = (parts + [0, 0])[:3]
        return int(days) * 1440 + h * 60 + m + (1 if s else 0)
    if len(parts) == 3:
        return parts[0] * 60 + parts[1] + (1 if parts[2] else 0)
    if len(parts) == 2:
        return parts[0] + (1 if parts[1] else 0)
    return parts[0]
