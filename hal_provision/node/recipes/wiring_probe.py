"""The recipe's launch, proven without PyTorch: every rank joins one world with its own GPU.

Run by the job script in place of train_resnet50.py (`swbatch -p gpux8 resnet50.swbatch
--wiring-probe`), one process per srun task, each with the rendezvous settings the recipe
would hand to PyTorch (slurmenv.from_slurm). Rank 0 listens on TCP port master_port; every
other rank connects to (master_addr, master_port), retrying while rank 0 is not up yet, and
sends one JSON record of what it derived:

    rank, local_rank, node_rank, world_size, local_world_size, nnodes, hostname,
    master_addr, master_port, visible_devices, device, gpu_ids,
    device_path, device_ok, device_error

device_path is /dev/nvidiaN of the rank's GPU, N = gpu_ids[device] (the node-global GPU
number) or, without gpu_ids, visible_devices[device]. device_ok says the rank may open it:
opening it for reading succeeds, or fails with ENXIO/ENODEV (a device node with no driver
behind it, as in the sandbox's fake GPUs); EPERM/EACCES (the job's device cgroup blocks it)
or ENOENT are failures, explained in device_error.

Rank 0 adds its own record, checks all of them (`check`), prints

    WIRING OK world=8 nodes=2 per_node=4 master=hal01:21234
    WIRING {"ok": true, "problems": [], "records": [...records sorted by rank...]}

(or `WIRING FAILED: <problem>; <problem>` first) and only then tells every waiting rank the
verdict, so that all exit with the same status (0 or 1) and rank 0's lines are written before
srun --kill-on-bad-exit can stop it. Other ranks print nothing on success and one line on
stderr on failure.

Bounded: rank 0 waits at most --timeout seconds for the others; another rank tries to reach
rank 0 for at most --timeout seconds, then waits at most --timeout seconds for the verdict
(rank 0 started before it connected, so rank 0's own deadline falls within that).

With --data PATH --stage (as the recipe takes them) every rank first stages the data set as
train_resnet50.py would (hal_stage.stage: one copy per node, to the job's private /tmp by
default), reads every staged file whole, and adds a "data" entry to its record: the staged
path, files and bytes, the bytes it read, the copy's seconds, and the mount the copy lies on
(mount point, root within it, source device, from /proc/self/mountinfo). Rank 0 checks that
every rank read the whole copy, and its OK line gains `staged=FILES files BYTES bytes
SECONDS s` (the slowest node's copy).

In a job on CPUs (the job script's CPU branch sets HAL_RECIPE_DEVICE=cpu) there is no GPU to
check: the records have device_path null and device_ok true, and the rest is checked as above.

For tests and the sandbox: HAL_PROBE_HOSTNAME replaces socket.gethostname() (several "nodes"
on one machine), HAL_PROBE_DEV_DIR replaces /dev, and --bind replaces 0.0.0.0 as rank 0's
listening address (127.0.0.1 keeps a test on the loopback).

Standard library only:  python3 wiring_probe.py [--timeout 60] [--bind ADDR] [--data PATH --stage [--stage-dest DIR]]
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import socket
import sys
import time
from collections import Counter, defaultdict

try:
    from . import hal_stage, slurmenv
except ImportError:  # run as a script beside slurmenv.py and hal_stage.py (the recipes role's layout)
    import hal_stage
    import slurmenv

HOSTNAME_VAR = "HAL_PROBE_HOSTNAME"
DEV_DIR_VAR = "HAL_PROBE_DEV_DIR"
MAX_RECORD_BYTES = 1 << 20

# What a record must carry, and as what (rank 0 refuses anything else before `check`).
FIELDS: dict[str, type | tuple[type, ...]] = {
    "rank": int,
    "local_rank": int,
    "node_rank": int,
    "world_size": int,
    "local_world_size": int,
    "nnodes": int,
    "hostname": str,
    "master_addr": str,
    "master_port": int,
    "visible_devices": list,
    "device": int,
    "gpu_ids": list,
    "device_path": (str, type(None)),
    "device_ok": bool,
    "device_error": (str, type(None)),
}

# open() errors that still prove the device node is reachable by this process
_REACHABLE = {errno.ENXIO, errno.ENODEV}


class ProbeError(Exception):
    """This rank cannot take part: rank 0 is unreachable, silent, or answered nonsense."""


# ---- this rank's record ------------------------------------------------------------------------


def device_file(rv: slurmenv.Rendezvous, dev_dir: str = "/dev") -> str | None:
    """/dev/nvidiaN of this rank's GPU; None when neither list gives a GPU number."""
    if rv.gpu_ids:
        number = rv.gpu_ids[rv.device] if rv.device < len(rv.gpu_ids) else None
    else:
        number = rv.visible_devices[rv.device]
    if number is None or not number.isdigit():  # CUDA_VISIBLE_DEVICES may hold GPU UUIDs
        return None
    return os.path.join(dev_dir, f"nvidia{number}")


