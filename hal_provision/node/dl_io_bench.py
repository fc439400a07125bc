"""The deep-learning input pattern, in pure Python: many small files read whole, in random order.

What a PyTorch DataLoader does to a file system each epoch over an ImageFolder tree (the DLFS
pattern): every sample is one small file (ImageNet's training JPEGs average about 110 KB), the
epoch visits them in a fresh random order, and several reader processes (loader workers, one
set per GPU) each open, read whole and close their share. This benchmark makes such a tree and
times such a pass, on one or more directories in one call, so the shared file system and the
node's local scratch can be compared on the same node:

    python3 dl_io_bench.py run --dir shared=/home/me/bench --dir local=/local/bench --files 10000 --readers 8

1. prepare: N files with sizes drawn from a lognormal around MEAN_BYTES (seeded), in
   `CLASSES` class directories named like ImageNet's (n00000042/n00000042_000123.JPEG), in a
   temporary directory under each --dir (removed afterwards unless --keep). Incompressible
   contents.
2. cold (the default): before the timed pass each file's cached pages are dropped with
   os.posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), after fdatasync (dirty pages are not
   dropped). No privileges needed. Local file systems and NFS clients honour it as far as the
   kernel does; a file system with its own cache (Spectrum Scale's pagepool) may still serve
   from memory. --warm instead reads every file once, untimed, so the pass runs from the page cache.
3. the pass: one seeded shuffle of all files (an epoch's order), dealt round-robin to
   `readers` processes (as a DistributedSampler and the loader workers share an epoch), so
   each file is read exactly once per pass; each process reads its files whole, one after
   another. The readers start together (a barrier); the pass lasts from the first start to
   the last finish.

Figures: samples/s (files per second) and MB/s (10^6 bytes) for the pass and for each reader.
Standard library only; Linux (posix_fadvise). `run --json` prints one JSON document per node
(what playbooks/dl-io-bench.yml collects); `table FILE|DIR...` prints the comparison table of
such documents.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

MEAN_BYTES = 110_000  # ImageNet-1k training JPEGs: about 110 KB on average
SIGMA = 0.5  # spread of the lognormal (ln of the size)
MIN_BYTES, MAX_BYTES = 1_000, 4_000_000
CLASSES = 100
FILES = 10_000
READERS = 4
COLD = (
    "cold: each file's cached pages were dropped before the pass with posix_fadvise(POSIX_FADV_DONTNEED) "
    "(after fdatasync); local file systems and NFS clients honour it as far as the kernel does, a file "
    "system with its own cache (GPFS pagepool) may still serve from memory"
)
WARM = "warm: every file was read once, untimed, before the pass (page cache)"


class BenchError(RuntimeError):
    pass


# ---- the data set ------------------------------------------------------------------------------


def file_sizes(files: int, seed: int = 0, mean: int = MEAN_BYTES, sigma: float = SIGMA) -> list[int]:
    """`files` sizes from a lognormal whose mean is `mean` bytes (before clipping to MIN..MAX)."""
    rng = random.Random(seed)
    mu = math.log(mean) - sigma * sigma / 2
    return [min(max(int(rng.lognormvariate(mu, sigma)), MIN_BYTES), MAX_BYTES) for _ in range(files)]


def layout(files: int, classes: int = CLASSES) -> list[str]:
    """Relative paths: file i in class i mod `classes`, named as ImageNet's training files are."""
    classes = max(1, min(classes, files))
    return [f"n{i % classes:08d}/n{i % classes:08d}_{i // classes:06d}.JPEG" for i in range(files)]


def prepare(
    root: Path, files: int, classes: int = CLASSES, seed: int = 0, mean: int = MEAN_BYTES
) -> list[tuple[Path, int]]:
    """Write the tree under `root`; (path, size) per file, in layout order."""
    sizes = file_sizes(files, seed, mean)
    noise = os.urandom(MAX_BYTES + (1 << 20))  # each file a slice of it, at a seeded offset
    rng = random.Random(seed + 1)
    out = []
    for rel, size in zip(layout(files, classes), sizes):
        path = root / rel
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True)
        start = rng.randrange(len(noise) - size)
        with open(path, "wb") as f:
            f.write(noise[start : start + size])
        out.append((path, size))
    return out


