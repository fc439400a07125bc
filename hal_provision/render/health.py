"""Node health: each Slurm node group's expectation, and LBNL NHC's nhc.conf from the same.

* ``files/etc/hal-provision/health/<group>.json``: what the nodes of one compute group must
  have, check by check (only the checks `health.checks` names): CPU topology, memory with its
  tolerance, GPU device files, GPU count/model/memory, the GPU fault thresholds (with the
  profile's NVLink links and PCIe link), DCGM's health watches to set, the shared file systems and the local
  scratch mounted there, the services every node runs, the cabled InfiniBand ports. The
  healthcheck role installs the node's group file as /etc/hal-provision/health.json;
  hal-healthcheck (hal_provision/node/health) reads it; the testinfra hardware tests read the
  same files.
* ``files/etc/hal-provision/health.json``: the program, its path, and the groups, for the role.
* ``files/etc/nhc/nhc.conf``: the same expectations as NHC checks, one line per check and
  group (NHC's `{hostlist}` match), for sites that choose `health.program: nhc`.

slurm.conf's HealthCheckProgram/Interval/NodeState lines come from render/slurm.py.
"""

from __future__ import annotations

import json

from ..hostlist import nodeset, overlaps
from ..model import Cluster, Gpus, NodeBuild, NodeGroup, Role
from ..model.health import GpuFaults
from .common import header, json_comment

HEALTH_DIR = "files/etc/hal-provision/health"
FACTS = "files/etc/hal-provision/health.json"
NHC_CONF = "files/etc/nhc/nhc.conf"
PROGRAM = {"hal": "/usr/local/sbin/hal-healthcheck", "nhc": "/usr/sbin/nhc"}
NODE_EXPECTATION = "/etc/hal-provision/health.json"  # where the role puts a node's group file
HOST_FILES = "hosts"  # under HEALTH_DIR: composed hosts' own expectations, <host>.json
GPU_MAJOR = 195  # the NVIDIA driver's character-device major number
DCGM_WATCHES = "a"  # `dcgmi health --set a`: every health system DCGM watches


def program_path(cluster: Cluster) -> str:
    return PROGRAM[cluster.health.program]


def slurm_conf_lines(cluster: Cluster) -> str:
    """The slurm.conf lines that make slurmd run the check (empty without a health section)."""
    h = cluster.health
    if h is None:
        return ""
    states = [s.upper() for s in h.node_state] + (["CYCLE"] if h.cycle else [])
    what = "hal-healthcheck" if h.program == "hal" else "LBNL NHC"
    return (
        f"\n# Node health ({what}): compares each node with the model every {h.interval_s} s, drains\n"
        "# a node that differs (the reason names the check), resumes only nodes it drained.\n"
        f"HealthCheckProgram={program_path(cluster)}\n"
        f"HealthCheckInterval={h.interval_s}\n"
        f"HealthCheckNodeState={','.join(states)}\n"
    )


def _ib_ports(port_hosts: dict, hosts) -> list[int]:
    """The adapter ports cabled on some of `hosts` (`port_hosts`: Fabric.hosts_by_port())."""
    return sorted(port for port, cabled in port_hosts.items() if overlaps(hosts, cabled))


def _port_states(profile, numbers: list[int], fabric_gbps: int) -> list[dict]:
    """Each cabled port as the check looks for it: its device and port, and the rate it must run
    at (the adapter's, or the fabric's where that is slower). A port the profile does not have
    (a check reports it) is looked for by number on any device, at the fabric's rate."""
    ports = profile.ib_ports() if profile is not None else []
    out = []
    for number in numbers:
        if number <= len(ports):
            port = ports[number - 1]
            out.append({"device": port.device, "port": port.port, "rate_gbps": min(port.rate_gbps, fabric_gbps)})
        else:
            out.append({"device": None, "port": number, "rate_gbps": fabric_gbps})
    return out


