"""A deep-learning-style storage benchmark with fio, and its per-node and aggregate table.

HAL chose its storage with IOR, mdtest and DIOT, a benchmark that mimics DL training input:
many small reads, in random order, over many files. This module runs three such patterns
with fio on one node and one directory, and times a listing of the tree:

    small-random-reads   random 32 KiB reads over many 128 KiB files, files in random order
    large-sequential     1 MiB sequential reads of one large file per rank (checkpoints, shards)
    metadata-stat        fio's filestat engine: stat() every small file, no data I/O
    listing              os.scandir over the whole tree (what `ls -R` and data loaders do)

Each fio job runs `jobs` processes (ranks); results keep every rank, so the table can show
the spread across ranks as well as the totals: HAL preferred Spectrum Scale to NFS for its
lower variance between ranks, not only for its bandwidth.

Standard library only: the storage-bench playbook copies this file to each node and runs
`python3 bench.py run --dir DIR --size small`, which prints one JSON document. The controller
collects them and prints `table(...)`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SMALL_FILE = "128k"
SMALL_READ = "32k"
LARGE_READ = "1m"
PATTERNS = ("small-random-reads", "large-sequential", "metadata-stat")
LISTING = "listing"


@dataclass(frozen=True)
class Size:
    files_per_rank: int
    large_per_rank: str
    ranks: int
    stat_loops: int  # passes of the stat job over the files (a single pass of a small set is too short to time)
    listing_repeats: int


SIZES = {
    "small": Size(files_per_rank=200, large_per_rank="32m", ranks=2, stat_loops=25, listing_repeats=3),  # CI
    "medium": Size(files_per_rank=2000, large_per_rank="1g", ranks=4, stat_loops=5, listing_repeats=5),
    "large": Size(files_per_rank=20000, large_per_rank="8g", ranks=8, stat_loops=1, listing_repeats=5),
}


class BenchError(RuntimeError):
    pass


def job_file(directory: str, size: Size) -> str:
    """The fio job file: three patterns one after another (stonewall), `ranks` processes each.

    invalidate=1 drops the page cache of each file before a job reads it (posix_fadvise, no
    privileges needed); a node whose cache is larger than the data set still caches what it
    reads during a job, so size the run above the nodes' page cache (or GPFS pagepool).
    """
    files = size.files_per_rank
    return (
        "; DL-style storage benchmark, written by hal_provision.node.storage_bench\n"
        "[global]\n"
        f"directory={directory}\n"
        "ioengine=psync\n"
        "invalidate=1\n"
        f"numjobs={size.ranks}\n"
        "\n[small-random-reads]\n"
        "rw=randread\n"
        f"bs={SMALL_READ}\n"
        f"filesize={SMALL_FILE}\n"
        f"nrfiles={files}\n"
        "file_service_type=random\n"
        "\n[large-sequential]\n"
        "stonewall\n"
        "rw=read\n"
        f"bs={LARGE_READ}\n"
        f"size={size.large_per_rank}\n"
        "\n[metadata-stat]\n"
        "stonewall\n"
        "ioengine=filestat\n"
        "filename_format=small-random-reads.$jobnum.$filenum\n"
        f"filesize={SMALL_FILE}\n"
        f"bs={SMALL_FILE}\n"
        f"nrfiles={files}\n"
        f"loops={size.stat_loops}\n"
    )


def parse_fio(doc: dict) -> dict[str, list[dict]]:
    """Pattern -> one {bw_bytes, iops, ios} per rank, from fio's JSON output."""
    out: dict[str, list[dict]] = {}
    for job in doc.get("jobs", []):
        if job.get("error"):
            raise BenchError(f"fio job {job.get('jobname')} failed with error {job['error']}")
        read = job["read"]
        out.setdefault(job["jobname"], []).append(
            {
                "bw_bytes": float(read.get("bw_bytes", read.get("bw", 0) * 1024)),
                "iops": float(read["iops"]),
                "ios": int(read.get("total_ios", 0)),
            }
        )
    return out


def time_listing(directory: Path, repeats: int, clock=time.perf_counter) -> dict:
    """Entries per second of a recursive scandir of `directory`, best of `repeats` runs."""

    def walk(path: Path) -> int:
        n = 0
        with os.scandir(path) as it:
            for entry in it:
                n += 1
                if entry.is_dir(follow_symlinks=False):
                    n += walk(Path(entry.path))
        return n

    rates, entries = [], 0
    for _ in range(repeats):
        start = clock()
        entries = walk(directory)
        rates.append(entries / max(clock() - start, 1e-9))
    return {"entries": entries, "entries_per_s": rates}