def drop_cache(paths) -> None:
    """Drop each file's pages from the page cache (clean pages only: fdatasync first)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_whole(path) -> int:
    with open(path, "rb", buffering=0) as f:
        return len(f.readall())


# ---- the pass ----------------------------------------------------------------------------------


def shards(files: int, readers: int, seed: int = 0) -> list[list[int]]:
    """An epoch's order (seeded shuffle of 0..files-1), dealt round-robin to `readers`."""
    order = list(range(files))
    random.Random(seed).shuffle(order)
    return [order[r::readers] for r in range(readers)]


def _reader(index: int, paths: list[str], barrier, results) -> None:
    barrier.wait()
    start = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the node
    nbytes = sum(read_whole(p) for p in paths)
    results.put({"reader": index, "files": len(paths), "bytes": nbytes, "start": start, "end": time.monotonic()})


def read_pass(paths: list[Path], readers: int, seed: int = 0) -> dict:
    """Time one pass of `readers` processes over `paths`: totals and each reader's figures."""
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(readers), context.Queue()
    procs = [
        context.Process(target=_reader, args=(r, [str(paths[i]) for i in share], barrier, results))
        for r, share in enumerate(shards(len(paths), readers, seed))
    ]
    for p in procs:
        p.start()
    done = [results.get() for _ in procs]
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs):
        raise BenchError(f"a reader failed (exit codes {[p.exitcode for p in procs]})")
    first, last = min(d["start"] for d in done), max(d["end"] for d in done)
    each = [
        {"reader": d["reader"], "files": d["files"], "bytes": d["bytes"], "seconds": max(d["end"] - d["start"], 1e-9)}
        for d in sorted(done, key=lambda d: d["reader"])
    ]
    return {
        "files": sum(d["files"] for d in each),
        "bytes": sum(d["bytes"] for d in each),
        "seconds": max(last - first, 1e-9),
        "per_reader": each,
    }