def open_device(path: str) -> tuple[bool, str | None]:
    """(usable, why not): open `path` for reading as a CUDA process would first do."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in _REACHABLE:
            return True, None
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno in (errno.EPERM, errno.EACCES):
            why += " (blocked by the job's device cgroup?)"
        return False, f"{path}: {why}"
    os.close(fd)
    return True, None


def record(rv: slurmenv.Rendezvous, dev_dir: str = "/dev", gpus: bool = True) -> dict:
    """This rank's report to rank 0; gpus=False (a job on CPUs): no device to check."""
    path = device_file(rv, dev_dir) if gpus else None
    if not gpus:
        ok, error = True, None
    elif path is None:
        ok, error = (
            False,
            (
                f"no device file for CUDA device {rv.device} (CUDA_VISIBLE_DEVICES="
                f"{','.join(rv.visible_devices)}, GPU ids={','.join(rv.gpu_ids) or 'none'})"
            ),
        )
    else:
        ok, error = open_device(path)
    return {
        "rank": rv.rank,
        "local_rank": rv.local_rank,
        "node_rank": rv.node_rank,
        "world_size": rv.world_size,
        "local_world_size": rv.local_world_size,
        "nnodes": rv.nnodes,
        "hostname": rv.hostname,
        "master_addr": rv.master_addr,
        "master_port": rv.master_port,
        "visible_devices": list(rv.visible_devices),
        "device": rv.device,
        "gpu_ids": list(rv.gpu_ids),
        "device_path": path,
        "device_ok": ok,
        "device_error": error,
    }


