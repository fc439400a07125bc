#!/usr/bin/env python3
"""hal-healthcheck: compare this node with what the model expects, drain or resume it in Slurm.

slurmd runs it as HealthCheckProgram every HealthCheckInterval seconds (and when it starts).
It reads the node's expectation (rendered from the model: /etc/hal-provision/health.json),
runs each check it names, and then:

* a check failed: drain the node with the reason "<prefix>: <check>: <first problem>", unless
  somebody else drained it (its reason is not the prefix's): that drain and its
  reason are left as they are;
* every check passed: resume the node if, and only if, its drain reason is the prefix's (this
  program drained it; hal_provision/node/drains.py's rule, the module the role installs beside
  this program). A node an admin drained is never resumed here.

    hal-healthcheck [--expectation FILE] [--no-slurm] [--host NAME] [--root DIR]

--no-slurm reports without touching Slurm (exit status 1 when a check fails): what testinfra
and an admin's manual run use. --root reads /proc, /sys and /dev under DIR (tests).

Checks: cpus (sockets, cores per socket, threads per core from sysfs), memory (MemTotal at
least min_kib), gpus (each device file a character device of the NVIDIA major), gpu_model
(nvidia-smi: count, model name, memory per GPU), gpu_faults (nvidia-smi -q -x, nvidia-smi nvlink
--status and the kernel log: lost GPUs, uncorrectable ECC errors, row remapping, pages pending
retirement, PCIe link, hardware slowdown, inactive NVLink links, XIDs), dcgm (dcgmi health --check
where DCGM is installed: each GPU's Warning or Failure incident; watches set when none are), mounts (the mount point of each shared file
system and of the local scratch in /proc/self/mounts), services (systemctl is-active), infiniband (each cabled port ACTIVE at
its rate on its device, as the model names them). The last result is kept in
/run/hal-healthcheck/last.json. Standard library only.
"""

from __future__ import annotations

import argparse
import fcntl
import glob
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

try:
    from .. import drains
except ImportError:  # run as a script beside drains.py (the healthcheck role's layout)
    import drains

EXPECTATION = "/etc/hal-provision/health.json"
STATE_DIR = "/run/hal-healthcheck"
COMMAND_TIMEOUT = 20
GPU_MEMORY_TOLERANCE = 0.06  # nvidia-smi reports usable memory: a V100-16GB shows 16160 MiB
REASON_MAX = 120  # Slurm keeps long reasons; sinfo shows about this much


# ---- checks: each returns a list of problems (empty: passed) ---------------------------------


def check_cpus(want: dict, root: str) -> list[str]:
    per_core: dict[tuple[str, str], int] = {}
    cpus = 0
    for topo in glob.glob(os.path.join(root, "sys/devices/system/cpu/cpu[0-9]*/topology")):
        try:
            package = _read(os.path.join(topo, "physical_package_id"))
            core = _read(os.path.join(topo, "core_id"))
        except OSError:
            continue  # an offline CPU has no topology
        cpus += 1
        per_core[(package, core)] = per_core.get((package, core), 0) + 1
    if not cpus:
        return ["no CPU topology under /sys/devices/system/cpu"]
    # The largest socket and core count: one offline CPU shows as `cpus`, not as a smaller SMT.
    packages = {package for package, _core in per_core}
    have = {
        "sockets": len(packages),
        "cores_per_socket": max(sum(1 for p, _c in per_core if p == pkg) for pkg in packages),
        "threads_per_core": max(per_core.values()),
        "cpus": cpus,
    }
    return [
        f"{key} {have[key]}, expected {want[key]}"
        for key in ("sockets", "cores_per_socket", "threads_per_core", "cpus")
        if have[key] != want[key]
    ]


def check_memory(want: dict, root: str) -> list[str]:
    text = _read(os.path.join(root, "proc/meminfo"))
    m = re.search(r"^MemTotal:\s+(\d+)\s+kB", text, re.M)
    if not m:
        return ["no MemTotal in /proc/meminfo"]
    kib = int(m.group(1))
    if kib < want["min_kib"]:
        return [
            f"{kib / 1048576:.1f} GiB, expected {want['memory_gib']} GiB "
            f"(at least {want['min_kib'] / 1048576:.1f} GiB: {want['tolerance_pct']:g} % tolerance)"
        ]
    return []


