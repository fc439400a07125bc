"""swrun, swbatch and swqueue: command-line entry points (standard library only)."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

from .translate import Request, SwError, job_shape, resolve, shown, sorted_names

TABLE_ENV = "SWSUITE_TABLE"
TABLE_DEFAULT = "/etc/swsuite/virtual-partitions.json"


def load_table(path: str | None = None) -> dict:
    p = Path(path or os.environ.get(TABLE_ENV) or TABLE_DEFAULT)
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise SwError(
            f"no virtual-partition table at {p} (set {TABLE_ENV} or deploy it with the swsuite role)"
        ) from None
    except (OSError, ValueError) as exc:
        raise SwError(f"cannot read the virtual-partition table {p}: {exc}") from None


def partitions_help(table: dict) -> str:
    rows = ["  name      GPUs  nodes  CPUs/node  mem/CPU  max time  partition"]
    vps = table.get("virtual_partitions", {})
    for name in sorted_names(vps):
        vp = vps[name]
        node = vp["node"]
        threads = node["sockets"] * node["cores_per_socket"] * node["threads_per_core"]
        per_node = len(node["gpu_sockets"]) or 1
        if vp["kind"] == "gpu":
            gpus, nodes = vp["gpus"], max(1, vp["gpus"] // per_node)
            cpus = min(vp["gpus"], per_node) * threads // per_node
        elif vp["kind"] == "shard":  # shards of one GPU, e.g. 1/4: a quarter, shared with other jobs
            gpus, nodes = f"{vp['shards']}/{node.get('shards_per_gpu', '?')}", 1
            try:
                cpus = job_shape(name, vp, node).tasks_per_node
            except SwError:
                cpus = "?"
        else:
            gpus, nodes, cpus = 0, vp["nodes"], threads
        rows.append(
            f"  {name:<9} {gpus:>4}  {nodes:>5}  {cpus:>9}  {vp['mem_per_cpu_mib']:>5} MiB  {vp['max_time_hours']:>5} h  {vp['partition']}"
        )
    return "\n".join(rows)


USAGE = {
    "swrun": "swrun -p VPART [-c CPUS_PER_GPU] [-t TIME] [--dry-run] [SLURM_OPTION ...] [COMMAND [ARG ...]]",
    "swbatch": "swbatch [-p VPART] [-c CPUS_PER_GPU] [-t TIME] [--dry-run] [SLURM_OPTION ...] SCRIPT [ARG ...]",
}

HELP_TAIL = """
Without COMMAND swrun opens an interactive shell on the job's first node; a COMMAND runs
once per node with all the job's CPUs (--ntasks-per-node=1 --ntasks=NODES --cpus-per-task=N).
Virtual partitions name what you want; the suite computes the Slurm request:
  gpuxN   N GPUs, each with its share of the node's CPUs and memory; up to one node's GPUs
          run on one node (GPUs fill socket 0 first), more span whole nodes (N a multiple
          of the GPUs per node).
  cpunN   N whole nodes, every hardware thread, no GPU.