def run(directory: Path, size_name: str, fio: str = "fio", keep: bool = False) -> dict:
    """Run the benchmark in `directory` on this node; the JSON document the table reads."""
    if size_name not in SIZES:
        raise BenchError(f"unknown size {size_name!r}; one of {', '.join(SIZES)}")
    if shutil.which(fio) is None:
        raise BenchError(f"{fio} not found: install fio (Debian: apt-get install fio)")
    size = SIZES[size_name]
    directory.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="hal-bench-", dir=directory))
    try:
        jobs = work / "dl.fio"
        jobs.write_text(job_file(str(work), size))
        proc = subprocess.run([fio, "--output-format=json", str(jobs)], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BenchError(f"fio failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout[-2000:]}")
        doc = json.loads(proc.stdout[proc.stdout.index("{") :])
        return {
            "host": socket.gethostname(),
            "directory": str(directory),
            "size": size_name,
            "fio_version": doc.get("fio version", ""),
            "ranks": parse_fio(doc),
            LISTING: time_listing(work, size.listing_repeats),
        }
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


# ---- summary and table ----------------------------------------------------------------------
def _cv(values: list[float]) -> float:
    """Coefficient of variation in percent (0 for fewer than two values)."""
    if len(values) < 2 or not statistics.fmean(values):
        return 0.0
    return 100 * statistics.pstdev(values) / statistics.fmean(values)


def summarize(results: list[dict]) -> list[dict]:
    """Rows of the table: per pattern, one per node then one aggregate ('ALL')."""
    rows = []
    for pattern in PATTERNS:
        every_rank: list[dict] = []
        for res in sorted(results, key=lambda r: r["host"]):
            ranks = res["ranks"].get(pattern, [])
            every_rank += ranks
            rows.append(_row(pattern, res["host"], ranks))
        rows.append(_row(pattern, "ALL", every_rank))
    rates = {res["host"]: max(res[LISTING]["entries_per_s"]) for res in results}
    for host in sorted(rates):
        rows.append(
            {
                "pattern": LISTING,
                "node": host,
                "ranks": 1,
                "mib_s": None,
                "iops": rates[host],
                "rank_min": rates[host],
                "rank_max": rates[host],
                "cv": 0.0,
            }
        )
    if rates:
        values = list(rates.values())
        rows.append(
            {
                "pattern": LISTING,
                "node": "ALL",
                "ranks": len(values),
                "mib_s": None,
                "iops": sum(values),
                "rank_min": min(values),
                "rank_max": max(values),
                "cv": _cv(values),
            }
        )
    return rows


def _row(pattern: str, node: str, ranks: list[dict]) -> dict:
    bws = [r["bw_bytes"] / (1 << 20) for r in ranks]
    iops = [r["iops"] for r in ranks]
    spread = iops if pattern == "metadata-stat" else bws
    return {
        "pattern": pattern,
        "node": node,
        "ranks": len(ranks),
        "mib_s": sum(bws) if pattern != "metadata-stat" else None,
        "iops": sum(iops),
        "rank_min": min(spread, default=0.0),
        "rank_max": max(spread, default=0.0),
        "cv": _cv(spread),
    }


def table(results: list[dict]) -> str:
    """The per-node and aggregate table, plain text."""
    head = ("pattern", "node", "ranks", "MiB/s", "IOPS", "per rank min-max", "CV")
    lines = [head]
    for r in summarize(results):
        unit = "MiB/s" if r["mib_s"] is not None else ("entries/s" if r["pattern"] == LISTING else "stat/s")
        digits = 1 if r["mib_s"] is not None else 0
        lines.append(
            (
                r["pattern"],
                r["node"],
                str(r["ranks"]),
                "-" if r["mib_s"] is None else f"{r['mib_s']:.1f}",
                f"{r['iops']:.0f}",
                f"{r['rank_min']:.{digits}f}-{r['rank_max']:.{digits}f} {unit}",
                f"{r['cv']:.1f}%",
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = []
    for n, line in enumerate(lines):
        text.append(
            "  ".join(
                cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths))
            ).rstrip()
        )
        if n == 0:
            text.append("  ".join("-" * w for w in widths))
    sizes = sorted({r.get("size", "?") for r in results})
    text.append(f"{len(results)} node(s), size {', '.join(sizes)}; CV = spread across ranks (stdev / mean)")
    return "\n".join(text) + "\n"


def load_results(*paths: Path) -> list[dict]:
    """Results from JSON files, or from every *.json of a directory."""
    files = [f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    results = []
    for path in files:
        try:
            results.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            raise BenchError(f"{path}: not a benchmark result ({exc})") from None
    if not results:
        raise BenchError(f"no *.json results in {', '.join(map(str, paths))}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="DL-style storage benchmark with fio (one node).")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run on this node, print JSON")
    p_run.add_argument("--dir", required=True, type=Path, help="directory on the file system under test")
    p_run.add_argument("--size", default="small", choices=sorted(SIZES))
    p_run.add_argument("--fio", default="fio")
    p_run.add_argument("--keep", action="store_true", help="keep the benchmark's files")
    p_table = sub.add_parser("table", help="print the table of result files (or directories of them)")
    p_table.add_argument("results", type=Path, nargs="+")
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            print(json.dumps(run(args.dir, args.size, args.fio, args.keep), sort_keys=True))
        else:
            print(table(load_results(*args.results)), end="")
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