def check_gpus(want: dict, root: str) -> list[str]:
    problems = []
    for path in want["files"]:
        try:
            st = os.stat(os.path.join(root, path.lstrip("/")))
        except FileNotFoundError:
            problems.append(f"{path} missing")
            continue
        if not stat.S_ISCHR(st.st_mode) or os.major(st.st_rdev) != want["major"]:
            problems.append(f"{path} is not an NVIDIA character device (major {want['major']})")
    return problems


def check_gpu_model(want: dict, root: str) -> list[str]:
    rc, text = _run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"])
    if rc != 0:
        return [f"nvidia-smi failed (exit {rc}): {text.strip()[:80]}"]
    rows = [[c.strip() for c in line.split(",")] for line in text.splitlines() if line.strip()]
    problems = []
    if len(rows) != want["count"]:
        problems.append(f"{len(rows)} GPUs, expected {want['count']}")
    for i, row in enumerate(rows):
        name, mib = row[0], row[1] if len(row) > 1 else "?"
        if name != want["model"] and not want["model"].endswith(name) and not name.endswith(want["model"]):
            problems.append(f"GPU {i} is {name}, expected {want['model']}")
        try:
            gib = float(mib) / 1024
        except ValueError:
            problems.append(f"GPU {i} memory {mib!r} unreadable")
            continue
        if abs(gib - want["memory_gib"]) > want["memory_gib"] * GPU_MEMORY_TOLERANCE + 0.5:
            problems.append(f"GPU {i} has {gib:.1f} GiB, expected {want['memory_gib']} GiB")
    return problems


# What the default XIDs of gpu_faults mean (the model's health.gpu_faults.xids says why these).
XID_MEANING = {
    48: "double-bit ECC error",
    63: "row remap or page retirement recorded",
    64: "row remap or page retirement failed",
    74: "NVLink error",
    79: "fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)(?:\.\d+)?\): (\d+)\b")
GPU_LOST = re.compile(r"^.*(?:GPU is lost|Unable to determine the device handle for GPU).*$", re.M | re.I)


def check_gpu_faults(want: dict, root: str) -> list[str]:
    """One line per fault: a lost or missing GPU, volatile uncorrectable ECC errors above the
    threshold, a pending or failed row remap, pages pending retirement, a PCIe link below the
    profile's, an active hardware slowdown, fewer NVLink links active than the profile has, and
    the listed XIDs in the kernel log since boot."""
    rc, text = _run(["nvidia-smi", "-q", "-x"])
    problems = [f"GPU lost: {line.strip()[:100]}" for line in GPU_LOST.findall(text)]
    start, end = text.find("<nvidia_smi_log"), text.rfind("</nvidia_smi_log>")
    if start < 0 or end < 0:  # on failure, _run adds stderr after the XML: cut the XML out
        return problems or [f"nvidia-smi -q -x failed (exit {rc}): {text.strip()[:80]}"]
    try:
        gpus = ET.fromstring(text[start : end + len("</nvidia_smi_log>")]).findall("gpu")
    except ET.ParseError as exc:
        return problems + [f"nvidia-smi -q -x unreadable: {exc}"]
    if len(gpus) < want["count"]:
        problems.append(f"{len(gpus)} GPUs answer nvidia-smi, expected {want['count']}")
    names = []
    for i, gpu in enumerate(gpus):
        name = f"GPU {i} ({gpu.get('id', '?')})"
        names.append(name)
        problems += [f"{name} {p}" for p in _gpu_xml_faults(gpu, want)]
    if want.get("nvlink_links"):
        problems += _nvlink_faults(want["nvlink_links"], names)
    if want.get("xids"):
        problems += _xid_faults(set(want["xids"]), gpus, names)
    return problems