def _unescape(field: str) -> str:
    """mountinfo's octal escapes (\\040 for a space) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> dict:
    """The mount `path` lies on, as this process sees it: mount point, root within the mounted
    file system, and source (the device)."""
    real = os.path.realpath(path)
    best = {"mount_point": "/", "mount_root": "/", "mount_source": "?"}
    with open(mountinfo) as f:
        for line in f:
            fields, _, tail = line.partition(" - ")
            parts = fields.split()
            point = _unescape(parts[4])
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best["mount_point"]):
                best = {
                    "mount_point": point,
                    "mount_root": _unescape(parts[3]),
                    "mount_source": _unescape(tail.split()[1]),
                }
    return best


def read_data(staged: hal_stage.Staged) -> dict:
    """Read every staged file whole (as a data loader would); what was read and where it lies."""
    read = 0
    for dirpath, _dirs, names in os.walk(staged.path):
        for name in names:
            if dirpath == str(staged.path) and name in (hal_stage.MARKER, hal_stage.UNFINISHED):
                continue
            with open(os.path.join(dirpath, name), "rb") as f:
                while chunk := f.read(1 << 20):
                    read += len(chunk)
    return {
        "path": str(staged.path),
        "files": staged.files,
        "bytes": staged.bytes,
        "read_bytes": read,
        "stage_seconds": round(staged.seconds, 3),
        "copied": staged.copied,
        **mount_of(str(staged.path)),
    }


def malformed(obj) -> str | None:
    """Why `obj` is not a record (None when it is one)."""
    if not isinstance(obj, dict):
        return "not a JSON object"
    for key, kind in FIELDS.items():
        if key not in obj:
            return f"no {key!r}"
        if not isinstance(obj[key], kind) or (kind is int and isinstance(obj[key], bool)):
            return f"{key!r} is {obj[key]!r}"
    return None


# ---- the verdict ------------------------------------------------------------------------------


def _ranks(values) -> str:
    return ", ".join(str(v) for v in sorted(values))


def _who(rec: dict) -> str:
    return f"rank {rec['rank']} ({rec['hostname']})"


def check(records: list[dict]) -> list[str]:
    """Every problem with one world's records (well-formed ones, see `malformed`); [] = fine."""
    if not records:
        return ["no rank reported"]
    problems: list[str] = []
    for key in ("world_size", "nnodes", "master_addr", "master_port"):
        seen: dict = defaultdict(list)
        for rec in records:
            seen[rec[key]].append(rec["rank"])
        if len(seen) > 1:
            problems.append(
                f"ranks disagree on {key}: " + ", ".join(f"{value} (ranks {_ranks(r)})" for value, r in seen.items())
            )
    world = _rank0(records)["world_size"]
    nnodes = _rank0(records)["nnodes"]

    if len(records) != world:
        problems.append(f"{len(records)} records for a world of {world}")
    counts = Counter(rec["rank"] for rec in records)
    missing = set(range(world)) - set(counts)
    if missing:
        problems.append(f"missing ranks: {_ranks(missing)}")
    if set(counts) - set(range(world)):
        problems.append(f"ranks outside 0..{world - 1}: {_ranks(set(counts) - set(range(world)))}")
    for rank, n in sorted(counts.items()):
        if n > 1:
            problems.append(f"rank {rank} reported {n} times")

    hosts = _by_host(records)
    if len(hosts) != nnodes:
        problems.append(f"{len(hosts)} hosts ({', '.join(hosts)}) for nnodes={nnodes}")
    node_ranks: dict = defaultdict(list)
    for host, recs in hosts.items():
        problems += _host_problems(host, recs)
        for node_rank in {r["node_rank"] for r in recs}:
            node_ranks[node_rank].append(host)
    for node_rank, names in sorted(node_ranks.items()):
        if len(names) > 1:
            problems.append(f"hosts {', '.join(names)} all claim node_rank {node_rank}")

    for rec in sorted(records, key=lambda r: r["rank"]):
        if not rec["device_ok"]:
            problems.append(f"{_who(rec)}: {rec['device_error'] or rec['device_path']}")
    staged = [rec for rec in records if isinstance(rec.get("data"), dict)]
    if staged and len(staged) != len(records):
        problems.append(f"ranks {_ranks(r['rank'] for r in records if r not in staged)} staged no data")
    for rec in sorted(staged, key=lambda r: r["rank"]):
        data = rec["data"]
        if data.get("read_bytes") != data.get("bytes"):
            problems.append(f"{_who(rec)}: read {data.get('read_bytes')} of the {data.get('bytes')} staged bytes")
    return problems


def _rank0(records: list[dict]) -> dict:
    """Rank 0's record (its view of the world counts), else the first one."""
    return next((r for r in records if r["rank"] == 0), records[0])


def _by_host(records: list[dict]) -> dict[str, list[dict]]:
    hosts: dict[str, list[dict]] = defaultdict(list)
    for rec in sorted(records, key=lambda r: (r["node_rank"], r["hostname"], r["rank"])):
        hosts[rec["hostname"]].append(rec)
    return dict(hosts)