def run_one(
    name: str,
    directory: Path,
    files: int,
    readers: int,
    classes: int,
    seed: int,
    warm: bool,
    keep: bool = False,
    mean: int = MEAN_BYTES,
) -> dict:
    """Prepare, make cold (or warm) and time one pass in a temporary directory under `directory`."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="hal-dl-io-", dir=directory))
    except OSError as exc:
        raise BenchError(f"{name}: cannot write in {directory}: {exc.strerror or exc}") from None
    try:
        start = time.monotonic()
        made = prepare(work, files, classes, seed, mean)
        prepared = time.monotonic() - start
        paths = [p for p, _ in made]
        if warm:
            for p in paths:
                read_whole(p)
        else:
            drop_cache(paths)
        timed = read_pass(paths, readers, seed)
        if timed["bytes"] != sum(size for _, size in made):
            raise BenchError(f"{name}: the readers read {timed['bytes']} bytes of {sum(s for _, s in made)}")
        return {"name": name, "path": str(directory), "prepare_seconds": round(prepared, 3), **timed}
    except OSError as exc:
        raise BenchError(f"{name}: {exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}") from None
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def run(
    dirs: list[tuple[str, Path]],
    files: int = FILES,
    readers: int = READERS,
    classes: int = CLASSES,
    seed: int = 0,
    warm: bool = False,
    keep: bool = False,
    mean: int = MEAN_BYTES,
) -> dict:
    """The benchmark on each named directory in turn, on this node: the JSON document."""
    if files < 1 or readers < 1 or classes < 1:
        raise BenchError("--files, --readers and --classes must be at least 1")
    names = [n for n, _ in dirs]
    if len(set(names)) != len(names):
        raise BenchError(f"each --dir needs its own name ({', '.join(names)})")
    return {
        "host": socket.gethostname(),
        "files": files,
        "readers": readers,
        "classes": classes,
        "seed": seed,
        "mean_bytes": mean,
        "warm": warm,
        "dirs": [run_one(name, path, files, readers, classes, seed, warm, keep, mean) for name, path in dirs],
    }


# ---- the table ---------------------------------------------------------------------------------


def rate(d: dict, unit: str) -> float:
    amount = d["files"] if unit == "samples" else d["bytes"] / 1e6
    return amount / d["seconds"]


def table(results: list[dict]) -> str:
    """One row per node and directory; the ratio is samples/s against the node's first directory."""
    head = (
        "node",
        "dir",
        "path",
        "files",
        "readers",
        "samples/s",
        "MB/s",
        "per reader samples/s",
        "per reader MB/s",
        "ratio",
    )
    rows = [head]
    for res in sorted(results, key=lambda r: r["host"]):
        base = rate(res["dirs"][0], "samples") if res["dirs"] else 0.0
        for d in res["dirs"]:
            each_s = [rate(r, "samples") for r in d["per_reader"]]
            each_mb = [rate(r, "mb") for r in d["per_reader"]]
            rows.append(
                (
                    res["host"],
                    d["name"],
                    d["path"],
                    str(d["files"]),
                    str(len(d["per_reader"])),
                    f"{rate(d, 'samples'):.0f}",
                    f"{rate(d, 'mb'):.1f}",
                    f"{min(each_s):.0f}-{max(each_s):.0f}",
                    f"{min(each_mb):.1f}-{max(each_mb):.1f}",
                    f"{rate(d, 'samples') / base:.2f}x" if base else "-",
                )
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = []
    for n, row in enumerate(rows):
        cells = (c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    shapes = sorted({(r["files"], r["readers"], r["classes"], r["mean_bytes"], r["seed"]) for r in results})
    for files, readers, classes, mean, seed in shapes:
        lines.append(
            f"{files} files (lognormal sizes, mean {mean / 1000:.0f} KB, {classes} class directories), "
            f"{readers} reader processes, one pass in random order (seed {seed}), each file read whole once"
        )
    for warm in sorted({bool(r["warm"]) for r in results}):
        lines.append(WARM if warm else COLD)
    lines.append("ratio: samples/s against the first --dir on the same node")
    return "\n".join(lines) + "\n"


def load_results(*paths: Path) -> list[dict]:
    """Results from JSON files, or from every *.json of a directory."""
    files = [f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    results = []
    for path in files:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise BenchError(f"{path}: not a DL I/O benchmark result ({exc})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("dirs"), list):
            raise BenchError(f"{path}: not a DL I/O benchmark result (no dirs)")
        results.append(doc)
    if not results:
        raise BenchError(f"no *.json results in {', '.join(map(str, paths))}")
    return results


def named_dir(text: str) -> tuple[str, Path]:
    """NAME=PATH (or PATH alone: named after its last component)."""
    name, sep, path = text.partition("=")
    if not sep:
        name, path = Path(text).name or text, text
    if not name or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=PATH")
    return name, Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dl_io_bench.py",
        description="The DL input pattern (many small files read whole in random order by several processes), "
        "timed on one or more directories of this node.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run on this node, print the table (or JSON)")
    p_run.add_argument(
        "--dir",
        dest="dirs",
        action="append",
        type=named_dir,
        required=True,
        metavar="NAME=PATH",
        help="a directory to test, named for the table (repeat: shared=/home/x/bench local=/local/x)",
    )
    p_run.add_argument("--files", type=int, default=FILES, help=f"files in the tree (default {FILES})")
    p_run.add_argument("--readers", type=int, default=READERS, help=f"reader processes (default {READERS})")
    p_run.add_argument("--classes", type=int, default=CLASSES, help=f"class directories (default {CLASSES})")
    p_run.add_argument("--mean-kb", type=float, default=MEAN_BYTES / 1000, help="mean file size, KB (default 110)")
    p_run.add_argument("--seed", type=int, default=0)
    p_run.add_argument(
        "--warm", action="store_true", help="do not drop the page cache: read every file once, untimed, before the pass"
    )
    p_run.add_argument("--keep", action="store_true", help="keep the files (a hal-dl-io-* directory under each --dir)")
    p_run.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    p_table = sub.add_parser("table", help="print the table of result files (or directories of them)")
    p_table.add_argument("results", type=Path, nargs="+")
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            doc = run(
                args.dirs,
                args.files,
                args.readers,
                args.classes,
                args.seed,
                args.warm,
                args.keep,
                int(args.mean_kb * 1000),
            )
            print(json.dumps(doc, sort_keys=True) if args.json else table([doc]), end="\n" if args.json else "")
        else:
            print(table(load_results(*args.results)), end="")
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