Options:
  -p, --partition VPART      virtual partition (below)
  -c, --cpus-per-gpu N       hardware threads per GPU (whole cores; default: the GPU's share)
  -t, --time TIME            HOURS (24, 1.5), H:MM, H:MM:SS or D-HH:MM:SS
  --dry-run                  print the Slurm command instead of running it
Any other option is passed to Slurm unchanged, after the computed ones, so it wins
(use --opt=value for options that take a value).
{extra}
Example: swrun -p gpux4 -c 40 -t 24   is
  srun --partition=gpu --time=24:00:00 --nodes=1 --ntasks-per-node=160 --sockets-per-node=2
       --cores-per-socket=20 --threads-per-core=4 --mem-per-cpu=1200 --gres=gpu:v100:4
       --wait=0 --export=ALL --pty /bin/bash
"""


def _parse(prog: str, argv: list[str]) -> tuple[Request, list[str], bool, bool]:
    """(request, command words, dry_run, help). The request's virtual partition is None
    without -p; its other options (and the plain Slurm ones) are kept either way."""
    vp = cpg = time = None
    slurm: list[str] = []
    dry = help_ = False
    i = 0
    command: list[str] = []
    while i < len(argv):
        a = argv[i]

        def value() -> str:
            nonlocal i
            if "=" in a and a.startswith("--"):
                return a.split("=", 1)[1]
            if i + 1 >= len(argv):
                raise SwError(f"{a} needs a value")
            i += 1
            return argv[i]

        if a == "--":
            command = argv[i + 1 :]
            break
        if a in ("-h", "--help"):
            help_ = True
        elif a == "--dry-run":
            dry = True
        elif a in ("-p", "--partition") or a.startswith("--partition="):
            vp = value()
        elif a.startswith("-p") and len(a) > 2:
            vp = a[2:]
        elif a in ("-c", "--cpus-per-gpu") or a.startswith("--cpus-per-gpu="):
            raw = value()
            if not re.fullmatch(r"[0-9]{1,9}", raw.strip()):
                raise SwError(f"-c/--cpus-per-gpu takes a whole number; got {shown(raw)}")
            cpg = int(raw)
        elif a in ("-t", "--time") or a.startswith("--time="):
            time = value()
        elif a.startswith("-"):
            slurm.append(a)
        else:
            command = argv[i:]
            break
        i += 1
    return Request(vp, cpg, time, slurm), command, dry, help_


def _print_help(prog: str) -> None:
    try:
        table = load_table()
        parts = "Virtual partitions of cluster " + table.get("cluster", "?") + ":\n" + partitions_help(table)
    except SwError as exc:
        parts = f"(virtual partitions unavailable: {exc})"
    print(f"usage: {USAGE[prog]}\n" + HELP_TAIL.format(extra=parts))


def _exec(cmd: list[str], dry: bool) -> int:
    if dry:
        print(shlex.join(cmd))
        return 0
    try:
        os.execvp(cmd[0], cmd)
    except OSError as exc:
        print(f"{cmd[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover  (exec does not return)


def swrun(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        req, command, dry, help_ = _parse("swrun", argv)
        if help_:
            _print_help("swrun")
            return 0
        if not req.virtual_partition:
            raise SwError("name a virtual partition with -p (see swrun --help)")
        args = resolve(load_table(), req, one_task_per_node=bool(command))
    except SwError as exc:
        print(f"swrun: error: {exc}", file=sys.stderr)
        return 2
    tail = ["--wait=0", "--export=ALL"] + (["--pty", "/bin/bash"] if not command else command)
    return _exec(["srun", *args, *tail], dry)


def script_directives(script: Path) -> list[str]:
    """Arguments from '#SWBATCH' lines at the top of a script (like #SBATCH)."""
    out: list[str] = []
    try:
        lines = script.read_text(errors="replace").splitlines()
    except OSError as exc:
        raise SwError(f"cannot read {script}: {exc.strerror}") from None
    for n, line in enumerate(lines):
        s = line.strip()
        if n == 0 and s.startswith("#!"):
            continue
        if s.startswith("#SWBATCH"):
            try:
                out.extend(shlex.split(s[len("#SWBATCH") :]))
            except ValueError as exc:  # an unbalanced quote, a backslash at the end
                raise SwError(f"{script}, line {n + 1}: cannot split the #SWBATCH line: {exc}") from None
        elif s and not s.startswith("#"):
            break  # directives end at the first command, as with #SBATCH
    return out


def swbatch(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        req, command, dry, help_ = _parse("swbatch", argv)
        if help_:
            _print_help("swbatch")
            return 0
        if not command:
            raise SwError("name a job script (see swbatch --help)")
        script = Path(command[0])
        file_req, _cmd, _dry, _h = _parse("swbatch", script_directives(script))
        # The command line wins over #SWBATCH lines; plain Slurm options of both pass through,
        # the command line's last (so they win in sbatch too).
        merged = Request(
            req.virtual_partition or file_req.virtual_partition,
            req.cpus_per_gpu if req.cpus_per_gpu is not None else file_req.cpus_per_gpu,
            req.time if req.time is not None else file_req.time,
            file_req.slurm_args + req.slurm_args,
        )
        if not merged.virtual_partition:
            raise SwError(f"name a virtual partition with -p or a '#SWBATCH -p ...' line in {script}")
        args = resolve(load_table(), merged)
    except SwError as exc:
        print(f"swbatch: error: {exc}", file=sys.stderr)
        return 2
    return _exec(["sbatch", *args, "--export=ALL", *command], dry)


def swqueue(argv: list[str] | None = None) -> int:
    from .queue import main

    return main(sys.argv[1:] if argv is None else argv)