def _host_problems(host: str, recs: list[dict]) -> list[str]:
    """One node's ranks: one local world, local ranks 0..n-1, one node_rank, distinct GPUs."""
    problems = []
    sizes = sorted({r["local_world_size"] for r in recs})
    if len(sizes) > 1:
        problems.append(f"{host}: ranks disagree on local_world_size ({_ranks(sizes)})")
    local = sorted(r["local_rank"] for r in recs)
    if local != list(range(sizes[-1])):
        problems.append(f"{host}: local ranks {local}, expected 0..{sizes[-1] - 1}")
    node_ranks = sorted({r["node_rank"] for r in recs})
    if len(node_ranks) > 1:
        problems.append(f"{host}: ranks disagree on node_rank ({_ranks(node_ranks)})")
    users: dict = defaultdict(list)
    for r in recs:
        if r["device_path"]:
            users[r["device_path"]].append(r["rank"])
    for path, ranks in sorted(users.items()):
        if len(ranks) > 1:
            problems.append(f"{host}: ranks {_ranks(ranks)} share {path}")
    return problems


def summary(records: list[dict]) -> str:
    """world=8 nodes=2 per_node=4 master=hal01:21234 (per_node=4,2 when nodes differ)."""
    hosts = _by_host(records)
    per_node = [len(recs) for recs in hosts.values()]
    shown = str(per_node[0]) if len(set(per_node)) == 1 else ",".join(map(str, per_node))
    first = _rank0(records)
    line = (
        f"world={len(records)} nodes={len(hosts)} per_node={shown} master={first['master_addr']}:{first['master_port']}"
    )
    data = [r["data"] for r in records if isinstance(r.get("data"), dict)]
    if data:
        line += (
            f" staged={data[0]['files']} files {data[0]['bytes']} bytes {max(d['stage_seconds'] for d in data):.3f} s"
        )
    return line


def report_lines(records: list[dict], problems: list[str]) -> list[str]:
    """Rank 0's two lines: the verdict, then every record as JSON."""
    head = f"WIRING OK {summary(records)}" if not problems else f"WIRING FAILED: {'; '.join(problems)}"
    body = {"ok": not problems, "problems": problems, "records": sorted(records, key=lambda r: r["rank"])}
    return [head, "WIRING " + json.dumps(body, sort_keys=True)]


# ---- the exchange -----------------------------------------------------------------------------


def _send_line(sock: socket.socket, obj) -> None:
    sock.sendall(json.dumps(obj, sort_keys=True).encode() + b"\n")


def _read_line(sock: socket.socket) -> bytes:
    with sock.makefile("rb") as stream:
        return stream.readline(MAX_RECORD_BYTES)


def collect(own: dict, timeout: float, bind: str = "0.0.0.0") -> tuple[list[dict], list[str], list[socket.socket]]:
    """Rank 0: listen, and take one record from each other rank until all arrived or `timeout`
    seconds passed. (records with its own first, problems of the exchange, open connections)."""
    world, port = own["world_size"], own["master_port"]
    records, problems, conns = [own], [], []
    try:
        server = socket.create_server((bind, port), backlog=max(world, 1))
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        return (
            records,
            [f"rank 0 cannot listen on {bind}:{port}: {why} (set {slurmenv.PORT_VAR} to another port)"],
            conns,
        )
    deadline = time.monotonic() + timeout
    with server:
        while len(records) < world and (left := deadline - time.monotonic()) > 0:
            server.settimeout(left)
            try:
                conn, peer = server.accept()
            except TimeoutError:
                break
            conn.settimeout(max(min(left, 10.0), 0.1))
            try:
                obj = json.loads(_read_line(conn) or b"null")
            except (OSError, ValueError) as exc:
                obj, why = None, f"unreadable ({exc})"
            else:
                why = malformed(obj)
            if why:
                problems.append(f"{peer[0]} sent no valid record: {why}")
                conn.close()
                continue
            records.append(obj)
            conns.append(conn)
    if len(records) < world:
        problems.append(f"only {len(records)} of {world} ranks reported within {timeout:g} s")
    return records, problems, conns