def expectation(
    cluster: Cluster, group: NodeGroup, port_hosts: dict | None = None, build: NodeBuild | None = None
) -> dict:
    """The checks of one compute group, each with what it compares against; with `build`, of
    those of its hosts (a composed host's own expectation: its profile as the active layout
    composes it).

    `port_hosts` is the fabric's Fabric.hosts_by_port(), when the caller already has it (one
    union of every link, not one per group)."""
    h = cluster.health
    if port_hosts is None:
        port_hosts = cluster.fabric.hosts_by_port() if cluster.fabric is not None else {}
    if build is None:
        build = cluster.node_builds(group)[0]
    p = build.profile
    hosts = nodeset(build.hosts)
    checks: dict[str, dict] = {}
    for name in h.checks:
        if name == "cpus":
            checks[name] = {
                "sockets": p.sockets,
                "cores_per_socket": p.cores_per_socket,
                "threads_per_core": p.threads_per_core,
                "cpus": p.cpus,
            }
        elif name == "memory":
            checks[name] = {
                "memory_gib": p.memory_gib,
                "tolerance_pct": h.memory_tolerance_pct,
                "min_kib": int(p.memory_gib * 1024 * 1024 * (1 - h.memory_tolerance_pct / 100)),
            }
        elif name == "gpus" and p.gpus:
            checks[name] = {
                "files": [d.file or f"/dev/nvidia{i}" for i, d in enumerate(p.gpus.devices)],
                "major": GPU_MAJOR,
            }
        elif name == "gpu_model" and p.gpus:
            checks[name] = {"count": p.gpu_count, "model": p.gpus.model, "memory_gib": p.gpus.memory_gib}
        elif name == "gpu_faults" and p.gpus:
            checks[name] = _gpu_faults(h.gpu_faults, p.gpus, p.gpu_count)
        elif name == "dcgm" and p.gpus:
            checks[name] = {"watches": DCGM_WATCHES, "warnings": h.dcgm_warnings}
        elif name == "mounts":
            # The shared file systems, and the profile's local scratch (job /tmp lives there).
            points = cluster.mount_points_on(hosts) + ([p.scratch.mount_point] if p.scratch is not None else [])
            if points:
                checks[name] = {"mount_points": points}
        elif name == "services":
            units = ["munge"] + (["sssd"] if cluster.accounts is not None and cluster.services.ldap else [])
            checks[name] = {"units": units}
        elif name == "infiniband":
            ports = _ib_ports(port_hosts, hosts)
            if ports:
                checks[name] = {
                    "ports": _port_states(p, ports, cluster.fabric.rate_gbps),
                    "rate_gbps": cluster.fabric.rate_gbps,
                }
    return {
        "_comment": json_comment(cluster),
        "group": group.name,
        "hosts": build.hosts,
        "hardware": group.hardware,
        "reason_prefix": h.reason_prefix,
        "checks": checks,
    }


def _gpu_faults(faults: GpuFaults, gpus: Gpus, count: int) -> dict:
    """The gpu_faults thresholds, and what the profile says of the GPUs' links: NVLink links
    per GPU (its row of the nvlink matrix; a GPU with more, e.g. to the CPU, passes) and the
    PCIe generation and width, where the profile names them."""
    want: dict = {
        "count": count,
        "max_uncorrectable_ecc": faults.max_uncorrectable_ecc,
        "xids": sorted(set(faults.xids)),
        "throttle_reasons": list(faults.throttle_reasons),
    }
    if gpus.nvlink:
        want["nvlink_links"] = [sum(n for j, n in enumerate(row) if j != i) for i, row in enumerate(gpus.nvlink)]
    if faults.check_pcie and gpus.pcie_generation is not None:
        want["pcie_generation"] = gpus.pcie_generation
    if faults.check_pcie and gpus.pcie_width is not None:
        want["pcie_width"] = gpus.pcie_width
    return want


def compute_groups(cluster: Cluster) -> list[NodeGroup]:
    """The groups slurmd runs on: the ones the check runs on."""
    return cluster.groups_with_role(Role.compute)


