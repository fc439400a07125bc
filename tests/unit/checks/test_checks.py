"""Semantic checks: one row per mistake, as an edit of the embedded HAL description.

Rows edit the YAML text (so line numbers are real) and name the finding they expect:
level, dotted path and a piece of the message. Regenerate nothing: the table is the spec.
"""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest
from ClusterShell.NodeSet import NodeSet, NodeSetBase
from ruamel.yaml import YAML

from hal_provision.checks import REGISTRY, run_all
from hal_provision.checks.common import overlapping_intervals
from hal_provision.model.slurm import slurm_minutes
from hal_provision.findings import Level
from hal_provision.loader import load_text


def vp(
    name: str, size: str, mem: int = 1200, hours: int = 24, kind: str = "gpu", partition: str = "gpu", extra: str = ""
) -> str:
    """A virtual partition line of the embedded description (with the defaults it uses)."""
    key = "gpus" if kind == "gpu" else "nodes"
    return (
        f"{{name: {name}, kind: {kind}, partition: {partition}, {key}: {size}, mem_per_cpu_mib: {mem}, "
        f"max_time_hours: {hours}{extra}}}"
    )


def with_dgx(text: str) -> str:
    """Add two 8-GPU nodes to partition gpu: the partition then mixes hardware."""
    yaml = YAML()
    data = yaml.load(text)
    dgx = dict(data["hardware"]["ac922"])
    dgx["gpus"] = dict(dgx["gpus"], devices=[{"socket": i // 4} for i in range(8)], nvlink=[])
    data["hardware"]["dgx"] = dgx
    data["nodes"].append(
        {
            "name": "dgx",
            "role": "compute",
            "hosts": "dgx[1-2]",
            "hardware": "dgx",
            "addresses": {"mgmt": "172.22.3.1", "ib": "172.24.3.1"},
        }
    )
    data["fabric"]["links"].append({"hosts": "dgx[1-2]", "port": 1, "switch": "ib-sw1", "first_switch_port": 21})
    data["slurm"]["partitions"][0]["nodes"] = "hal[01-16],dgx[1-2]"
    data["storage"]["gpfs"]["node_classes"][1]["hosts"] += ",dgx[1-2]"  # the users' homes
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


NEW_LINK = "    - {{hosts: {}, port: 1, switch: ib-sw1, first_switch_port: 21}}\n"

CPU_PARTITION = (  # a compute group without GPUs, its partition and a gpu virtual partition on it
    (
        "\nservices:",
        "  - {name: cpu, role: compute, hosts: 'cpu[1-2]', hardware: x86-aux,"
        " addresses: {mgmt: 172.22.2.1}}\n\nservices:",
    ),
    ("  qos:\n", '    - {name: cpu, nodes: "cpu[1-2]"}\n  qos:\n'),
    (
        "\nstorage:",
        "    - {name: gpuxc, kind: gpu, partition: cpu, gpus: 1, mem_per_cpu_mib: 100, max_time_hours: 1}\n\nstorage:",
    ),
)

E, W, I = Level.error, Level.warning, Level.info  # noqa: E741 - the table's three columns

# A backup controller: hal-mgmt2 beside hal-mgmt1, and slurmctld's state on an NFS export of the
# data node that both mount (no_root_squash: the slurm role creates the directory as root).
TWO_CONTROLLERS = ("  slurmctld: hal-mgmt1\n", '  slurmctld: "hal-mgmt1,hal-mgmt2"\n')
MISC_MOUNT = '      - {export: misc, mount_point: /sw, clients: "hal[01-16],hal-login,hal-dev"}'
SHARED_STATE = (
    (
        "    mounts:\n",
        '      - {name: ctld, server: hal-data, path: /export/ctld, clients: "hal-mgmt[1-2]",\n'
        "         options: [rw, sync, no_subtree_check, no_root_squash]}\n    mounts:\n",
    ),
    (MISC_MOUNT, '      - {export: ctld, mount_point: /srv/ctld, clients: "hal-mgmt[1-2]"}\n' + MISC_MOUNT),
    ("  memory_reserve_mib: 8192 ", "  state_save_location: /srv/ctld/state\n  memory_reserve_mib: 8192 "),
)

BASIC = ("type: multifactor ", "type: basic       ")  # HAL keeps its fair-shares and QOS priorities
NO_PRIORITY_POLICY = (  # sacctmgr's default shares, QOS without a priority: nothing for multifactor to weigh
    lambda text: text.replace("fairshare: 10\n", "fairshare: 1\n"),
    ("priority: 10,", "priority: 0,"),
    ("priority: 100,", "priority: 0,"),
)

ROWS = [
    # --- node groups ---------------------------------------------------------------------------
    (
        "host-in-two-groups",
        [("    hosts: hal-dev\n", "    hosts: hal16\n")],
        E,
        "nodes[6].hosts",
        "hal16 already in node group 'dev' (nodes[5])",
    ),
    (
        "group-name-twice",
        [("  - name: dev\n", "  - name: dtn\n")],
        E,
        "nodes[5].name",
        "'dtn' is already used by nodes[4]",
    ),
    (
        "count-mismatch",
        [("    count: 16 ", "    count: 15 ")],
        E,
        "nodes[6].count",
        "count is 15 but hosts 'hal[01-16]' names 16",
    ),
    ("count-negative", [("    count: 16 ", "    count: -1 ")], E, "nodes[6].count", "greater than or equal to 1"),
    (
        "unknown-hardware",
        [("hardware: ac922                           #", "hardware: ac-922 #")],
        E,
        "nodes[5].hardware",
        "unknown hardware profile 'ac-922'; did you mean 'ac922'?",
    ),
    # --- local scratch ---------------------------------------------------------------------------
    (
        "scratch-device-not-a-local-disk",
        [
            (
                "    features: [ac922, power9, v100, nvlink]\n",
                "    features: [ac922, power9, v100, nvlink]\n"
                "    local_disks: [{device: /dev/nvme0n1, size_gib: 1600}]\n"
                "    scratch: {devices: [/dev/nvme1n1]}\n",
            )
        ],
        E,
        "hardware.ac922.scratch.devices[0]",
        "/dev/nvme1n1 is not one of the local_disks of 'ac922' (/dev/nvme0n1)",
    ),
    (
        "scratch-tmp-disk-beyond-its-devices",
        [
            (
                "    features: [ac922, power9, v100, nvlink]\n",
                "    features: [ac922, power9, v100, nvlink]\n"
                "    local_disks: [{device: /dev/nvme0n1, size_gib: 1600}]\n"
                "    scratch: {devices: [/dev/nvme0n1], tmp_disk_mib: 2000000}\n",
            )
        ],
        E,
        "hardware.ac922.scratch.tmp_disk_mib",
        "TmpDisk 2000000 MiB is more than the 1638400 MiB of its devices",
    ),
    (
        "scratch-single-with-two-devices",
        [
            (
                "    features: [ac922, power9, v100, nvlink]\n",
                "    features: [ac922, power9, v100, nvlink]\n"
                "    local_disks: [{device: /dev/nvme0n1, size_gib: 800}, {device: /dev/nvme1n1, size_gib: 800}]\n"
                "    scratch: {devices: [/dev/nvme0n1, /dev/nvme1n1]}\n",
            )
        ],
        E,
        "hardware.ac922.scratch",
        "layout single takes one device, not 2: use raid0 to stripe them",
    ),
    (
        "job-tmp-on-the-system-disk",
        [
            (
                "    hardware: ac922\n    addresses: {mgmt: 172.22.1.1,",
                "    hardware: ac922\n    job_tmp_base: /var/tmp/jobs\n    addresses: {mgmt: 172.22.1.1,",
            )
        ],
        W,
        "nodes[6].job_tmp_base",
        "lies on the system disk (profile 'ac922' has no scratch)",
    ),
    # --- networks and addresses ----------------------------------------------------------------
    (
        "address-twice",
        [("{mgmt: 172.22.0.30,", "{mgmt: 172.22.1.16,")],
        E,
        "nodes[5].addresses.mgmt",
        "172.22.1.16 of node group 'dev' are also given to node group 'compute'",
    ),
    (
        "address-range-leaves-cidr",
        [("{mgmt: 172.22.1.1,", "{mgmt: 172.22.255.250,")],
        E,
        "nodes[6].addresses.mgmt",
        "would get 172.22.255.250-172.23.0.9, outside the usable addresses of mgmt (172.22.0.0/16",
    ),
    (
        "address-range-hits-broadcast",
        [("{mgmt: 172.22.1.1,", "{mgmt: 172.22.255.240,")],
        E,
        "nodes[6].addresses.mgmt",
        "choose a first address between 172.22.0.1 and 172.22.255.239",
    ),
    (
        "address-is-network-address",
        [("{mgmt: 172.22.0.10,", "{mgmt: 172.22.0.0,")],
        E,
        "nodes[0].addresses.mgmt",
        "hal-login would get 172.22.0.0, outside",
    ),
    (
        "address-undeclared-network",
        [(", ib: 172.24.1.1}", ", ib: 172.24.1.1, opa: 10.0.0.1}")],
        E,
        "nodes[6].addresses.opa",
        "undeclared network 'opa'",
    ),
    (
        "no-primary-address",
        [("{mgmt: 172.22.0.3, bmc: 172.23.0.3}", "{bmc: 172.23.0.3}")],
        E,
        "nodes[2].addresses",
        "'mgmt-aux' has no address on the primary network 'mgmt'",
    ),
    (
        "primary-network-undeclared",
        [("primary_network: mgmt", "primary_network: mgnt")],
        E,
        "cluster.primary_network",
        "'mgnt' is not declared under networks; did you mean 'mgmt'?",
    ),
    (
        "networks-overlap",
        [("cidr: 172.23.0.0/16", "cidr: 172.22.128.0/17")],
        E,
        "networks.bmc.cidr",
        "172.22.128.0/17 overlaps network 'mgmt' (172.22.0.0/16)",
    ),
    # --- Slurm ---------------------------------------------------------------------------------
    (
        "compute-node-in-no-partition",
        [("      nodes: hal[01-16]\n", "      nodes: hal[01-15]\n")],
        E,
        "nodes[6].hosts",
        "no Slurm partition includes compute nodes hal16",
    ),
    (
        "partition-unknown-host",
        [("      nodes: hal[01-16]\n", "      nodes: hal[01-17]\n")],
        E,
        "slurm.partitions[0].nodes",
        "names hal17, not in any node group",
    ),
    (
        "partition-non-compute-host",
        [("      nodes: hal[01-16]\n", '      nodes: "hal[01-16],hal-dev"\n')],
        E,
        "slurm.partitions[0].nodes",
        "names hal-dev: development nodes, not compute nodes",
    ),
    (
        "partition-qos-undeclared",
        [("      qos: normal\n", "      qos: nromal\n")],
        E,
        "slurm.partitions[0].qos",
        "QOS 'nromal', which is not declared under slurm.qos; did you mean 'normal'?",
    ),
    (
        "partition-default-time-above-max",
        [('      default_time: "04:00:00"', '      default_time: "1-12:00:00"')],
        E,
        "slurm.partitions[0].default_time",
        "partition 'gpu': DefaultTime 1-12:00:00 is longer than MaxTime 1-00:00:00; slurmctld ignores such a DefaultTime",
    ),
    (
        "partition-default-time-unlimited",
        [('      default_time: "04:00:00"', "      default_time: UNLIMITED")],
        E,
        "slurm.partitions[0].default_time",
        "DefaultTime UNLIMITED is longer than MaxTime 1-00:00:00",
    ),
    (
        "qos-max-wall-above-partition",
        [
            (
                '{name: normal, priority: 10, max_wall: "1-00:00:00"}',
                '{name: normal, priority: 10, max_wall: "2-00:00:00"}',
            )
        ],
        W,
        "slurm.qos[0].max_wall",
        "QOS 'normal' allows MaxWall 2-00:00:00, but partition 'gpu', which uses it, has MaxTime 1-00:00:00",
    ),
    (
        "qos-max-wall-unlimited-above-partition",
        [('{name: normal, priority: 10, max_wall: "1-00:00:00"}', "{name: normal, priority: 10, max_wall: UNLIMITED}")],
        W,
        "slurm.qos[0].max_wall",
        "QOS 'normal' allows MaxWall UNLIMITED, but partition 'gpu'",
    ),
    (
        "virtual-default-above-partition",
        [(vp("gpux1", "1"), vp("gpux1", "1", hours=48, extra=", default_time_hours: 30"))],
        W,
        "swsuite.virtual_partitions[0].default_time_hours",
        "'gpux1' gives jobs without -t --time=30:00:00, beyond MaxTime 1-00:00:00 of partition 'gpu'; slurmctld "
        "leaves such jobs pending (Reason=PartitionTimeLimit): use a default of at most 24 h",
    ),
    (
        "partition-qos-none-declared",
        [lambda text: re.sub(r"  qos:\n(    - .*\n)+", "", text)],
        E,
        "slurm.partitions[0].qos",
        "QOS 'normal', which is not declared under slurm.qos; none is declared",
    ),
    (
        "two-default-partitions",
        [("  qos:\n", '    - {name: debug, nodes: "hal[01-02]", default: true}\n  qos:\n')],
        E,
        "slurm.partitions[1].default",
        "'debug' is a second default partition",
    ),
    (
        "no-default-partition",
        [("      default: true\n", "      default: false\n")],
        W,
        "slurm.partitions",
        "no partition has default: true",
    ),
    (
        "partition-name-twice",
        [("  qos:\n", '    - {name: gpu, nodes: "hal[01-02]"}\n  qos:\n')],
        E,
        "slurm.partitions[1].name",
        "'gpu' is already used by slurm.partitions[0]",
    ),
    (
        "qos-name-twice",
        [("{name: debug, priority: 100", "{name: normal, priority: 100")],
        E,
        "slurm.qos[1].name",
        "'normal' is already used by slurm.qos[0]",
    ),
    (
        "def-mem-per-cpu-too-big",
        [("def_mem_per_cpu_mib: 1200 ", "def_mem_per_cpu_mib: 2000 ")],
        W,
        "slurm.def_mem_per_cpu_mib",
        "2000 MiB x 160 CPUs of a 'ac922' node in partition 'gpu' = 320000 MiB, above its RealMemory 253952 MiB",
    ),
    (
        "partition-def-mem-per-cpu-too-big",
        [("      qos: normal\n", "      qos: normal\n      def_mem_per_cpu_mib: 1600\n")],
        W,
        "slurm.partitions[0].def_mem_per_cpu_mib",
        "use at most 1587 MiB",
    ),
    (
        "real-memory-not-positive",
        [("memory_reserve_mib: 8192 ", "memory_reserve_mib: 300000 ")],
        E,
        "slurm.memory_reserve_mib",
        "RealMemory of 'ac922' nodes would be 256 GiB - 300000 MiB = -37856 MiB",
    ),
    (
        "slurm-ports-clash",
        [("\nslurm:\n", "\nslurm:\n  slurmd_port: 6817\n")],
        E,
        "slurm.slurmd_port",
        "slurmd_port 6817 is also controller_port",
    ),
    # --- Slurm job priority ----------------------------------------------------------------------
    (
        "priority-basic-with-fair-share",
        [BASIC],
        E,
        "slurm.priority.type",
        "priority/basic ignores fair-share, but accounts 'astro', 'bioml' set a fair-share",
    ),
    (
        "priority-basic-with-qos-priorities",
        [BASIC],
        E,
        "slurm.priority.type",
        "priority/basic ignores QOS priorities, but QOS 'normal' (10), 'debug' (100) set a priority",
    ),
    (
        "priority-fair-share-weight-zero",
        [("weight_fairshare: 100000 ", "weight_fairshare: 0 ")],
        W,
        "slurm.priority.weight_fairshare",
        "accounts 'astro', 'bioml' set a fair-share (accounts.groups[].fairshare), but weight_fairshare is 0, "
        "which leaves fair-share out of every job's priority",
    ),
    (
        "priority-qos-weight-zero",
        [("weight_qos: 10000 ", "weight_qos: 0 ")],
        W,
        "slurm.priority.weight_qos",
        "QOS 'normal' (10), 'debug' (100) set a priority, but weight_qos is 0",
    ),
    (
        "priority-weights-beyond-32-bits",
        [("weight_fairshare: 100000 ", "weight_fairshare: 4294967295 ")],
        W,
        "slurm.priority",
        "the weights add up to 4294978295, above 4294967295",
    ),
    (
        "priority-tres-weights-beyond-32-bits",
        [("weight_job_size: 0 ", "weight_job_size: 0\n    weight_tres: {CPU: -5, GRES/gpu: 4294856296}\n#")],
        W,
        "slurm.priority",
        "the weights add up to 4294967296, above",
    ),
    (
        "fair-share-usage-never-forgotten",
        [("weight_job_size: 0 ", 'weight_job_size: 0\n    decay_half_life: "0"\n#')],
        W,
        "slurm.priority.decay_half_life",
        "recorded usage is never forgotten",
    ),
    (
        "priority-weight-above-32-bits",
        [("weight_age: 1000 ", "weight_age: 4294967296 ")],
        E,
        "slurm.priority.weight_age",
        "less than or equal to 4294967295",
    ),
    (
        "priority-max-age-unlimited",
        [("weight_job_size: 0 ", "weight_job_size: 0\n    max_age: UNLIMITED\n#")],
        E,
        "slurm.priority.max_age",
        "give a length of time",
    ),
    (
        "priority-tres-weight-untracked",
        [("weight_job_size: 0 ", "weight_job_size: 0\n    weight_tres: {GRES/fpga: 1}\n#")],
        E,
        "slurm.priority.weight_tres.GRES/fpga.[key]",
        "'Pages' or 'GRES/gpu' (got 'GRES/fpga')",
    ),
    (
        "priority-tier-too-high",
        [("      qos: normal\n", "      qos: normal\n      priority_tier: 65534\n")],
        E,
        "slurm.partitions[0].priority_tier",
        "less than or equal to 65533",
    ),
    # --- hardware ------------------------------------------------------------------------------
    (
        "gpu-on-missing-socket",
        [("        - {socket: 1}\n      nvlink:", "        - {socket: 2}\n      nvlink:")],
        E,
        "hardware.ac922.gpus.devices[3].socket",
        "GPU 3 is on socket 2, but 'ac922' has 2 socket(s), numbered 0-1",
    ),
    (
        "nvlink-too-few-rows",
        [("        - [0, 0, 3, 0]\n", "")],
        E,
        "hardware.ac922.gpus.nvlink",
        "nvlink has 3 rows for 4 GPUs",
    ),
    (
        "gpu-missing-from-devices",
        [("        - {socket: 1}\n        - {socket: 1}\n", "        - {socket: 1}\n")],
        E,
        "hardware.ac922.gpus.devices",
        "devices lists 3 GPUs (socket 0, socket 0, socket 1) but nvlink is a 4 x 4 "
        "matrix: 1 GPU is missing from devices, or nvlink has 1 row and column too many",
    ),
    (
        "nvlink-row-too-long",
        [("        - [0, 0, 0, 3]", "        - [0, 0, 0, 3, 0]")],
        E,
        "hardware.ac922.gpus.nvlink[2]",
        "row 2 has 5 entries",
    ),
    (
        "nvlink-asymmetric",
        [("        - [3, 0, 0, 0]", "        - [2, 0, 0, 0]")],
        E,
        "hardware.ac922.gpus.nvlink[1][0]",
        "nvlink[1][0] is 2 but nvlink[0][1] is 3",
    ),
    (
        "nvlink-negative",
        [("        - [0, 0, 0, 3]", "        - [0, 0, 0, -3]"), ("        - [0, 0, 3, 0]", "        - [0, 0, -3, 0]")],
        E,
        "hardware.ac922.gpus.nvlink[2][3]",
        "nvlink[2][3] is -3",
    ),
    (
        "hardware-unused",
        [("    hardware: x86-aux\n", "    hardware: lc921\n")],
        I,
        "hardware.x86-aux",
        "'x86-aux' is not used by any node group",
    ),
    # --- services ------------------------------------------------------------------------------
    (
        "service-unknown-host",
        [("  slurmctld: hal-mgmt1\n", "  slurmctld: hal-mgmt3\n")],
        E,
        "services.slurmctld",
        "slurmctld placed on hal-mgmt3, not in any node group",
    ),
    (
        "service-wrong-role",
        [("  slurmdbd: hal-mgmt1\n", "  slurmdbd: hal-login\n")],
        E,
        "services.slurmdbd",
        "slurmdbd placed on hal-login, a login node; it must run on management nodes",
    ),
    (
        "portal-on-compute",
        [("  portal: hal-mgmt2\n", "  portal: hal01\n")],
        E,
        "services.portal",
        "it must run on management or login nodes",
    ),
    (
        "accounting-db-on-storage",
        [("  accounting_db: hal-mgmt1\n", "  accounting_db: hal-data\n")],
        E,
        "services.accounting_db",
        "a storage node",
    ),
    (
        "slurmdbd-on-two-hosts",
        [("  slurmdbd: hal-mgmt1\n", '  slurmdbd: "hal-mgmt[1-2]"\n')],
        W,
        "services.slurmdbd",
        "only hal-mgmt1 is used",
    ),
    ("portal-without-host", [("  portal: hal-mgmt2\n", "")], W, "services", "portal is configured but services.portal"),
    # --- InfiniBand fabric ---------------------------------------------------------------------
    (
        "link-unknown-switch",
        [("switch: ib-sw1, first_switch_port: 17}", "switch: ib-sw2, first_switch_port: 17}")],
        E,
        "fabric.links[1].switch",
        "unknown switch 'ib-sw2'; did you mean 'ib-sw1'?",
    ),
    (
        "switch-port-beyond-count",
        [("first_switch_port: 20}", "first_switch_port: 37}")],
        E,
        "fabric.links[4].first_switch_port",
        "cabling 1 host from port 37 takes port 37, but switch 'ib-sw1' has 36 ports",
    ),
    (
        "switch-ports-beyond-count",
        [("first_switch_port: 1}", "first_switch_port: 30}")],
        E,
        "fabric.links[0].first_switch_port",
        "cabling 16 hosts from port 30 takes ports 30-45, but switch 'ib-sw1' has 36 ports; start at port 21 or lower",
    ),
    (
        "switch-port-twice",
        [("first_switch_port: 18}", "first_switch_port: 16}")],
        E,
        "fabric.links[2].first_switch_port",
        "port 16 of switch 'ib-sw1' already cabled by fabric.links[0]",
    ),
    (
        "node-port-twice",
        [("\nhardware:", f"{NEW_LINK.format('hal01')}\nhardware:")],
        E,
        "fabric.links[5].hosts",
        "port 1 of hal01 already cabled by fabric.links[0]",
    ),
    (
        "node-port-beyond-adapter",
        [("{hosts: hal-dev, port: 1,", "{hosts: hal-dev, port: 3,")],
        E,
        "fabric.links[4].port",
        "port 3 of hal-dev: hardware 'ac922' has only 2 InfiniBand ports",
    ),
    (
        "link-device-unknown",
        [("{hosts: hal-dev, port: 1,", "{hosts: hal-dev, device: mlx5_4,")],
        E,
        "fabric.links[4].device",
        "hardware 'ac922' has no InfiniBand port mlx5_4 (its ports: mlx5_0:1, mlx5_1:1)",
    ),
    (
        "link-device-and-another-port",
        [("{hosts: hal-dev, port: 1,", "{hosts: hal-dev, port: 1, device: mlx5_1,")],
        E,
        "fabric.links[4].device",
        "port 1 is not mlx5_1, which is port 2 of the hosts' profile: give one of them",
    ),
    (
        "node-without-adapter",
        [("\nhardware:", f"{NEW_LINK.format('hal-mgmt2')}\nhardware:")],
        E,
        "fabric.links[5].port",
        "hardware 'x86-aux' has no InfiniBand adapter",
    ),
    (
        "link-unknown-host",
        [("{hosts: hal-dtn, port: 1", "{hosts: hal-dtm, port: 1")],
        E,
        "fabric.links[3].hosts",
        "hal-dtm not in any node group",
    ),
    (
        "uplink-unknown-switch",
        [("      ports: 36\n", "      ports: 36\n      uplinks: [ib-core]\n")],
        E,
        "fabric.switches[0].uplinks[0]",
        "uplink to unknown switch 'ib-core'",
    ),
    (
        "nodes-on-a-switch-with-children",
        [
            (
                "      model: Mellanox SB7800\n",
                "      model: Mellanox SB7800\n    - {name: ib-leaf2, tier: leaf, ports: 36, uplinks: [ib-sw1]}\n",
            )
        ],
        E,
        "fabric.switches[0].name",
        "switch 'ib-sw1' has compute nodes hal[01-16] (16 hosts) and child switches ib-leaf2",
    ),
    (
        "uplink-to-itself",
        [("      ports: 36\n", "      ports: 36\n      uplinks: [ib-sw1]\n")],
        E,
        "fabric.switches[0].uplinks[0]",
        "'ib-sw1' cannot uplink to itself",
    ),
    (
        "uplink-loop",
        [
            (
                "      model: Mellanox SB7800\n",
                "      model: Mellanox SB7800\n      uplinks: [ib-sw2]\n"
                "    - {name: ib-sw2, tier: spine, ports: 36, uplinks: [ib-sw1]}\n",
            )
        ],
        E,
        "fabric.switches[0].uplinks",
        "uplinks form a loop: ib-sw1 -> ib-sw2 -> ib-sw1",
    ),
    (
        "switch-name-twice",
        [
            (
                "      model: Mellanox SB7800\n",
                "      model: Mellanox SB7800\n    - {name: ib-sw1, tier: spine, ports: 36}\n",
            )
        ],
        E,
        "fabric.switches[1].name",
        "'ib-sw1' is already used by fabric.switches[0]",
    ),
    (
        "compute-off-fabric",
        [('{hosts: "hal[01-16]", port: 1', '{hosts: "hal[01-15]", port: 1')],
        W,
        "nodes[6].hosts",
        "fabric 'hal-edr' has no cable to compute nodes hal16",
    ),
    # --- Slurm Wrapper Suite -------------------------------------------------------------------
    (
        "virtual-unknown-partition",
        [(vp("gpux1", "1"), vp("gpux1", "1", partition="gpus"))],
        E,
        "swsuite.virtual_partitions[0].partition",
        "unknown partition 'gpus'; did you mean 'gpu'?",
    ),
    (
        "virtual-too-many-gpus",
        [(vp("gpux16", "16"), vp("gpux16", "80"))],
        E,
        "swsuite.virtual_partitions[6].gpus",
        "asks for 80 GPUs; partition 'gpu' offers at most 64 on identical nodes (16 ac922 nodes x 4 GPUs)",
    ),
    (
        "virtual-gpus-not-multiple",
        [(vp("gpux12", "12"), vp("gpux12", "6"))],
        E,
        "swsuite.virtual_partitions[5].gpus",
        "ask for a multiple of 4 (e.g. 4 or 8)",
    ),
    # With two 8-GPU nodes in partition gpu, jobs are shaped for them (see render/swsuite.py).
    (
        "virtual-gpus-mixed-hardware-not-multiple",
        [(vp("gpux12", "12"), vp("gpux12", "12")), with_dgx],
        E,
        "swsuite.virtual_partitions[5].gpus",
        "more than one 'dgx' node has (8); spanning nodes takes whole nodes, so ask for a multiple of 8 (e.g. 8 or 16)",
    ),
    (
        "virtual-gpus-mixed-hardware-too-many",
        [(vp("gpux16", "16"), vp("gpux16", "32")), with_dgx],
        E,
        "swsuite.virtual_partitions[6].gpus",
        "offers at most 16 on identical nodes (2 dgx nodes x 8 GPUs)",
    ),
    (
        "virtual-nodes-mixed-hardware",
        [with_dgx],
        E,
        "swsuite.virtual_partitions[9].nodes",
        "'cpun4' asks for 4 whole nodes; partition 'gpu' has 2 dgx nodes",
    ),
    (
        "virtual-partition-without-compute-nodes",
        [
            ("  qos:\n", "    - {name: dev, nodes: hal-dev}\n  qos:\n"),
            (vp("gpux1", "1"), vp("gpux1", "1", partition="dev")),
        ],
        E,
        "swsuite.virtual_partitions[0].partition",
        "partition 'dev' of 'gpux1' has no compute nodes",
    ),
    (
        "virtual-gpus-no-gpu-nodes",
        CPU_PARTITION,
        E,
        "swsuite.virtual_partitions[10].partition",
        "'gpuxc' asks for GPUs, but partition 'cpu' has no GPU nodes",
    ),
    (
        "virtual-shards-none-offered",
        [
            (
                vp("gpux1", "1"),
                "{name: gpux1, kind: shard, partition: gpu, shards: 1, mem_per_cpu_mib: 1200, max_time_hours: 24}",
            )
        ],
        E,
        "swsuite.virtual_partitions[0].partition",
        "'gpux1' asks for GPU shards, but the 'ac922' nodes of partition 'gpu' offer none: set "
        "gpu_sharing.shards_per_gpu on their node group",
    ),
    (
        "virtual-too-many-shards",
        [
            (
                "    hardware: ac922\n    addresses: {mgmt: 172.22.1.1,",
                "    hardware: ac922\n    gpu_sharing: {shards_per_gpu: 2}\n    addresses: {mgmt: 172.22.1.1,",
            ),
            (
                vp("gpux1", "1"),
                "{name: gpux1, kind: shard, partition: gpu, shards: 9, mem_per_cpu_mib: 1200, max_time_hours: 24}",
            ),
        ],
        E,
        "swsuite.virtual_partitions[0].shards",
        "'gpux1' asks for 9 shards; a 'ac922' node offers 8 (4 GPUs x 2)",
    ),
    (
        "virtual-too-many-nodes",
        [(vp("cpun4", "4", kind="cpu"), vp("cpun4", "17", kind="cpu"))],
        E,
        "swsuite.virtual_partitions[9].nodes",
        "partition 'gpu' has 16 ac922 nodes (jobs are shaped for its largest node build): ask for 16 or fewer",
    ),
    (
        "virtual-gpu-memory",
        [(vp("gpux4", "4"), vp("gpux4", "4", mem=2000))],
        E,
        "swsuite.virtual_partitions[3].mem_per_cpu_mib",
        "its 160 CPUs on a 'ac922' node need 320000 MiB",
    ),
    (
        "virtual-gpu-share-memory",
        [(vp("gpux1", "1"), vp("gpux1", "1", mem=7000))],
        E,
        "swsuite.virtual_partitions[0].mem_per_cpu_mib",
        "its 40 CPUs on a 'ac922' node need 280000 MiB, above RealMemory 253952 MiB; use at most 6348 MiB",
    ),
    (
        "virtual-cpu-memory",
        [(vp("cpun1", "1", kind="cpu"), vp("cpun1", "1", mem=1600, kind="cpu"))],
        E,
        "swsuite.virtual_partitions[7].mem_per_cpu_mib",
        "use at most 1587 MiB",
    ),
    (
        "virtual-name-twice",
        [(vp("gpux2", "2"), vp("gpux1", "2"))],
        E,
        "swsuite.virtual_partitions[1].name",
        "'gpux1' is already used by swsuite.virtual_partitions[0]",
    ),
    (
        "virtual-name-is-real-partition",
        [(vp("gpux2", "2"), vp("gpu", "2"))],
        W,
        "swsuite.virtual_partitions[1].name",
        "has the name of a real Slurm partition",
    ),
    (
        "virtual-default-above-max",
        [(vp("gpux1", "1"), vp("gpux1", "1", extra=", default_time_hours: 30"))],
        E,
        "swsuite.virtual_partitions[0].default_time_hours",
        "default time 30 h is above the maximum 24 h",
    ),
    (
        "virtual-max-above-partition",
        [(vp("gpux1", "1"), vp("gpux1", "1", hours=48))],
        W,
        "swsuite.virtual_partitions[0].max_time_hours",
        "partition 'gpu' has MaxTime 1-00:00:00; Slurm refuses longer jobs: use at most 24 h",
    ),
    # --- placements: unknown names, @GROUP and @role:ROLE (model/placement.py) ---------------------
    (
        "service-host-misspelt",
        [("  slurmctld: hal-mgmt1\n", "  slurmctld: hal-mgnt1\n")],
        E,
        "services.slurmctld",
        "slurmctld placed on hal-mgnt1, not in any node group; did you mean 'hal-mgmt1'?",
    ),
    (
        "service-on-group-name-without-at",
        [("  ldap: hal-mgmt1\n", "  ldap: mgmt-main\n")],
        E,
        "services.ldap",
        "ldap placed on mgmt-main, not in any node group; did you mean '@mgmt-main' (the node group)?",
    ),
    (
        "partition-host-misspelt",
        [("      nodes: hal[01-16]\n", '      nodes: "hal[01-16],hal-dex"\n')],
        E,
        "slurm.partitions[0].nodes",
        "partition 'gpu' names hal-dex, not in any node group; did you mean 'hal-dev'?",
    ),
    (
        "placement-unknown-group",
        [("      nodes: hal[01-16]\n", '      nodes: "@compte"\n')],
        E,
        "slurm.partitions[0].nodes",
        "unknown node group '@compte'; did you mean '@compute'?",
    ),
    (
        "placement-unknown-role",
        [("  portal: hal-mgmt2\n", '  portal: "@role:mgmt"\n')],
        E,
        "services.portal",
        "unknown role in '@role:mgmt'; did you mean '@role:",
    ),
    (
        "placement-bad-piece-beside-reference",
        [("      nodes: hal[01-16]\n", '      nodes: "@compute,hal[1-"\n')],
        E,
        "slurm.partitions[0].nodes",
        "in '@compute,hal[1-': not a valid hostlist expression: 'hal[1-'",
    ),
    (
        "group-hosts-take-no-reference",
        [("    hosts: hal-dev\n", '    hosts: "@login"\n')],
        E,
        "nodes[5].hosts",
        "not a valid hostlist expression: '@login'",
    ),
    (
        "placement-on-wrong-role-group",
        [("  slurmctld: hal-mgmt1\n", '  slurmctld: "@login"\n')],
        E,
        "services.slurmctld",
        "slurmctld placed on hal-login, a login node",
    ),
    # --- configless compute nodes ----------------------------------------------------------------
    (
        "configless-without-a-configless-node",
        [
            ("  memory_reserve_mib: 8192 ", "  configless: true\n  memory_reserve_mib: 8192 "),
            ("    hosts: hal[01-16]\n    count: 16 ", "    also: [login]\n    hosts: hal[01-16]\n    count: 16 "),
        ],
        W,
        "slurm.configless",
        "no Slurm node fetches its configuration from slurmctld: every Slurm node, hal[01-16] (16 hosts), is a "
        "controller, login, development or portal host",
    ),
    # --- a backup controller -------------------------------------------------------------------
    (
        "slurmctld-on-three-hosts",
        [("  slurmctld: hal-mgmt1\n", '  slurmctld: "hal-mgmt[1-2],hal-dev"\n')],
        E,
        "services.slurmctld",
        "slurmctld placed on hal-dev,hal-mgmt[1-2] (3 hosts); hal-provision runs a "
        "primary controller and at most one backup",
    ),
    (
        "slurmctld-backup-on-the-primary",
        [("  slurmctld: hal-mgmt1\n", '  slurmctld: "hal-mgmt1,hal-mgmt1"\n')],
        E,
        "services.slurmctld",
        "names hal-mgmt1 more than once: a backup controller on the primary's own host",
    ),
    (
        "backup-controller-state-on-local-disk",
        [TWO_CONTROLLERS],
        E,
        "slurm.state_save_location",
        "services.slurmctld (hal-mgmt1,hal-mgmt2) names a backup controller, hal-mgmt2 "
        "(primary hal-mgmt1), so the state directory "
        "/var/lib/slurm/slurmctld must be one both read and write, or the backup takes over from its own empty or stale "
        "copy and loses the queue; it lies on no shared file system of the model",
    ),
    (
        "backup-controller-does-not-mount-the-state",
        [TWO_CONTROLLERS, *SHARED_STATE, ('/srv/ctld, clients: "hal-mgmt[1-2]"', "/srv/ctld, clients: hal-mgmt1")],
        E,
        "slurm.state_save_location",
        "hal-mgmt2 does not mount /srv/ctld: add it to the clients of that mount",
    ),
    (
        "backup-controller-state-export-squashes-root",
        [
            TWO_CONTROLLERS,
            *SHARED_STATE,
            (
                'clients: "hal-mgmt[1-2]",\n         options: [rw, sync, no_subtree_check, no_root_squash]',
                'clients: "hal-mgmt[1-2]",\n         options: [rw, sync, no_subtree_check, root_squash]',
            ),
        ],
        W,
        "slurm.state_save_location",
        "lies on NFS export 'ctld', which squashes root",
    ),
    (
        "slurmctld-state-and-its-backup-on-one-server",
        [TWO_CONTROLLERS, *SHARED_STATE],
        W,
        "backup.destination.filesystem",
        "slurmctld's state /srv/ctld/state lies on 'ctld', and its snapshots (job "
        "slurmctld_state, on hal-mgmt1) go to 'backup': both served by hal-data; losing its disks loses the queue and "
        "its backup at once",
    ),
    (
        "qos-max-wall-beyond-every-partition",
        [
            (
                '    - {name: debug, priority: 100, max_wall: "04:00:00"',
                '    - {name: long, max_wall: "7-00:00:00"}\n    - {name: debug, priority: 100, max_wall: "04:00:00"',
            )
        ],
        W,
        "slurm.qos[1].max_wall",
        "QOS 'long' allows MaxWall 7-00:00:00, longer than every partition's MaxTime (the longest: 'gpu', 1-00:00:00)",
    ),
    (
        "backup-controller-timeout-too-short",
        [
            TWO_CONTROLLERS,
            *SHARED_STATE,
            ("  memory_reserve_mib: 8192 ", "  slurmctld_timeout_s: 20\n  memory_reserve_mib: 8192 "),
        ],
        W,
        "slurm.slurmctld_timeout_s",
        "SlurmctldTimeout 20 s with a backup controller (hal-mgmt2, "
        "services.slurmctld): the backup asks the primary every third of it",
    ),
    # --- storage: see test_storage_checks.py (same table style) ---------------------------------
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


ACCEPTED = [
    ("partition-default-time-equals-max", [('default_time: "04:00:00"', 'default_time: "24:00:00"')]),
    (
        "partition-unlimited-under-any-qos",
        [('max_time: "1-00:00:00"', "max_time: UNLIMITED"), ('max_wall: "1-00:00:00"}', "max_wall: UNLIMITED}")],
    ),
    ("qos-shorter-than-partition", [('max_wall: "1-00:00:00"}', 'max_wall: "12:00:00"}')]),
    (
        "portal-on-login",
        [
            ("  portal: hal-mgmt2\n", "  portal: hal-login\n"),  # its secrets are backed up there,
            lambda t: t.replace("clients: hal-mgmt2", "clients: hal-login").replace(  # on hal-mgmt2's export,
                "    hal-mgmt2: {filesystem: backup-mgmt2}", "    hal-login: {filesystem: backup-mgmt2}"
            ),
        ],
    ),
    (
        "job-tmp-on-raid0-nvme-scratch",
        [
            (
                "    features: [ac922, power9, v100, nvlink]\n",
                "    features: [ac922, power9, v100, nvlink]\n"
                "    local_disks: [{device: /dev/nvme0n1, size_gib: 800}, {device: /dev/nvme1n1, size_gib: 800}]\n"
                "    scratch: {devices: [/dev/nvme0n1, /dev/nvme1n1], layout: raid0, mount_point: /local}\n",
            ),
            (
                "    hardware: ac922\n    addresses: {mgmt: 172.22.1.1,",
                "    hardware: ac922\n    job_tmp_base: /local/jobs\n    addresses: {mgmt: 172.22.1.1,",
            ),
        ],
    ),
    ("no-nvlink", [lambda t: re.sub(r" +- \[\d, \d, \d, \d\].*\n", "", t), ("      nvlink:", "      nvlink: []")]),
    # Without a fabric there are no InfiniBand counters to read either.
    (
        "no-fabric",
        [
            lambda t: t[: t.index("\nfabric:\n")] + t[t.index("\nhardware:\n") :],
            lambda t: t.replace(", infiniband", ""),
        ],
    ),
    ("compute-range-ends-at-last-usable-address", [("{mgmt: 172.22.1.1,", "{mgmt: 172.22.255.239,")]),
    ("gpu-share-memory-just-fits", [(vp("gpux1", "1"), vp("gpux1", "1", mem=6348))]),
    (
        "mixed-hardware-8-gpu-node-takes-gpux6",
        [
            (vp("gpux12", "12"), vp("gpux12", "6")),
            (vp("cpun4", "4", kind="cpu"), vp("cpun3", "2", kind="cpu")),
            with_dgx,
        ],
    ),
    ("partition-without-qos", [("      qos: normal\n", "")]),
    ("priority-type-left-to-the-model", [("    type: multifactor ", "    # type: multifactor ")]),
    ("priority-basic-without-fair-share-or-qos-priority", [BASIC, *NO_PRIORITY_POLICY]),
    (
        "priority-usage-reset-instead-of-decay",
        [("weight_job_size: 0 ", 'weight_job_size: 0\n    decay_half_life: "0"\n    usage_reset_period: MONTHLY\n#')],
    ),
    (
        "priority-tres-weights-negative-and-gpu",
        [("weight_job_size: 0 ", "weight_job_size: 0\n    weight_tres: {CPU: -1000, Mem: 2000, GRES/gpu: 3000}\n#")],
    ),
    (
        "placements-by-group-and-role",
        [
            ("  slurmctld: hal-mgmt1\n", '  slurmctld: "@mgmt-main"\n'),
            ("      nodes: hal[01-16]\n", '      nodes: "@role:compute"\n'),
            ("  portal: hal-mgmt2\n", '  portal: "@mgmt-aux"\n'),
        ],
    ),
    # The state's snapshots would go to hal-data, which serves the state too (a warning: ROWS).
    (
        "backup-controller-with-shared-state",
        [
            TWO_CONTROLLERS,
            *SHARED_STATE,
            ("  keep: 7 ", "  state: [accounting_db, directory, monitoring, secrets]\n  keep: 7 "),
        ],
    ),
    # The NFS server holds the export's files at the same path: a controller serving it needs no mount.
    (
        "backup-controller-serves-the-state",
        [
            ("  slurmctld: hal-mgmt1\n", '  slurmctld: "hal-data,hal-mgmt1"\n'),
            ("    hosts: hal-data\n", "    hosts: hal-data\n    also: [management]\n"),
            (
                "    mounts:\n",
                "      - {name: ctld, server: hal-data, path: /export/ctld, clients: hal-mgmt1,\n"
                "         options: [rw, sync, no_subtree_check, no_root_squash]}\n    mounts:\n",
            ),
            (MISC_MOUNT, "      - {export: ctld, mount_point: /export/ctld, clients: hal-mgmt1}\n" + MISC_MOUNT),
            ("  memory_reserve_mib: 8192 ", "  state_save_location: /export/ctld/state\n  memory_reserve_mib: 8192 "),
            # hal-data, a controller now, serves the backup export: its own state goes elsewhere.
            ("  keep: 7 ", "  state: [accounting_db, directory, monitoring]\n  keep: 7 "),
        ],
    ),
]


@pytest.mark.parametrize("mutation", [pytest.param(m, id=name) for name, m in ACCEPTED])
def test_valid_variation_is_accepted(check_file, edited, mutation):
    _file, loaded = check_file(edited(*mutation))
    assert loaded.model is not None
    assert [f.format() for f in loaded.findings if f.level is not Level.info] == []


@pytest.mark.parametrize(
    ("mutation", "refused"),
    [
        pytest.param([], set(), id="hal"),
        pytest.param(
            [
                (vp("gpux12", "12"), vp("gpux12", "6")),
                (vp("gpux16", "16"), vp("gpux16", "80")),
                (vp("gpux4", "4"), vp("gpux4", "4", mem=2000)),
                (vp("cpun4", "4", kind="cpu"), vp("cpun4", "17", kind="cpu")),
                (vp("gpux1", "1"), vp("gpux1", "1", partition="nope")),
            ],
            {"gpux12", "gpux16", "gpux4", "cpun4", "gpux1"},
            id="hal-with-mistakes",
        ),
        pytest.param(
            [(vp("gpux12", "12"), vp("gpux12", "6")), (vp("gpux3", "3"), vp("gpux3", "24")), with_dgx],
            {"gpux3", "cpun4"},
            id="mixed-hardware",
        ),
    ],
)
def test_checks_accept_exactly_what_the_suite_can_run(edited, mutation, refused):
    """A virtual partition has an error finding if and only if swrun would refuse its jobs."""
    from hal_provision.render.swsuite import table
    from hal_provision.node.swsuite.translate import Request, SwError, resolve

    model = load_text(edited(*mutation), "c.yml").model
    flagged = {
        model.swsuite.virtual_partitions[f.path[2]].name
        for f in run_all(model)
        if f.level is Level.error and f.path[:2] == ("swsuite", "virtual_partitions")
    }
    suite = table(model)
    refused_by_suite = set()
    for vpart in model.swsuite.virtual_partitions:
        try:
            resolve(suite, Request(vpart.name))
        except SwError:
            refused_by_suite.add(vpart.name)
    assert flagged == refused_by_suite == refused


def test_embedded_hal_is_clean(hal_text):
    loaded = load_text(hal_text, "cluster.yml")
    assert loaded.findings == []
    found = run_all(loaded.model)
    assert [f for f in found if f.level is Level.error] == []
    assert [f.format() for f in found] == []  # not even a warning: HAL is the reference


def test_all_independent_mistakes_reported_in_one_run(check_file, edited):
    _file, loaded = check_file(
        edited(
            ("    count: 16 ", "    count: 15 "),
            ("    count: 1 ", "    count: 2 "),
            ("      qos: normal\n", "      qos: nromal\n"),
            ("        - {socket: 0}\n        - {socket: 1}", "        - {socket: 7}\n        - {socket: 9}"),
            ("  slurmctld: hal-mgmt1\n", "  slurmctld: hal01\n"),
            ("first_switch_port: 20}", "first_switch_port: 40}"),
            (vp("gpux16", "16"), vp("gpux16", "16", partition="gpux")),
        )
    )
    expected = {
        ("nodes[6].count", "count is 15"),
        ("nodes[0].count", "count is 2"),
        ("slurm.partitions[0].qos", "'nromal'"),
        ("hardware.ac922.gpus.devices[1].socket", "socket 7"),
        ("hardware.ac922.gpus.devices[2].socket", "socket 9"),
        ("services.slurmctld", "a compute node"),
        # ... and so the Slurm collector, listed for the management role, is off the controller
        ("monitoring.inputs.management[6]", "the slurm collector runs on the slurmctld host (hal01)"),
        # ... and its state and the munge key are backed up where the backup file system is not mounted
        ("backup.destination.filesystem", "hal01 backs up state (hal01: slurmctld_state, secrets-hal01)"),
        # ... to an export another host (hal-mgmt1) may mount
        (
            "backup.destination.filesystem",
            "hal01's secret snapshots (slurmctld_state, secrets-hal01) would go to "
            "'backup', which hal-mgmt1 may mount too",
        ),
        ("fabric.links[4].first_switch_port", "takes port 40"),
        ("swsuite.virtual_partitions[6].partition", "'gpux'"),
    }
    got = {(f.dotted, f.message) for f in loaded.findings if f.level is Level.error}
    missing = {(p, m) for p, m in expected if not any(p == gp and m in gm for gp, gm in got)}
    assert not missing, "\n".join(f.format() for f in loaded.findings)
    assert len(got) == len(expected)


@pytest.mark.parametrize(
    ("replacement", "path", "line_marker", "column_marker"),
    [
        pytest.param(
            ("    count: 16 ", "    count: 15 "), "nodes[6].count", "count: 15", "count", id="block-mapping-key"
        ),
        pytest.param(
            (", ib: 172.24.1.1}", ", ib: 172.24.1.1, opa: 10.0.0.1}"),
            "nodes[6].addresses.opa",
            "opa:",
            "opa",
            id="flow-mapping-key",
        ),
        pytest.param(
            ("        - [3, 0, 0, 0]", "        - [2, 0, 0, 0]"),
            "hardware.ac922.gpus.nvlink[1][0]",
            "- [2, 0, 0, 0]",
            "2",
            id="flow-sequence-item",
        ),
        pytest.param(
            ("first_switch_port: 20}", "first_switch_port: 40}"),
            "fabric.links[4].first_switch_port",
            "first_switch_port: 40",
            "first_switch_port",
            id="list-of-flow-mappings",
        ),
    ],
)
def test_findings_carry_line_and_column(check_file, edited, position, replacement, path, line_marker, column_marker):
    text = edited(replacement)
    file, loaded = check_file(text)
    [finding] = [f for f in loaded.findings if f.dotted == path]
    assert (finding.file, finding.line, finding.column) == (str(file), *position(text, line_marker, column_marker))
    assert finding.format().startswith(f"{file}:{finding.line}:{finding.column}: error: {path}: ")


def test_a_missing_key_is_located_at_its_parent(check_file, edited, position):
    text = edited(("{mgmt: 172.22.0.3, bmc: 172.23.0.3}", "{bmc: 172.23.0.3}"))
    _file, loaded = check_file(text)
    [finding] = [f for f in loaded.findings if f.check == "primary_addresses_present"]
    assert (finding.line, finding.column) == position(text, "addresses: {bmc: 172.23.0.3}")


def test_check_names_are_unique():
    """REGISTRY is keyed by function name: a second check with the same name would replace
    the first without a word."""
    from hal_provision.checks import fabric, hardware, network, nodes, services, slurm, software, storage, swsuite  # noqa: F401

    sources = Path(__file__).resolve().parents[3] / "hal_provision" / "checks"
    decorated = sum(len(re.findall(r"\n@(?:gpfs_)?check\n", p.read_text())) for p in sources.glob("*.py"))
    assert decorated == len(REGISTRY) > 40


@pytest.mark.parametrize(
    ("value", "minutes"),
    [
        ("30", 30),
        ("30:30", 30.5),
        ("02:00:00", 120),
        ("1-00:00:00", 1440),
        ("2-12", 3600),
        ("1-01:30", 1530),
        ("UNLIMITED", None),
        ("INFINITE", None),
    ],
)
def test_slurm_time_in_minutes(value, minutes):
    assert slurm_minutes(value) == minutes


def test_overlapping_intervals_found_by_one_sort():
    spans = [(10, 19, "b"), (0, 9, "a"), (5, 5, "inside-a"), (20, 29, "c"), (25, 40, "d"), (41, 41, "e")]
    assert list(overlapping_intervals(spans)) == [("inside-a", "a", 5, 5), ("d", "c", 25, 29)]


def big_hal(nodes: int) -> list:
    """Edits that give HAL `nodes` compute nodes, on /8 networks and 2048-port leaf switches."""
    per_leaf = 2048
    leaves = -(-nodes // per_leaf)
    width = len(str(nodes))
    switch_lines = "".join(
        f"    - {{name: leaf{k}, tier: leaf, ports: {per_leaf}, uplinks: [ib-sw1]}}\n" for k in range(leaves)
    )
    link_lines = "".join(
        f'    - {{hosts: "hal[{k * per_leaf + 1:0{width}d}-{min(nodes, (k + 1) * per_leaf):0{width}d}]", port: 1, '
        f"switch: leaf{k}, first_switch_port: 1}}\n"
        for k in range(leaves)
    )
    return [
        ("      model: Mellanox SB7800\n", "      model: Mellanox SB7800\n" + switch_lines),
        ('    - {hosts: "hal[01-16]", port: 1, switch: ib-sw1, first_switch_port: 1}\n', link_lines),
        ("cidr: 172.22.0.0/16", "cidr: 10.0.0.0/8"),
        ("cidr: 172.23.0.0/16", "cidr: 11.0.0.0/8"),
        ("cidr: 172.24.0.0/16", "cidr: 12.0.0.0/8"),
        ("    count: 16 ", f"    count: {nodes} "),
        lambda text: (
            text.replace("172.22.", "10.22.")
            .replace("172.23.", "11.23.")
            .replace("172.24.", "12.24.")
            .replace("hal[01-16]", f"hal[{1:0{width}d}-{nodes}]")
        ),
    ]


@pytest.fixture
def compressed_only(monkeypatch):
    """From here on, expanding a NodeSet host by host fails the test."""

    def expand(self, *args, **kwargs):
        raise AssertionError("a NodeSet was expanded host by host")

    for name in ("__iter__", "striter", "nsiter"):
        monkeypatch.setattr(NodeSetBase, name, expand)
    with pytest.raises(AssertionError, match="host by host"):
        list(NodeSet("n[1-3]"))


def test_100000_nodes_checked_fast_without_expanding_hostlists(edited, compressed_only):
    loaded = load_text(edited(*big_hal(100_000)), "big.yml")
    assert loaded.findings == [] and len(loaded.model.slurm_nodes) == 100_000
    start = time.perf_counter()
    found = run_all(loaded.model)
    elapsed = time.perf_counter() - start
    assert [f for f in found if f.level is not Level.info] == []
    # About 0.2 s on an idle machine; the bound only catches work that grows with hosts x groups.
    assert elapsed < 5.0, f"checks took {elapsed:.2f} s for 100,000 nodes"


def test_100000_nodes_mistakes_found_without_expanding(edited, compressed_only):
    text = edited(
        *big_hal(100_000),
        ("    count: 100000 ", "    count: 99999 "),
        ("  slurmctld: hal-mgmt1\n", '  slurmctld: "hal[000001-050000]"\n'),
    )
    found = {(f.dotted, f.message) for f in run_all(load_text(text, "big.yml").model) if f.level is Level.error}
    assert (
        "nodes[6].count",
        "count is 99999 but hosts 'hal[000001-100000]' names 100000; fix the hostlist or set count to match",
    ) in found
    slurmctld = [m for p, m in found if p == "services.slurmctld"]
    assert sorted(slurmctld) == [
        "slurmctld placed on hal[000001-050000] (50000 hosts), a compute node; it must run on "
        "management nodes (or add one of those roles to node group 'compute' with `also:`)",
        "slurmctld placed on hal[000001-050000] (50000 hosts); hal-provision runs a primary controller and at most "
        "one backup: name one or two hosts",
    ]


def test_a_gpu_missing_from_devices_is_one_error_not_one_per_nvlink_row(check_file, edited):
    _file, loaded = check_file(edited(("        - {socket: 1}\n        - {socket: 1}\n", "        - {socket: 1}\n")))
    hardware = [f for f in loaded.findings if f.dotted.startswith("hardware.")]
    assert [f.dotted for f in hardware] == ["hardware.ac922.gpus.devices"], [f.format() for f in hardware]
