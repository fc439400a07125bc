"""Storage checks: one row per mistake, as an edit of the embedded HAL description.

Same table style as test_checks.py (which holds every other domain): each row edits the YAML
text, so line numbers are real, and names the finding it expects: level, dotted path and a
piece of the message.
"""

from __future__ import annotations

import re

import pytest

from hal_provision.checks import run_all
from hal_provision.findings import Level
from hal_provision.loader import load_text

E, W = Level.error, Level.warning

NSD_CLASS = "        tuning: {pagepool: 64G, nsdBufSpace: 70, nsdMaxWorkerThreads: 1024, nsdMinWorkerThreads: 1024,\n"
COMPUTE_CLASS = '        hosts: "hal[01-16],hal-dev"\n        tuning: {pagepool: 4G}\n'
SERVICE_CLASS = '        hosts: "hal-login,hal-dtn"\n        tuning: {pagepool: 16G}\n'
QUORUM = '    quorum: "ddn1-a,ddn1-b,ddn2-a,ddn2-b,hal-dtn"'
EXPORT = '        path: /export/sw                      # [assumed]\n        clients: "hal[01-16],hal-login,hal-dev"\n'
MOUNT = '{export: misc, mount_point: /sw, clients: "hal[01-16],hal-login,hal-dev"}'
CLUSTER_TUNING = "    tuning:                                   # cluster-wide\n"


def gpfs_fs(old: str, new: str):
    """A replacement inside the file-system entry (keys are unique there)."""
    return (old, new)