def _gpu_xml_faults(gpu, want: dict) -> list[str]:
    """The faults one <gpu> of nvidia-smi -q -x shows. Values a GPU does not report (N/A: ECC
    off, page retirement on GPUs that remap rows instead) are not faults."""
    problems = []
    uncorrectable = sum(
        int(v.text)
        for v in gpu.findall("ecc_errors/volatile/*")  # sram_uncorrectable_parity, ...
        if "uncorrectable" in v.tag and (v.text or "").strip().isdigit()
    )
    uncorrectable += sum(
        int(v.text)
        for v in gpu.findall("ecc_errors/volatile/double_bit/total")  # older drivers
        if (v.text or "").strip().isdigit()
    )
    if uncorrectable > want["max_uncorrectable_ecc"]:
        problems.append(
            f"has {uncorrectable} volatile uncorrectable ECC errors (at most {want['max_uncorrectable_ecc']})"
        )
    if gpu.findtext("remapped_rows/remapped_row_pending", "").strip() == "Yes":
        problems.append("has a row remap pending (a GPU reset applies it)")
    if gpu.findtext("remapped_rows/remapped_row_failure", "").strip() == "Yes":
        problems.append("failed to remap a row")
    if gpu.findtext("retired_pages/pending_retirement", "").strip() == "Yes":
        problems.append("has pages pending retirement (a GPU reset retires them)")
    # Idle GPUs train their link down to a lower generation to save power: the generation is
    # compared at its max (what the link can reach), the width as it is now as well (a link
    # does not narrow to save power; a narrower one is a bad seat, riser or slot).
    link = "pci/pci_gpu_link_info/"
    gen = _number(gpu.findtext(link + "pcie_gen/max_link_gen"))
    widths = [_number(gpu.findtext(link + f"link_widths/{w}_link_width")) for w in ("max", "current")]
    if want.get("pcie_generation") and gen and gen < want["pcie_generation"]:
        problems.append(f"PCIe link reaches gen {gen}, expected gen {want['pcie_generation']}")
    if want.get("pcie_width") and any(w and w < want["pcie_width"] for w in widths):
        problems.append(
            f"PCIe link is x{widths[1] or '?'} (at most x{widths[0] or '?'}), expected x{want['pcie_width']}"
        )
    for reason in want.get("throttle_reasons", []):
        for group in ("clocks_event_reasons/clocks_event_reason_", "clocks_throttle_reasons/clocks_throttle_reason_"):
            if gpu.findtext(group + reason, "").strip() == "Active":  # the second: drivers before 535
                problems.append(f"clocks slowed down: {reason} active")
    return problems


