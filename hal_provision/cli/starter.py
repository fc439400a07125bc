"""A small, valid, commented starter cluster.yml for a new cluster (`hal-provision init`).

Pure: a `Starter` (names, host lists, one compute hardware profile per distinct build) in, the
file's text out. The required sections are live and filled from the Starter, and so is an
NFS /home from the management node (a login or compute node without a shared home is a
warning); every other optional section follows, commented out, with what it brings in and what it needs. Each commented
block is the file's own line behind "# ", so an editor's "uncomment" turns it into valid YAML;
tests/unit/cli/test_init.py uncomments each one (with what its "Needs:" names) and validates.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network

from ..hostlist import expand, fold_hostlists, nodeset

DEFAULT_CIDR = "10.10.0.0/16"
RESERVE_MIB = 8192  # slurm.memory_reserve_mib of the starter: the OS and slurmd


@dataclass(frozen=True)
class Build:
    """One compute hardware profile (the model's `hardware.<name>`) and the hosts that have it."""

    name: str
    hosts: str  # hostlist expression
    profile: dict  # hardware.<name>: the model's keys, values plain YAML scalars, lists, dicts
    origin: str = ""  # where the values came from, for the comment above the profile

    @property
    def gpus(self) -> int:
        return len(self.profile["gpus"]["devices"]) if self.profile.get("gpus") else 0

    @property
    def cpus(self) -> int:
        p = self.profile
        return p["sockets"] * p["cores_per_socket"] * p["threads_per_core"]


@dataclass(frozen=True)
class Starter:
    name: str
    login: str
    management: str
    builds: list[Build] = field(default_factory=list)
    domain: str = ""
    cidr: str = DEFAULT_CIDR

    @property
    def compute(self) -> str:
        return fold_hostlists(b.hosts for b in self.builds)

    @property
    def fqdn(self) -> str:
        return self.domain or f"{self.name}.example.org"


def gpu_profile(
    model: str,
    architecture: str,
    sockets: int,
    cores_per_socket: int,
    threads_per_core: int,
    memory_gib: int,
    gpus: int,
    gpu_model: str,
    gpu_type: str,
    gpu_memory_gib: int,
) -> dict:
    """A profile from the flags of `init`: GPUs spread over the sockets in order, no NVLink known."""
    doc: dict = {
        "model": model,
        "architecture": architecture,
        "sockets": sockets,
        "cores_per_socket": cores_per_socket,
        "threads_per_core": threads_per_core,
        "memory_gib": memory_gib,
    }
    if gpus:
        per_socket = -(-gpus // sockets)
        doc["gpus"] = {
            "type": gpu_type,
            "model": gpu_model,
            "memory_gib": gpu_memory_gib,
            "devices": [{"socket": i // per_socket} for i in range(gpus)],
        }
    return doc


# ---- the text -------------------------------------------------------------------------------------


def _scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    plain = (
        text
        and text[0].isalnum()
        and not any(c in text for c in ":#{}[],&*!|>'\"%@`")
        and text.lower() not in ("null", "true", "false", "yes", "no", "on", "off", "~")
    )
    return text if plain else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _flow(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return _scalar(value)


def _profile_lines(build: Build) -> list[str]:
    p = build.profile
    out = [f"  {build.name}:" + (f"                    # {build.origin}" if build.origin else "")]
    for key in ("model", "architecture", "cpu_model", "sockets", "cores_per_socket", "threads_per_core", "memory_gib"):
        if p.get(key) not in (None, ""):
            out.append(f"    {key}: {_scalar(p[key])}")
    if p.get("gpus"):
        g = p["gpus"]
        out += [
            "    gpus:",
            f"      type: {_scalar(g['type'])}                 # Slurm GRES type: users ask --gres=gpu:{g['type']}:N",
            f"      model: {_scalar(g['model'])}",
            f"      memory_gib: {g['memory_gib']}",
            "      devices:                  # one per GPU: the CPU socket it hangs off",
        ]
        out += [f"        - {_flow(d)}" for d in g["devices"]]
        if g.get("nvlink"):
            out.append("      nvlink:                   # NVLink connections between GPU i and GPU j")
            out += [f"        - {_flow(row)}" for row in g["nvlink"]]
    if p.get("ib_adapters"):
        out.append("    ib_adapters:")
        out += [f"      - {_flow(a)}" for a in p["ib_adapters"]]
    else:
        out.append("#     ib_adapters: [{model: ConnectX-7, ports: 1, rate_gbps: 400}]   # with a `fabric`")
    out.append(
        f"    features: {_flow(p.get('features') or [])}"
        + ("                  # Slurm node features" if not p.get("features") else "")
    )
    return out


def _addresses(s: Starter) -> dict[str, str]:
    """The first address of each group on the primary network: management .0.2, login .0.10,
    compute .1.1 on (a /16's third octet counting on per build)."""
    net = IPv4Network(s.cidr)
    base = int(net.network_address)
    return {
        "management": str(IPv4Address(base + 2)),
        "login": str(IPv4Address(base + 10)),
        "compute": str(IPv4Address(base + 256 + 1)),
    }


def _mem_per_cpu(s: Starter) -> int:
    """--mem-per-cpu of the virtual partitions: every build's RealMemory share, rounded down to 100 MiB."""
    shares = [(b.profile["memory_gib"] * 1024 - RESERVE_MIB) // b.cpus for b in s.builds]
    return max(min(shares) // 100 * 100, 100)


def _virtual_partitions(s: Starter) -> list[str]:
    per_node = min((b.gpus for b in s.builds), default=0)
    # Beyond one node a job needs identical nodes: with several builds, one node's worth only.
    nodes = len(nodeset(s.compute)) if len(s.builds) == 1 else 1
    mem = _mem_per_cpu(s)
    out = []
    n = 1
    while per_node and n <= per_node * nodes:
        if n <= per_node or n % per_node == 0:
            out.append(
                f"    - {{name: gpux{n}, kind: gpu, partition: batch, gpus: {n}, mem_per_cpu_mib: {mem}, "
                "max_time_hours: 48}"
            )
        n *= 2
    out.append(
        f"    - {{name: cpun1, kind: cpu, partition: batch, nodes: 1, mem_per_cpu_mib: {mem}, max_time_hours: 48}}"
    )
    return out


def starter_text(s: Starter, path: str = "cluster.yml") -> str:
    """The starter description; PATH: where it is written, named in its header's commands."""
    addr = _addresses(s)
    mgmt1, login1 = expand(s.management)[0], expand(s.login)[0]
    compute_first = [int(IPv4Address(addr["compute"])) + 256 * i for i in range(len(s.builds))]
    gpus = any(b.gpus for b in s.builds)
    lines = [
        f"# {s.name}: the cluster's description, read by every hal-provision command.",
        "#",
        f"# Started by `hal-provision init`. Check it with `hal-provision validate {shlex.quote(path)}`, look at it",
        "# with `show` and `diagram`, write its configs with `render`. docs/cluster-yml.md documents",
        "# every key (type, default, the checks that read it); inventory/hal/cluster.yml is a full example.",
        "# Required sections come first; optional ones follow, commented out: uncomment one (an",
        "# editor's uncomment removes the leading '# ') with what its 'Needs:' line names.",
        "schema_version: 1",
        "",
        "cluster:",
        f"  name: {_scalar(s.name)}",
        f"  domain: {_scalar(s.fqdn)}" + ("          # your DNS domain" if not s.domain else ""),
        "  primary_network: mgmt                 # hosts' plain names resolve to it; Ansible reaches them on it",
        "  os: debian12                          # or debian13: the nodes' Debian; slurm.version defaults to its Slurm",
        "",
        "networks:",
        "  mgmt:",
        "    kind: ethernet",
        f"    cidr: {s.cidr}",
        "#   bmc:                                 # out-of-band: give node groups a `bmc` address too",
        "#     kind: bmc",
        "#     cidr: 10.11.0.0/16",
        "#     host_suffix: -bmc",
        "#   ib:                                  # IPoIB on the InfiniBand fabric (see `fabric` below)",
        "#     kind: infiniband",
        "#     cidr: 10.12.0.0/16",
        "#     host_suffix: -ib",
        "",
        "# Hardware profiles, one per build of node. Compute (and development) groups must name one:",
        "# slurm.conf's node lines, gres.conf, the wrapper suite and the health check come from it.",
        "# Login, management and storage groups may leave `hardware` out. `hardware:` entries can be",
        "# printed on a node by `hal-provision discover` (or `python3 -m hal_provision.discovery`).",
        "hardware:",
    ]
    for b in s.builds:
        lines += _profile_lines(b)
    lines += [
        "",
        "nodes:",
        "  - name: mgmt",
        "    role: management                     # slurmctld, slurmdbd and MariaDB run here (see services)",
        f"    hosts: {_scalar(s.management)}",
        f"    addresses: {{mgmt: {addr['management']}}}        # the first host's; the next hosts count up",
        "  - name: login",
        "    role: login",
        f"    hosts: {_scalar(s.login)}",
        f"    addresses: {{mgmt: {addr['login']}}}",
    ]
    for b, first in zip(s.builds, compute_first):
        lines += [
            f"  - name: {b.name if len(s.builds) > 1 else 'compute'}",
            "    role: compute",
            f"    hosts: {_scalar(b.hosts)}",
            f"    count: {len(nodeset(b.hosts))}",
            f"    hardware: {b.name}",
            f"    addresses: {{mgmt: {IPv4Address(first)}}}",
        ]
    lines += [
        "",
        "services:",
        f"  slurmctld: {mgmt1}",
        f"  slurmdbd: {mgmt1}",
        f"  accounting_db: {mgmt1}",
        f"#   monitoring_db: {mgmt1}              # with `monitoring`",
        f"#   ldap: {mgmt1}                       # with `accounts`",
        f"#   portal: {login1}                    # with `portal`",
        "",
        "slurm:",
        f"  memory_reserve_mib: {RESERVE_MIB}                # RealMemory = installed memory - this",
        "  # def_mem_per_cpu_mib left out: the hardware gives it (RealMemory / CPUs)",
        "  partitions:",
        "    - name: batch",
        '      nodes: "@role:compute"                # every compute group: new groups join by themselves',
        "      default: true",
        '      max_time: "2-00:00:00"',
        "",
        "# The Slurm Wrapper Suite: users ask `swrun -p gpux2` or `swbatch -p cpun1` and get the",
        "# partition, GPUs and their share of CPUs and memory worked out from the hardware.",
        "swsuite:",
        "  virtual_partitions:",
        *_virtual_partitions(s),
        "",
        "# Shared file systems. Here the management node serves /home over NFS to the login and",
        "# compute nodes (a login or compute node without a shared home is a warning): point it at your",
        "# file server, or describe Spectrum Scale instead (docs/cluster-yml.md, HAL's description).",
        "storage:",
        "  nfs:",
        f"    servers: [{{host: {mgmt1}, volumes: [/export]}}]",
        f'    exports: [{{name: home, server: {mgmt1}, path: /export/home, clients: "@login,@role:compute"}}]',
        '    mounts: [{export: home, mount_point: /home, clients: "@login,@role:compute"}]',
        "",
        "# ---- optional sections ---------------------------------------------------------------------",
        "",
    ]
    lines += _optional(s, mgmt1, gpus)
    return "\n".join(_aligned(line) for line in lines) + "\n"


_COMMENT = re.compile(r"^(.*?\S)\s{2,}(# .*)$")
COMMENT_COLUMN = 44


def _aligned(line: str) -> str:
    """A trailing comment at COMMENT_COLUMN (or two spaces after a longer line)."""
    match = _COMMENT.match(line)
    if not match or match.group(1) == "#":
        return line
    left, comment = match.groups()
    return f"{left.ljust(COMMENT_COLUMN - 2)}  {comment}"


def _block(title: str, brings: str, needs: str, body: list[str]) -> list[str]:
    return [f"# {title}", f"# Brings in: {brings}", f"# Needs: {needs}", *("# " + line for line in body), ""]


def _optional(s: Starter, mgmt1: str, gpus: bool) -> list[str]:
    compute = s.compute
    out: list[str] = []
    out += _block(
        "The InfiniBand fabric and its cabling.",
        "Slurm's topology.conf (jobs kept under few switches), the health check's port state and rate.",
        "the `ib` network above, and `ib_adapters` in the cabled hosts' profiles (uncomment them above).",
        [
            "fabric:",
            f"  name: {s.name}-ib",
            "  rate_gbps: 400",
            "  switches:",
            "    - {name: ib-leaf1, tier: leaf, ports: 64}",
            "  links:",
            f"    - {{hosts: {_scalar(compute)}, port: 1, switch: ib-leaf1, first_switch_port: 1}}",
        ],
    )
    out += _block(
        "Environment modules (Lmod).",
        "one modulefile per module under software.modulefiles_root, Lmod on login and compute nodes.",
        "nothing else; the software itself is installed by you under each module's prefix.",
        [
            "software:",
            "  prefix_root: /sw",
            "  modules:",
            '    - {name: cuda, version: "12.4", kind: library, description: NVIDIA CUDA toolkit,',
            '       paths: {PATH: [bin], LD_LIBRARY_PATH: [lib64]}, variables: {CUDA_HOME: "{prefix}"}}',
            '    - {name: jupyter, version: "1", kind: tool, description: the portal\'s session software,',
            "       roles: [login, compute]}",
        ],
    )
    out += _block(
        "Containers: Apptainer (or Singularity), with fakeroot.",
        "the runtime's configuration, GPU support, /etc/subuid and /etc/subgid for fakeroot users.",
        "nothing else.",
        [
            "containers:",
            "  runtime: apptainer",
            "  version: 1.3.4",
            "  roles: [login, compute]",
            f"  gpu: {'true' if gpus else 'false'}",
            "  fakeroot:",
            "    enabled: true",
            "    users: [{name: alice}]             # or groups: [{name: lab}], whose members get ranges",
            "    first_subid: 1000000",
            "    real_ids:",
            "      - {first: 0, last: 65535, description: local accounts}",
            "      - {first: 100000, last: 199999, description: directory accounts}",
        ],
    )
    out += _block(
        "Accounts: research groups and users in one LDAP directory.",
        "slapd on services.ldap, sssd on every node, Slurm accounts and associations.",
        "`ldap` under services (uncomment it above).",
        [
            "accounts:",
            "  id_range: {first: 100000, last: 199999}",
            "  groups:",
            "    - {name: lab, gid: 100100, slurm_account: lab}",
            "  users:",
            "    - {name: alice, uid: 100200, group: lab, full_name: Alice Example}",
        ],
    )
    out += _block(
        "The web portal: interactive apps (Jupyter, TensorBoard, ...) as Slurm jobs.",
        "JupyterHub with batchspawner (or Open OnDemand's files), on services.portal.",
        "`portal` under services, `accounts` (users log in with their directory password) and "
        "`software` (its jupyter module) uncommented.",
        [
            "portal:",
            "  user_environment: {module: jupyter/1}",
            "  apps:",
            "    - {name: jupyterlab, kind: jupyterlab, title: JupyterLab, modules: [jupyter],",
            f"       virtual_partitions: [{'gpux1' if gpus else 'cpun1'}]}}",
        ],
    )
    out += _block(
        "Monitoring: Telegraf on the nodes, InfluxDB, Grafana dashboards made from the model.",
        "telegraf.conf per node role, the database on services.monitoring_db, Grafana's provisioning.",
        "`monitoring_db` and `ldap` under services (uncomment them above): InfluxDB's HTTPS "
        "certificate comes from the cluster CA on the directory host (else `influxdb: {tls: false}`).",
        [
            "monitoring:",
            "  inputs:",
            "    compute: [cpu, mem, system, net" + (", nvidia_smi" if gpus else "") + "]",
            "    login: [cpu, mem, system, net, storage_responsiveness]",
            "    management: [cpu, mem, system, net, slurm]",
            f"  grafana: {{host: {mgmt1}, dashboards: [status, nodes]}}   # admin: add the bmc input",
        ],
    )
    out += _block(
        "Training recipes: ResNet-50 with PyTorch DDP, and the scaling benchmark.",
        "the recipe and its job script under recipes.prefix on login and compute nodes.",
        "GPUs, and a PyTorch module (`software`, as framework_module) on the compute nodes.",
        [
            "recipes:",
            f"  virtual_partition: {'gpux1' if gpus else 'cpun1'}",
            f"  scaling_partitions: [{'gpux1' if gpus else 'cpun1'}]",
        ],
    )
    out += _block(
        "Node health: slurmd runs a check that drains a node that differs from the model.",
        "HealthCheckProgram in slurm.conf, each compute group's expectations (CPUs, memory, GPUs, mounts).",
        "nothing else.",
        ["health:", "  interval_s: 300"],
    )
    out += _block(
        "Pull mode: the compute nodes converge themselves from a bundle the management node serves.",
        "deploy.json, the hal-converge service and timer on the compute nodes, the bundles' web site.",
        "`hal-provision bundle` and playbooks/publish.yml after each change (docs/admins-guide.md).",
        [
            "deploy:",
            "  mode: pull",
            "  herd_size: 500                         # compute nodes per distribution point at most",
            '  schedule: "*:0/30"                    # the nodes\' timer (systemd OnCalendar)',
        ],
    )
    out += _block(
        "Bare metal: node images the management node keeps and boots the nodes from (DHCP, iPXE, HTTP).",
        "dnsmasq, the iPXE scripts and the image store's web site on the boot server; `hal-provision image "
        "build`, `power`, `reimage`.",
        "in each node group that boots it: `image: compute`, `boot_macs` (discover prints them) and, for power "
        "and reimage, a `bmc` (protocol, credentials: {file: PATH}) with the `bmc` network above.",
        [
            "provisioning:",
            "  network: mgmt",
            f"  boot_server: {mgmt1}",
            "  images:",
            "    compute:",
            "      roles: [common, munge, slurm, fleet_node]   # their packages are in the image",
        ],
    )
    return out