ROWS = [
    # --- memory: pagepool + caches per class -------------------------------------------------
    (
        "caches-above-compute-memory",
        [(COMPUTE_CLASS, COMPUTE_CLASS.replace("4G", "300G"))],
        E,
        "storage.gpfs.node_classes[1].tuning",
        "node class 'computeNodes': pagepool 300G + maxFilesToCache 100000 x 3 KiB + maxStatCache 100000 x 400 B = "
        "300.3 GiB, above the 256 GiB of 'ac922' nodes hal[01-16],hal-dev (17 hosts)",
    ),
    (
        "caches-above-appliance-memory",
        [(NSD_CLASS, NSD_CLASS.replace("64G", "128G"))],
        E,
        "storage.gpfs.node_classes[0].tuning",
        "= 128.3 GiB, above the 128 GiB of appliance server ddn1-a",
    ),
    (
        "caches-above-smallest-member",
        [(SERVICE_CLASS, SERVICE_CLASS.replace("16G", "200G"))],
        E,
        "storage.gpfs.node_classes[2].tuning",
        "above the 192 GiB of 'x86-dtn' nodes hal-dtn",
    ),
    (
        "cache-counts-alone-too-big",
        [(CLUSTER_TUNING + "      maxFilesToCache: 100000 ", CLUSTER_TUNING + "      maxFilesToCache: 100000000 ")],
        E,
        "storage.gpfs.node_classes[1].tuning",
        "maxFilesToCache 100000000 x 3 KiB",
    ),
    (
        "pagepool-above-phys-mem-pct",
        [(SERVICE_CLASS, SERVICE_CLASS.replace("16G", "160G"))],
        W,
        "storage.gpfs.node_classes[2].tuning",
        "pagepool 160G is above 75% of the 192 GiB of 'x86-dtn' nodes hal-dtn (pagepoolMaxPhysMemPct)",
    ),
    # --- worker threads --------------------------------------------------------------------
    (
        "nsd-min-above-max-in-class",
        [(NSD_CLASS, NSD_CLASS.replace("nsdMinWorkerThreads: 1024", "nsdMinWorkerThreads: 2048"))],
        E,
        "storage.gpfs.node_classes[0].tuning.nsdMinWorkerThreads",
        "node class 'nsdNodes': nsdMinWorkerThreads 2048 (class) is above nsdMaxWorkerThreads 1024 (class)",
    ),
    (
        "nsd-min-cluster-wide-above-default-max",
        [(CLUSTER_TUNING, CLUSTER_TUNING + "      nsdMinWorkerThreads: 600\n")],
        E,
        "storage.gpfs.tuning.nsdMinWorkerThreads",
        "node class 'computeNodes': nsdMinWorkerThreads 600 (cluster) is above nsdMaxWorkerThreads 512 (default)",
    ),
    # --- block size, log ---------------------------------------------------------------------
    (
        "block-size-unsupported",
        [gpfs_fs("block_size: 1M ", "block_size: 3M ")],
        E,
        "storage.gpfs.filesystems[0].block_size",
        "block_size 3M is not one Spectrum Scale supports: 64K, 128K",
    ),
    (
        "block-size-not-power-of-two",
        [gpfs_fs("block_size: 1M ", "block_size: 768K ")],
        E,
        "storage.gpfs.filesystems[0].block_size",
        "block_size 768K is not one Spectrum Scale supports",
    ),
    (
        "block-size-above-maxblocksize",
        [gpfs_fs("block_size: 1M ", "block_size: 8M ")],
        E,
        "storage.gpfs.filesystems[0].block_size",
        "block_size 8M is above the cluster's maxblocksize 4M",
    ),
    (
        "block-size-not-a-size",
        [gpfs_fs("block_size: 1M ", "block_size: 1MB ")],
        E,
        "storage.gpfs.filesystems[0].block_size",
        "'1MB' is not a size",
    ),
    (
        "log-not-multiple-of-metadata-block",
        [gpfs_fs("log_size: 128M ", "log_size: 1536K ")],
        E,
        "storage.gpfs.filesystems[0].log_size",
        "log_size 1536K is not a multiple of the metadata block size 1M",
    ),
    (
        "log-too-large",
        [gpfs_fs("log_size: 128M ", "log_size: 2G ")],
        E,
        "storage.gpfs.filesystems[0].log_size",
        "log_size 2G is outside 256K-1024M",
    ),
    (
        "metadata-block-without-metadata-nsds",
        [gpfs_fs("        block_size: 1M ", "        metadata_block_size: 256K\n        block_size: 1M ")],
        E,
        "storage.gpfs.filesystems[0].metadata_block_size",
        "needs metadataOnly NSDs in the system pool",
    ),
    (
        "replicas-need-failure-groups",
        [("servers: [ddn2-a, ddn2-b], failure_group: 2}", "servers: [ddn2-a, ddn2-b], failure_group: 1}")],
        E,
        "storage.gpfs.filesystems[0].metadata_replicas",
        "2 metadata replicas need NSDs for metadata in 2 failure groups; 'halfs' has 1 failure group (1)",
    ),
    # --- quorum ------------------------------------------------------------------------------
    (
        "even-quorum",
        [(QUORUM, '    quorum: "ddn1-a,ddn1-b,ddn2-a,ddn2-b"')],
        W,
        "storage.gpfs.quorum",
        "4 quorum nodes: an even number survives no more failures than 3 would",
    ),
    (
        "tiebreaker-not-an-nsd",
        [(QUORUM, QUORUM + "\n    tiebreaker_disks: [ddn1nsd99]")],
        E,
        "storage.gpfs.tiebreaker_disks[0]",
        "tiebreaker disk 'ddn1nsd99' is not an NSD of any file system",
    ),
    (
        "two-tiebreakers",
        [(QUORUM, QUORUM + "\n    tiebreaker_disks: [ddn1nsd01, ddn2nsd01]")],
        E,
        "storage.gpfs.tiebreaker_disks",
        "2 tiebreaker disks; GPFS takes 1 or 3",
    ),
    (
        "too-many-quorum-with-tiebreaker",
        [(QUORUM, '    quorum: "ddn1-a,ddn1-b,ddn2-a,ddn2-b,hal-dtn,hal[01-04]"\n    tiebreaker_disks: [ddn1nsd01]')],
        E,
        "storage.gpfs.quorum",
        "9 quorum nodes with tiebreaker disks; GPFS allows at most 8",
    ),
    # --- membership: one class per node ------------------------------------------------------
    (
        "node-in-two-classes",
        [(SERVICE_CLASS, SERVICE_CLASS.replace("hal-login,hal-dtn", "hal-login,hal-dtn,hal16"))],
        E,
        "storage.gpfs.node_classes[2].hosts",
        "hal16 already in node class 'computeNodes'; a node belongs to one class",
    ),
    (
        "quorum-node-in-no-class",
        [(SERVICE_CLASS, SERVICE_CLASS.replace("hal-login,hal-dtn", "hal-login"))],
        E,
        "storage.gpfs.quorum",
        "hal-dtn in no node class; add them to one under storage.gpfs.node_classes",
    ),
    (
        "nsd-server-in-no-class",
        [('        hosts: "ddn1-a,ddn1-b,ddn2-a,ddn2-b"\n', '        hosts: "ddn1-a,ddn1-b,ddn2-a"\n')],
        E,
        "storage.gpfs.filesystems[0].nsds[1].servers",
        "ddn2-b in no node class",
    ),
    (
        "class-names-unknown-host",
        [(COMPUTE_CLASS, COMPUTE_CLASS.replace("hal[01-16]", "hal[01-17]"))],
        E,
        "storage.gpfs.node_classes[1].hosts",
        "names hal17, neither a model node nor an appliance server",
    ),
    (
        "class-member-off-daemon-network",
        [(SERVICE_CLASS, SERVICE_CLASS.replace("hal-login,hal-dtn", "hal-login,hal-dtn,hal-mgmt1"))],
        E,
        "storage.gpfs.node_classes[2].hosts",
        "hal-mgmt1 have no address on the daemon network 'ib', so their GPFS node names would not resolve",
    ),
    (
        "admin-host-is-appliance",
        [("    admin_host: hal-dtn ", "    admin_host: ddn1-a ")],
        E,
        "storage.gpfs.admin_host",
        "ddn1-a is an appliance server; Ansible runs mm commands on a model node",
    ),
    (
        "appliance-server-named-like-a-node",
        [("        - {name: ddn2-b, memory_gib: 128}", "        - {name: hal-data, memory_gib: 128}")],
        E,
        "storage.arrays",
        "appliance servers hal-data are also model nodes",
    ),
    (
        "class-name-twice",
        [("      - name: serviceNodes ", "      - name: computeNodes ")],
        E,
        "storage.gpfs.node_classes[2].name",
        "node class name 'computeNodes' is already used by storage.gpfs.node_classes[1]",
    ),
    (
        "nsd-names-twice",
        [("{name: ddn2nsd, count: 8,", "{name: ddn1nsd, count: 8,")],
        E,
        "storage.gpfs.filesystems[0].nsds[1].name",
        "NSD ddn1nsd01 is already named by storage.gpfs.filesystems[0].nsds[0]",
    ),
    # --- NFS ---------------------------------------------------------------------------------
    (
        "export-path-outside-volumes",
        [(EXPORT, EXPORT.replace("/export/sw", "/srv/sw"))],
        E,
        "storage.nfs.exports[0].path",
        "/srv/sw is on none of hal-data's volumes (/export)",
    ),
    (
        "export-path-prefix-is-not-a-volume",
        [(EXPORT, EXPORT.replace("/export/sw", "/exports/sw"))],
        E,
        "storage.nfs.exports[0].path",
        "/exports/sw is on none of hal-data's volumes",
    ),
    (
        "export-client-unknown",
        [(EXPORT, EXPORT.replace("hal[01-16]", "hal[01-17]"))],
        E,
        "storage.nfs.exports[0].clients",
        "names hal17, not in any node group",
    ),
    (
        "export-network-unknown",
        [(EXPORT, EXPORT + "        networks: [mgnt]\n")],
        E,
        "storage.nfs.exports[0].networks[0]",
        "unknown network 'mgnt'; did you mean 'mgmt'?",
    ),
    (
        "export-server-undeclared",
        [("        server: hal-data\n", "        server: hal-dtn\n")],
        E,
        "storage.nfs.exports[0].server",
        "hal-dtn is not declared under storage.nfs.servers",
    ),
    (
        "export-without-clients",
        [(EXPORT, EXPORT.replace('        clients: "hal[01-16],hal-login,hal-dev"\n', ""))],
        E,
        "storage.nfs.exports[0]",
        "export 'misc' names no clients and no networks; nobody could mount it",
    ),
    (
        "mount-unknown-export",
        [(MOUNT, MOUNT.replace("export: misc", "export: msic"))],
        E,
        "storage.nfs.mounts[0].export",
        "unknown export 'msic'; did you mean 'misc'?",
    ),
    (
        "mount-client-not-allowed",
        [(MOUNT, MOUNT.replace("hal-dev", "hal-dev,hal-dtn"))],
        E,
        "storage.nfs.mounts[0].clients",
        "hal-dtn would mount hal-data:/export/sw, but export 'misc' does not allow them",
    ),
    (
        "mount-client-unknown",
        [(MOUNT, MOUNT.replace("hal-dev", "hal-dev,hal-dtx"))],
        E,
        "storage.nfs.mounts[0].clients",
        "names hal-dtx, not in any node group; did you mean 'hal-dtn'?",
    ),
    (
        "mount-point-twice",
        [(MOUNT, MOUNT.replace("/sw", "/home"))],
        E,
        "storage.nfs.mounts[0].mount_point",
        "mount point '/home' is already used by storage.gpfs.filesystems[0]",
    ),
    (
        "mount-client-unknown-group",
        [(MOUNT, MOUNT.replace("hal-dev", "@dve"))],
        E,
        "storage.nfs.mounts[0].clients",
        "unknown node group '@dve'; did you mean '@dev'?",
    ),
    (
        "gpfs-member-misspelt",
        [(QUORUM, QUORUM.replace("ddn2-b", "ddn2-c"))],
        E,
        "storage.gpfs.quorum",
        "names ddn2-c, neither a model node nor an appliance server; did you mean 'ddn2-b'?",
    ),
    # --- the users' homes --------------------------------------------------------------------
    (
        "home-not-on-compute-node",
        [(COMPUTE_CLASS, COMPUTE_CLASS.replace("hal[01-16]", "hal[01-15]"))],
        W,
        "storage.gpfs.node_classes",
        "hal16 of node group 'compute' (compute) mounts no file system at /home "
        "(accounts.home_root), where the users' homes are: add it to a node class",
    ),
    (
        "home-not-on-login-node",
        [(SERVICE_CLASS, SERVICE_CLASS.replace("hal-login,", ""))],
        W,
        "storage.gpfs.node_classes",
        "hal-login of node group 'login' (login) mounts no file system at /home",
    ),
    (
        "nfs-server-two-hosts",
        [("      - host: hal-data ", '      - host: "hal-data,hal-dtn" ')],
        E,
        "storage.nfs.servers[0].host",
        "name one host, not hal-data,hal-dtn",
    ),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_storage_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


def without_gpfs(text: str) -> str:
    start = text.index("  gpfs:\n")
    return text[:start] + text[text.index("  nfs:\n") :]


ACCEPTED = [
    ("no-gpfs-section", [without_gpfs]),
    (
        "even-quorum-with-tiebreaker",
        [(QUORUM, '    quorum: "ddn1-a,ddn1-b,ddn2-a,ddn2-b"\n    tiebreaker_disks: [ddn1nsd01]')],
    ),
    ("three-tiebreakers", [(QUORUM, QUORUM + "\n    tiebreaker_disks: [ddn1nsd01, ddn2nsd01, ddn1nsd02]")]),
    (
        "export-by-network",
        [
            (EXPORT, EXPORT.replace('        clients: "hal[01-16],hal-login,hal-dev"\n', "        networks: [mgmt]\n")),
            (MOUNT, MOUNT.replace("hal-dev", "hal-dev,hal-dtn")),
        ],
    ),
    (
        "block-size-16M-with-maxblocksize",
        [
            gpfs_fs("block_size: 1M ", "block_size: 16M "),
            gpfs_fs("log_size: 128M ", "log_size: 256M "),
            (CLUSTER_TUNING, CLUSTER_TUNING + "      maxblocksize: 16M\n"),
        ],
    ),
    (
        "metadata-block-with-metadata-nsds",
        [
            gpfs_fs("        block_size: 1M ", "        metadata_block_size: 256K\n        block_size: 1M "),
            (
                "servers: [ddn1-a, ddn1-b], failure_group: 1}",
                "servers: [ddn1-a, ddn1-b], failure_group: 1, usage: metadataOnly}",
            ),
            (
                "servers: [ddn2-a, ddn2-b], failure_group: 2}",
                "servers: [ddn2-a, ddn2-b], failure_group: 2, usage: metadataOnly}\n"
                "          - {name: ddn2dat, count: 4, device: /dev/mapper/ddn2dat, servers: [ddn2-a, ddn2-b], failure_group: 2, "
                "usage: dataOnly, pool: data}",
            ),
        ],
    ),
    (
        "nfs-export-of-gpfs-mount",
        [
            ("      - host: hal-data ", "      - host: hal-dtn "),
            ("        server: hal-data\n", "        server: hal-dtn\n"),
            ("{name: backup, server: hal-data,", "{name: backup, server: hal-dtn,"),
            ("{name: backup-mgmt2, server: hal-data,", "{name: backup-mgmt2, server: hal-dtn,"),
            (EXPORT, EXPORT.replace("/export/sw", "/home/shared")),
        ],
    ),
]


@pytest.mark.parametrize("mutation", [pytest.param(m, id=name) for name, m in ACCEPTED])
def test_valid_storage_variation_is_accepted(check_file, edited, mutation):
    """No storage finding; other sections may refer to what a row removes (containers bind
    the GPFS file system), which is their checks' business."""
    _file, loaded = check_file(edited(*mutation))
    assert loaded.model is not None
    assert [f.format() for f in loaded.findings if f.level is not Level.info and f.path[:1] == ("storage",)] == []


def test_tiebreaker_count_message_is_plural_aware(edited):
    model = load_text(edited((QUORUM, '    quorum: "ddn1-a,ddn1-b"')), "c.yml").model
    [found] = [f for f in run_all(model) if f.check == "gpfs_quorum_odd"]
    assert re.search(r"^2 quorum nodes: .* than 1 would \(a majority of 2 is 2\)", found.message)