def _number(text: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", text or "")  # "5", "16x"; None for N/A
    return int(m.group(1)) if m else None


def _nvlink_faults(links: list[int], names: list[str]) -> list[str]:
    """GPUs with fewer NVLink links active than the profile's matrix gives them (nvidia-smi
    nvlink --status: 'Link 0: 26.562 GB/s', 'Link 1: <inactive>')."""
    rc, text = _run(["nvidia-smi", "nvlink", "--status"])
    if rc != 0:
        return [f"nvidia-smi nvlink --status failed (exit {rc}): {text.strip()[:80]}"]
    active: dict[int, int] = {}
    inactive: dict[int, list[str]] = {}
    gpu = None
    for line in text.splitlines():
        if m := re.match(r"GPU (\d+):", line):
            gpu = int(m.group(1))
            active.setdefault(gpu, 0)
        elif (m := re.match(r"\s*Link (\d+): (.*)", line)) and gpu is not None:
            if "inactive" in m.group(2):
                inactive.setdefault(gpu, []).append(m.group(1))
            else:
                active[gpu] += 1
    problems = []
    for i, wanted in enumerate(links):
        have = active.get(i, 0)
        if wanted and have < wanted:
            down = f" (inactive: link {', '.join(inactive[i])})" if inactive.get(i) else ""
            name = names[i] if i < len(names) else f"GPU {i}"
            problems.append(f"{name} has {have} NVLink links active, expected {wanted}{down}")
    return problems


def _xid_faults(xids: set[int], gpus: list, names: list[str]) -> list[str]:
    """The listed XIDs in the kernel log since boot ('NVRM: Xid (PCI:0000:9a:00): 79, ...';
    journalctl -k -b, or dmesg where the node has no journalctl),
    one line per GPU and XID, naming the GPU by its PCI bus id. A GPU reset does not clear
    them; a reboot does."""
    source = "journalctl"
    rc, text = _run(["journalctl", "-k", "-b", "--no-pager", "-o", "cat"])
    if rc == 127:  # no journald on the node: the kernel's ring buffer (since boot unless it wrapped)
        source, (rc, text) = "dmesg", _run(["dmesg"])
    if rc != 0:
        return [f"kernel log unreadable ({source} exit {rc}): {text.strip()[:80]}"]
    by_bus = {}
    for gpu, name in zip(gpus, names):
        parts = re.split(r"[:.]", gpu.get("id", ""))  # 00000000:9A:00.0
        if len(parts) == 4:
            by_bus[tuple(int(p, 16) for p in parts[:3])] = name
    counts: dict[tuple, int] = {}
    for m in XID_LINE.finditer(text):
        bus, xid = tuple(int(p, 16) for p in m.group(1, 2, 3)), int(m.group(4))
        if xid in xids:
            counts[(bus, xid)] = counts.get((bus, xid), 0) + 1
    problems = []
    for (bus, xid), n in counts.items():
        name = by_bus.get(bus, "GPU at PCI {:04x}:{:02x}:{:02x}".format(*bus))
        meaning = f" ({XID_MEANING[xid]})" if xid in XID_MEANING else ""
        problems.append(f"{name} had Xid {xid}{meaning} {n} time{'s' if n > 1 else ''} since boot")
    return problems


DCGM_WATCHES_OFF = "watches not enabled"  # dcgmi's answer to --check before any watch is set


def check_dcgm(want: dict, root: str) -> list[str]:
    """One line per GPU and system DCGM's health watches find in Failure, and in Warning where
    the expectation says to drain on them (else printed as notes) (`dcgmi health --check
    --json`). No dcgmi on the node (a site without DCGM): nothing to say.
    Watches live in nv-hostengine's memory, so they are gone after it restarts: when --check
    answers that none is set, the check sets them (`dcgmi health --set <watches>`, all systems
    by default) and checks again, so no role has to run once at DCGM's start."""
    if shutil.which("dcgmi") is None:
        return []
    rc, text = _run(["dcgmi", "health", "--check", "--json"])
    if DCGM_WATCHES_OFF in text.lower():
        set_rc, set_text = _run(["dcgmi", "health", "--set", want.get("watches", "a")])
        if set_rc != 0:
            return [f"dcgmi health --set {want.get('watches', 'a')} failed (exit {set_rc}): {set_text.strip()[:80]}"]
        rc, text = _run(["dcgmi", "health", "--check", "--json"])
    start = text.find("{")
    try:
        doc = json.JSONDecoder().raw_decode(text, start)[0] if start >= 0 else None
    except ValueError:
        doc = None
    if rc != 0 or not isinstance(doc, dict):
        return [f"dcgmi health --check failed (exit {rc}): {text.strip()[:100]}"]
    incidents = dcgm_incidents(doc)
    if want.get("warnings", "drain") == "drain":
        return incidents
    for line in incidents:  # reported, not drained on: the node stays in service
        if ": Warning: " in line:
            print(f"note dcgm: {line}")
    return [line for line in incidents if ": Warning: " not in line]


def dcgm_incidents(doc: dict) -> list[str]:
    """The incidents of dcgmi's health JSON: body.<entity group>.children.<id> with
    children.Errors.children.<system> {value: Warning|Failure, overflow: the message in pieces
    of at most 54 characters, split at spaces}."""
    problems = []
    for group, entities in sorted(doc.get("body", {}).items()):
        if not isinstance(entities, dict) or "children" not in entities:
            continue  # "Overall Health": {"value": ...}
        for entity, node in sorted(entities["children"].items(), key=lambda kv: (len(kv[0]), kv[0])):
            systems = node.get("children", {}).get("Errors", {}).get("children", {})
            for system, incident in systems.items():
                health = incident.get("value", "?")
                if health == "Healthy":
                    continue
                message = " ".join(incident.get("overflow", [])) or "no message"
                problems.append(f"{group} {entity} {system}: {health}: {message}")
    return problems


def check_mounts(want: dict, root: str) -> list[str]:
    text = _read(os.path.join(root, "proc/self/mounts"))
    points = {_unescape(line.split()[1]) for line in text.splitlines() if len(line.split()) > 2}
    return [f"{point} not mounted" for point in want["mount_points"] if point not in points]


def check_services(want: dict, root: str) -> list[str]:
    problems = []
    for unit in want["units"]:
        rc, text = _run(["systemctl", "is-active", unit], errors=False)
        answer = text.strip().splitlines()[0] if text.strip() else "unknown"
        if answer != "active":
            problems.append(f"{unit} is {answer}")
    return problems


def check_infiniband(want: dict, root: str) -> list[str]:
    """Each cabled port: {device, port, rate_gbps} ACTIVE at its rate on that device (a port
    without a device, or a bare port number from an older expectation: on any device)."""
    problems = []
    for entry in want["ports"]:
        if not isinstance(entry, dict):
            entry = {"device": None, "port": entry, "rate_gbps": want["rate_gbps"]}
        device, port, gbps = entry.get("device"), entry["port"], entry.get("rate_gbps", want["rate_gbps"])
        pattern = f"sys/class/infiniband/{device or '*'}/ports/{port}"
        seen = []
        for port_dir in sorted(glob.glob(os.path.join(root, pattern))):
            try:
                state = _read(os.path.join(port_dir, "state"))  # "4: ACTIVE"
                rate = _read(os.path.join(port_dir, "rate"))  # "100 Gb/sec (4X EDR)"
            except OSError:
                continue
            have = float(rate.split()[0]) if rate.split() else 0.0
            seen.append(f"{state.split(':')[-1].strip()} at {rate.split(' (')[0]}")
            if "ACTIVE" in state and have >= gbps:
                break
        else:
            where = f"{device} port {port}" if device else f"no port {port}"
            if device and not seen:
                problems.append(f"{where} missing (no /sys/class/infiniband/{device}/ports/{port})")
            elif device:
                problems.append(f"{where} {seen[0]}, expected ACTIVE at {gbps:g} Gb/s")
            else:
                problems.append(
                    f"no port {port} ACTIVE at {gbps:g} Gb/s"
                    + (f" ({', '.join(seen)})" if seen else " (no InfiniBand adapter)")
                )
    return problems


CHECKS = {
    "cpus": check_cpus,
    "memory": check_memory,
    "gpus": check_gpus,
    "gpu_model": check_gpu_model,
    "gpu_faults": check_gpu_faults,
    "dcgm": check_dcgm,
    "mounts": check_mounts,
    "services": check_services,
    "infiniband": check_infiniband,
}


def run_checks(expectation: dict, root: str = "/") -> dict[str, list[str]]:
    """Check name -> problems, in the order the expectation lists the checks."""
    results = {}
    for name in CHECKS:  # the program's order, not the file's: cheap local checks first
        if name not in expectation["checks"]:
            continue
        want = expectation["checks"][name]
        try:
            results[name] = CHECKS[name](want, root)
        except (OSError, KeyError, ValueError, subprocess.SubprocessError) as exc:
            results[name] = [f"could not check: {exc}"]
    return results


def drain_reason(prefix: str, results: dict[str, list[str]]) -> str | None:
    """'<prefix>: <check>: <first problem>' for the first failed check, None when all passed."""
    for name, problems in results.items():
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            return f"{prefix}: {name}: {problems[0]}{more}"[:REASON_MAX]
    return None


# ---- Slurm ------------------------------------------------------------------------------------


def node_state(host: str) -> tuple[str, str]:
    """(state, reason) of the node as slurmctld sees it: ('idle', ''), ('drained', 'x: y')."""
    rc, text = _run([_slurm_command("sinfo"), "-h", "-N", "-n", host, "-o", "%T|%E"])
    if rc != 0 or not text.strip():
        raise RuntimeError(f"sinfo -n {host}: exit {rc}: {text.strip()[:120]}")
    parsed = drains.parse(text.splitlines()[0])
    if parsed is None:
        raise RuntimeError(f"sinfo -n {host}: not a state|reason line: {text.strip()[:120]}")
    return parsed


def decide(state: str, reason: str, wanted: str | None, prefix: str) -> tuple[str, str]:
    """What to do: ('drain', reason), ('resume', ''), or ('none', why)."""
    ours = drains.ours(reason, prefix)
    drained = drains.is_drained(state)
    if wanted is not None:
        if drained and not ours:
            return "none", f"drained by somebody else ({reason or 'no reason'}): left as it is"
        if drained and reason == wanted:
            return "none", "already drained for this"
        return "drain", wanted
    if drained and ours:
        return "resume", ""
    if drained:
        return "none", f"healthy, but drained by somebody else ({reason or 'no reason'}): not resumed"
    return "none", "healthy"


def apply(host: str, action: str, reason: str) -> None:
    cmd = [_slurm_command("scontrol"), "update", f"NodeName={host}"]
    cmd += ["State=DRAIN", f"Reason={reason}"] if action == "drain" else ["State=RESUME"]
    rc, text = _run(cmd)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} {action}: exit {rc}: {text.strip()[:160]}")


