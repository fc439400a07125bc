"""swqueue: a readable snapshot of the queue and of GPU use per node, from Slurm's output."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

SQUEUE_FORMAT = "%i|%u|%P|%j|%T|%M|%l|%D|%b|%R"
JOB_COLUMNS = ["job", "user", "partition", "name", "state", "time", "limit", "nodes", "gres", "nodelist/reason"]


def _run(cmd: list[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=30)
    except FileNotFoundError:
        raise RuntimeError(f"{cmd[0]} not found: is this a Slurm login node?") from None
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {p.stderr.strip()}")
    return p.stdout


def jobs(squeue_out: str) -> list[list[str]]:
    return [line.split("|") for line in squeue_out.splitlines() if line.strip()]


def _gpus(tres: str) -> int:
    m = re.search(r"gres/gpu=(\d+)", tres or "")
    return int(m.group(1)) if m else 0


def nodes(scontrol_out: str) -> list[dict]:
    """Per node: name, state, GPUs configured and allocated, CPUs allocated/total."""
    out = []
    for line in scontrol_out.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "NodeName" not in fields:
            continue
        out.append(
            {
                "node": fields["NodeName"],
                "state": fields.get("State", "?").lower(),
                "gpus": _gpus(fields.get("CfgTRES", "")),
                "gpus_used": _gpus(fields.get("AllocTRES", "")),
                "cpus": int(fields.get("CPUTot", 0) or 0),
                "cpus_used": int(fields.get("CPUAlloc", 0) or 0),
            }
        )
    return out


def render_plain(job_rows: list[list[str]], node_rows: list[dict]) -> str:
    lines = ["Jobs"]
    lines.append(" | ".join(JOB_COLUMNS))
    lines.extend(" | ".join(r) for r in job_rows)
    lines.append("")
    lines.append("GPU use per node")
    for n in node_rows:
        bar = "#" * n["gpus_used"] + "." * (n["gpus"] - n["gpus_used"])
        lines.append(
            f"{n['node']} {n['state']} GPUs {n['gpus_used']}/{n['gpus']} [{bar}] CPUs {n['cpus_used']}/{n['cpus']}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="swqueue", description="Jobs in the queue and GPU use per node.")
    ap.add_argument("-u", "--user", help="only this user's jobs")
    ap.add_argument("--plain", action="store_true", help="plain text (no colours or boxes)")
    args = ap.parse_args(argv)
    cmd = ["squeue", "-h", "-o", SQUEUE_FORMAT]
    if args.user:
        cmd += ["-u", args.user]
    try:
        job_rows = jobs(_run(cmd))
        node_rows = nodes(_run(["scontrol", "-o", "show", "node"]))
    except RuntimeError as exc:
        print(f"swqueue: error: {exc}", file=sys.stderr)
        return 2
    try:
        if args.plain:
            raise ImportError
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(render_plain(job_rows, node_rows))
        return 0
    console = Console()
    jt = Table(title=f"Jobs ({len(job_rows)})")
    for c in JOB_COLUMNS:
        jt.add_column(c)
    for r in job_rows:
        jt.add_row(*r, style="green" if r[4] == "RUNNING" else None)
    nt = Table(title="GPU use per node")
    for c in ("node", "state", "GPUs used", "", "CPUs used"):
        nt.add_column(c)
    for n in node_rows:
        bar = "[green]" + "■" * n["gpus_used"] + "[/green]" + "□" * (n["gpus"] - n["gpus_used"])
        nt.add_row(n["node"], n["state"], f"{n['gpus_used']}/{n['gpus']}", bar, f"{n['cpus_used']}/{n['cpus']}")
    console.print(jt)
    console.print(nt)
    return 0