def _expectations(cluster: Cluster) -> dict[str, dict]:
    """File stem under HEALTH_DIR -> expectation, for every compute group: the group's name
    where its hosts are alike, else hosts/<host> for each of its hosts (composed hosts holding
    different pool GPUs under the active layout). The role installs a host's own file where
    there is one, else its group's."""
    port_hosts = cluster.fabric.hosts_by_port() if cluster.fabric is not None else {}
    out: dict[str, dict] = {}
    for g in compute_groups(cluster):
        builds = cluster.node_builds(g)
        if len(builds) == 1:
            out[g.name] = expectation(cluster, g, port_hosts, builds[0])
            continue
        for build in builds:
            for host in nodeset(build.hosts):
                out[f"{HOST_FILES}/{host}"] = expectation(cluster, g, port_hosts, build._replace(hosts=host))
    return out


def nhc_conf(cluster: Cluster, expectations: dict[str, dict] | None = None) -> str:
    """NHC checks for the same expectations (`expectations`: _expectations', when the caller
    has them). gpu_model, gpu_faults and dcgm have no stock NHC check: left out."""
    if expectations is None:
        expectations = _expectations(cluster)
    out = [
        header(cluster),
        "# LBNL NHC checks written from the model's expectations (files/etc/hal-provision/health/).\n",
        "# Match: NHC's {hostlist} ranges. NHC drains and resumes through its own Slurm support.\n",
        "* || export MARK_OFFLINE=1 NHC_RM=slurm\n",
    ]
    for stem, exp in expectations.items():
        checks = exp["checks"]
        match = "{" + exp["hosts"] + "}"
        who = exp["group"] if stem == exp["group"] else f"{exp['group']} ({exp['hosts']})"
        out.append(f"\n# {who}: {exp['hardware']}\n")
        if "cpus" in checks:
            c = checks["cpus"]
            out.append(
                f"{match} || check_hw_cpuinfo {c['sockets']} {c['sockets'] * c['cores_per_socket']} {c['cpus']}\n"
            )
        if "memory" in checks:
            m = checks["memory"]
            out.append(f"{match} || check_hw_physmem {m['memory_gib']}GB {m['memory_gib']}GB {m['tolerance_pct']:g}%\n")
        for f in checks.get("gpus", {}).get("files", []):
            out.append(f"{match} || check_file_test -c -r -w {f}\n")
        for point in checks.get("mounts", {}).get("mount_points", []):
            out.append(f"{match} || check_fs_mount_rw -f {point}\n")
        daemons = {"munge": ("munged", "munge"), "sssd": ("sssd", "root")}
        for unit in checks.get("services", {}).get("units", []):
            process, user = daemons[unit]
            out.append(f"{match} || check_ps_service -u {user} {process}\n")
        if "infiniband" in checks:
            # check_hw_ib RATE DEVICE passes when a port of DEVICE is active at RATE: one line
            # per cabled device (a port the profile lacks: any device at the fabric's rate).
            for port in checks["infiniband"]["ports"]:
                device = f" {port['device']}" if port["device"] else ""
                out.append(f"{match} || check_hw_ib {port['rate_gbps']}{device}\n")
    return "".join(out)


def render(cluster: Cluster) -> dict[str, str]:
    h = cluster.health
    if h is None:
        return {}
    groups = compute_groups(cluster)
    expectations = _expectations(cluster)
    files = {
        f"{HEALTH_DIR}/{name}.json": json.dumps(exp, indent=2, sort_keys=True) + "\n"
        for name, exp in expectations.items()
    }
    files[FACTS] = (
        json.dumps(
            {
                "_comment": json_comment(cluster),
                "program": h.program,
                "path": program_path(cluster),
                "interval_s": h.interval_s,
                "node_expectation": NODE_EXPECTATION,
                "groups": sorted(g.name for g in groups),
            },
            indent=2,
            sort_keys=True,
        )
        + "\n"
    )
    files[NHC_CONF] = nhc_conf(cluster, expectations)
    return files