# ---- helpers ----------------------------------------------------------------------------------


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().strip()


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _run(cmd: list[str], errors: bool = True) -> tuple[int, str]:
    """(exit status, stdout; with `errors`, stderr too when the command failed)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except FileNotFoundError:
        return 127, f"{cmd[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"{cmd[0]}: no answer in {COMMAND_TIMEOUT} s"
    return p.returncode, p.stdout + (p.stderr if p.returncode and errors else "")


def _slurm_command(name: str) -> str:
    return shutil.which(name) or f"/usr/bin/{name}"  # slurmd's environment may have a short PATH


def _save(record: dict) -> None:
    try:
        os.makedirs(STATE_DIR, mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=STATE_DIR, prefix=".last.")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2, sort_keys=True)
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(STATE_DIR, "last.json"))
    except OSError:
        pass  # a read-only /run must not stop the check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hal-healthcheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--expectation", default=EXPECTATION, help=f"the node's expectation (default {EXPECTATION})")
    parser.add_argument("--no-slurm", action="store_true", help="report only; never drain or resume")
    parser.add_argument("--host", default=None, help="Slurm node name (default: this host's short name)")
    parser.add_argument("--root", default="/", help="read /proc, /sys and /dev under this directory")
    args = parser.parse_args(argv)
    try:
        with open(args.expectation, encoding="utf-8") as f:
            expectation = json.load(f)
    except (OSError, ValueError) as exc:
        print(f"hal-healthcheck: cannot read {args.expectation}: {exc}", file=sys.stderr)
        return 2
    host = args.host or socket.gethostname().split(".")[0]
    prefix = expectation["reason_prefix"]

    lock = None
    if not args.no_slurm:  # slurmd may start a run while the last one still waits on a command
        os.makedirs(STATE_DIR, mode=0o755, exist_ok=True)
        lock = open(os.path.join(STATE_DIR, "lock"), "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("hal-healthcheck: another run is in progress")
            return 0

    results = run_checks(expectation, args.root)
    for name, problems in results.items():
        print(f"{'ok  ' if not problems else 'FAIL'} {name}" + (": " + "; ".join(problems) if problems else ""))
    wanted = drain_reason(prefix, results)
    record = {"time": int(time.time()), "host": host, "results": results, "reason": wanted}
    status = 0 if wanted is None else 1
    if not args.no_slurm:
        try:
            state, reason = node_state(host)
            action, detail = decide(state, reason, wanted, prefix)
            if action in ("drain", "resume"):
                apply(host, action, detail)
            record["slurm"] = {"state": state, "reason": reason, "action": action, "detail": detail}
            print(f"slurm: {host} {state}: {action}" + (f" ({detail})" if detail else ""))
        except RuntimeError as exc:
            record["slurm"] = {"error": str(exc)}
            print(f"hal-healthcheck: {exc}", file=sys.stderr)
        _save(record)
    return status


if __name__ == "__main__":
    sys.exit(main())