def serve(own: dict, timeout: float, bind: str = "0.0.0.0") -> int:
    """Rank 0's whole part: collect, check, print, then tell the others. Exit status."""
    records, problems, conns = collect(own, timeout, bind)
    problems += [p for p in check(records) if p not in problems]
    for line in report_lines(records, problems):
        print(line, flush=True)
    verdict = {"ok": not problems, "problems": problems}
    for conn in conns:
        try:
            _send_line(conn, verdict)
        except OSError:
            pass  # that rank gave up already; it says so itself
        finally:
            conn.close()
    return 0 if not problems else 1


def join(own: dict, timeout: float, clock=time.monotonic, pause=time.sleep) -> dict:
    """Another rank's part: reach rank 0, send the record, return rank 0's verdict."""
    address = (own["master_addr"], own["master_port"])
    shown = f"{address[0]}:{address[1]}"
    deadline = clock() + timeout
    last = "no attempt"
    while True:
        left = deadline - clock()
        if left <= 0:
            raise ProbeError(f"no rank 0 listening at {shown} within {timeout:g} s (last: {last})")
        try:
            sock = socket.create_connection(address, timeout=min(left, 5.0))
            break
        except OSError as exc:
            last = exc.strerror or str(exc)
            pause(min(0.25, max(deadline - clock(), 0)))
    with sock:
        try:
            _send_line(sock, own)
            sock.settimeout(timeout)
            line = _read_line(sock)
        except TimeoutError:
            raise ProbeError(f"rank 0 at {shown} gave no verdict within {timeout:g} s") from None
        except OSError as exc:
            raise ProbeError(f"lost rank 0 at {shown}: {exc.strerror or exc}") from None
    try:
        verdict = json.loads(line)
    except ValueError:
        verdict = None
    if not isinstance(verdict, dict) or not isinstance(verdict.get("ok"), bool):
        raise ProbeError(f"rank 0 at {shown} closed the connection without a verdict")
    return verdict


def main(argv: list[str] | None = None, environ=None) -> int:
    parser = argparse.ArgumentParser(
        description="Check that every srun task of the job joins one world with its own GPU."
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the other ranks (default 60)")
    parser.add_argument("--bind", default="0.0.0.0", help="rank 0's listening address (default 0.0.0.0)")
    parser.add_argument("--data", default=None, help="a data set to stage and read (with --stage), as the recipe's")
    parser.add_argument(
        "--stage", action="store_true", help="copy --data to the node's local scratch first (hal-stage)"
    )
    parser.add_argument("--stage-dest", default=None, help="where --stage copies to (default: as hal-stage)")
    args = parser.parse_args(argv)
    if args.stage != bool(args.data) or (args.stage_dest and not args.stage):
        parser.error("--stage and --data go together (--stage-dest needs both)")
    environ = os.environ if environ is None else environ
    gpus = environ.get(slurmenv.DEVICE_VAR) != "cpu"
    try:
        rv = slurmenv.from_slurm(environ, hostname=environ.get(HOSTNAME_VAR) or None, gpus=gpus)
    except slurmenv.SlurmEnvError as exc:
        print(f"wiring_probe: {exc}", file=sys.stderr)
        return 1
    own = record(rv, environ.get(DEV_DIR_VAR) or "/dev", gpus)
    if args.stage:
        try:
            own["data"] = read_data(hal_stage.stage(args.data, args.stage_dest, environ))
        except (hal_stage.StageError, OSError) as exc:
            print(f"wiring_probe rank {rv.rank} ({rv.hostname}): {exc}", file=sys.stderr)
            return 1
    if rv.rank == 0:
        return serve(own, args.timeout, args.bind)
    try:
        verdict = join(own, args.timeout)
    except ProbeError as exc:
        print(f"wiring_probe rank {rv.rank} ({rv.hostname}): {exc}", file=sys.stderr)
        return 1
    if not verdict["ok"]:
        print(f"wiring_probe rank {rv.rank} ({rv.hostname}): rank 0 reports WIRING FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
