"""Bare metal: the network boot the boot server (provisioning.boot_server) gives the nodes whose
group names an `image`, and the same nodes for a site that boots them with Warewulf instead.

A node powers on; its NIC's PXE ROM asks DHCP. dnsmasq on the boot server answers the boot MACs
of the model only, on the provisioning network only: with the node's model address (dhcp static)
or with the boot only, the site's DHCP server giving the address (dhcp proxy). A PXE ROM gets
iPXE over TFTP (BIOS undionly.kpxe, UEFI x86-64 ipxe.efi); iPXE gets boot.ipxe over HTTP, which
chains the script of its MAC; that script boots the image version the model says (kernel,
live-boot's initramfs, the squashfs root fetched and held in memory), served by nginx straight
from the image store.

- ``files/etc/hal-provision/provisioning/dnsmasq.conf``: DHCP and TFTP, no DNS.
- ``files/srv/hal-provision/boot/ipxe/boot.ipxe`` and one ``<mac with hyphens>.ipxe`` per boot
  entry: the iPXE scripts, under the HTTP site's root.
- ``files/etc/nginx/sites-available/hal-provision-boot.conf``: the HTTP site, on the boot
  server's provisioning address and `http_port`, open to the provisioning network only, with its
  own access log.
- ``files/etc/hal-provision/provisioning/images.json``: each image's version (images/recipe.py's
  hash of what goes into it), its recipe and the hosts that boot it; the store; the booted node
  groups (update_policy.yml's hosts of a changed image).
- ``files/etc/warewulf/nodes.conf``: the same nodes as Warewulf 4.6 describes them.
- ``inventory/provisioning.yml``: the group provisioning_boot_servers.

Nothing is rendered without a provisioning section. The versions come from the roles' package
lists (images/recipe.py reads the roles' vars files of this tree), as `hal-provision image
build` computes them: a node boots the version the store holds under the same hash.
"""

from __future__ import annotations

import json
from ipaddress import IPv4Network

from ..hostlist import fold_hostlists
from ..images import recipe as recipes
from ..model import BootEntry, Cluster
from .common import GENERATOR, header, json_comment

DNSMASQ = "files/etc/hal-provision/provisioning/dnsmasq.conf"
IMAGES = "files/etc/hal-provision/provisioning/images.json"
NGINX_SITE = "files/etc/nginx/sites-available/hal-provision-boot.conf"
WAREWULF_NODES = "files/etc/warewulf/nodes.conf"
INVENTORY = "inventory/provisioning.yml"
BOOT_SERVERS_GROUP = "provisioning_boot_servers"

BOOT_ROOT = "/srv/hal-provision/boot"
"""The HTTP site's root on the boot server; the rendered files/srv/hal-provision/boot/ go there."""
IPXE_DIR = "ipxe"
TFTP_ROOT = "/srv/hal-provision/tftp"
"""Where the boot_server role puts the iPXE binaries dnsmasq's TFTP hands the PXE ROMs."""
BIOS_IPXE = "undionly.kpxe"
EFI_IPXE = "ipxe.efi"
# RFC 4578 client architectures of x86-64 UEFI: 7 and 9 (firmware sends either); 0 is BIOS.
EFI64_ARCHES = (7, 9)
# dnsmasq's --pxe-service names of the same architectures (its table, dnsmasq 2.86 and later).
PXE_CSA = {"x86PC": BIOS_IPXE, "x86-64_EFI": EFI_IPXE, "BC_EFI": EFI_IPXE}
ACCESS_LOG = "/var/log/nginx/hal-provision-boot.access.log"
"""The boot site's own access log (nginx's combined format): bytes served per node address."""
RETRY_S = 30
"""How long a node that cannot boot shows why before iPXE gives the boot back to the firmware."""
WAREWULF_SCHEMA = "4.6"


def render(cluster: Cluster) -> dict[str, str]:
    if cluster.provisioning is None:
        return {}
    versions = image_versions(cluster)
    entries = cluster.boot_entries()
    files = {
        DNSMASQ: dnsmasq_conf(cluster, entries),
        ipxe_path("boot.ipxe"): boot_script(cluster),
        NGINX_SITE: nginx_site(cluster),
        IMAGES: images_json(cluster, versions),
        WAREWULF_NODES: warewulf_nodes(cluster, entries),
        **inventory_files(cluster),
    }
    for entry in entries:
        files[ipxe_path(node_script_name(entry.mac))] = node_script(cluster, entry, versions[entry.image][0])
    return files


def inventory_files(cluster: Cluster) -> dict[str, str]:
    """The inventory file of the network boot ({} without provisioning), for inventory/source.py too."""
    if cluster.provisioning is None:
        return {}
    return {
        INVENTORY: header(cluster)
        + f"all:\n  children:\n    {BOOT_SERVERS_GROUP}:\n      hosts:\n        {cluster.provisioning.boot_server}:\n"
    }


def ipxe_path(name: str) -> str:
    return f"files{BOOT_ROOT}/{IPXE_DIR}/{name}"


def node_script_name(mac: str) -> str:
    """A boot MAC's script, named as iPXE's ${netX/mac:hexhyp} spells the MAC."""
    return mac.replace(":", "-") + ".ipxe"


def image_versions(cluster: Cluster) -> dict[str, tuple[str, dict]]:
    """Each image's (version, recipe), computed once per render."""
    out = {}
    for name in cluster.provisioning.images:
        data = recipes.of_model(cluster.provisioning, name)
        out[name] = (recipes.version(data), data)
    return out


def server_address(cluster: Cluster) -> str:
    """The boot server's address on the provisioning network (a check makes sure it has one)."""
    prov = cluster.provisioning
    return cluster.address_on(prov.boot_server, prov.network)


def base_url(cluster: Cluster) -> str:
    return f"http://{server_address(cluster)}:{cluster.provisioning.http_port}"


def network(cluster: Cluster) -> IPv4Network:
    return cluster.networks[cluster.provisioning.network].cidr


# ---- dnsmasq ----------------------------------------------------------------------------------


def dnsmasq_conf(cluster: Cluster, entries: list[BootEntry]) -> str:
    prov, net, server = cluster.provisioning, network(cluster), server_address(cluster)
    pxe = ""
    if prov.dhcp == "static":
        mode = f"""\
# dhcp static: each boot MAC gets its node's model address and name; no address pool, so no other
# machine gets an address here.
dhcp-range={net.network_address},static,{net.netmask}
"""
        hosts = "".join(
            f"dhcp-host={e.mac},{e.address},{e.host}\n"
            if e.address is not None
            else f"# {e.host}: no address on {prov.network}\n"
            for e in entries
        )
        router = (
            f"# The nodes' default route (provisioning.gateway).\ndhcp-option=option:router,{prov.gateway}\n"
            if prov.gateway is not None
            else "# No default route handed out (provisioning.gateway unset; dnsmasq would name itself).\n"
            "dhcp-option=option:router\n"
        )
        dns = (
            f"# The nodes' name servers (provisioning.dns_servers).\n"
            f"dhcp-option=option:dns-server,{','.join(str(a) for a in prov.dns_servers)}\n"
            if prov.dns_servers
            else ""
        )
        mode += router + dns
    else:
        mode = f"""\
# dhcp proxy: the site's DHCP server gives the addresses; this server adds only the boot
# (proxy-DHCP), to the boot MACs below.
dhcp-range={net.network_address},proxy,{net.netmask}
"""
        hosts = "".join(f"dhcp-host={e.mac},{e.host}\n" for e in entries)
        services = "".join(
            f'pxe-service=tag:!ipxe,{csa},"iPXE ({GENERATOR})",{binary}\n' for csa, binary in PXE_CSA.items()
        )
        pxe = f"""
# Proxy-DHCP answers a PXE ROM only with a boot service (dnsmasq answers no PXE client in proxy
# mode without one): one per architecture, the iPXE binary over TFTP from this server. iPXE
# itself matches none of them and takes its dhcp-boot file above.
{services}"""
    chain = f"{prov.boot_server},{server}"
    arches = "".join(f"dhcp-match=set:efi64,option:client-arch,{arch}\n" for arch in EFI64_ARCHES)
    return (
        header(cluster)
        + f"""\
# The network boot of cluster '{cluster.cluster.name}' on {prov.network} ({net}): DHCP and TFTP for the
# nodes whose group names an image, nothing else.

# No DNS: the cluster's names come from /etc/hosts.
port=0
# Only on the boot server's address on {prov.network}, not on every interface; bind-dynamic follows
# an interface that comes up after dnsmasq.
listen-address={server}
bind-dynamic

{mode}
# The boot MACs of the model (node groups' boot_macs). A dhcp-host line makes its MAC known;
# every other machine is ignored, so a site's other hosts on this network are never answered.
{hosts}dhcp-ignore=tag:!known

# iPXE says so in its user class; a PXE ROM's architecture (RFC 4578 option 93) picks the iPXE
# binary it chain-loads over TFTP: BIOS undionly.kpxe, x86-64 UEFI ipxe.efi.
dhcp-userclass=set:ipxe,iPXE
{arches}dhcp-boot=tag:!ipxe,tag:!efi64,{BIOS_IPXE},{chain}
dhcp-boot=tag:!ipxe,tag:efi64,{EFI_IPXE},{chain}
# iPXE fetches the first script over HTTP; it chains the script of the node's MAC.
dhcp-boot=tag:ipxe,{base_url(cluster)}/{IPXE_DIR}/boot.ipxe
{pxe}
enable-tftp
tftp-root={TFTP_ROOT}

# Every request and answer in the log, with the tags that chose it.
log-dhcp
"""
    )


# ---- iPXE -------------------------------------------------------------------------------------


def boot_script(cluster: Cluster) -> str:
    url = f"{base_url(cluster)}/{IPXE_DIR}/${{netX/mac:hexhyp}}.ipxe"
    return (
        "#!ipxe\n"
        + header(cluster)
        + f"""\
# Every node's first script. netX is the interface iPXE booted from (net0 is only the first NIC).
# A MAC the model does not name has no script (404): the node says so, waits, and gives the boot
# back to its firmware rather than trying forever.
chain --autofree {url} || goto failed

:failed
echo hal-provision: no boot for ${{netX/mac}} from {url}
echo hal-provision: a MAC the model does not name (a node group's boot_macs), or its image could not be loaded
sleep {RETRY_S}
exit 1
"""
    )


def kernel_args(cluster: Cluster, entry: BootEntry, version: str) -> list[str]:
    """The node's kernel command line: live-boot fetches the squashfs root over HTTP and holds it
    in memory; BOOTIF names the interface it booted from, so the initramfs configures that one;
    the image's own arguments last."""
    images = f"{base_url(cluster)}/images/{entry.image}/{version}"
    return [
        "initrd=initrd.img",
        "boot=live",
        f"fetch={images}/root.squashfs",
        f"BOOTIF=01-{entry.mac.replace(':', '-')}",
        f"hostname={entry.host}",
        f"hal.image={entry.image}@{version}",
        *cluster.provisioning.images[entry.image].kernel_args,
    ]


def node_script(cluster: Cluster, entry: BootEntry, version: str) -> str:
    images = f"{base_url(cluster)}/images/{entry.image}/{version}"
    return (
        "#!ipxe\n"
        + header(cluster)
        + f"""\
# {entry.host} (node group {entry.group}): image {entry.image}, version {version}.
kernel {images}/vmlinuz {" ".join(kernel_args(cluster, entry, version))} || goto failed
initrd {images}/initrd.img || goto failed
boot || goto failed

:failed
echo hal-provision: {entry.host} cannot boot {entry.image}@{version} from {images}/
echo hal-provision: is that version in the image store? (hal-provision image build)
exit 1
"""
    )


# ---- nginx ------------------------------------------------------------------------------------


def nginx_site(cluster: Cluster) -> str:
    prov = cluster.provisioning
    store = prov.image_store.rstrip("/")
    return (
        header(cluster)
        + f"""\
# The network boot's HTTP site: the iPXE scripts and the image store, read-only, on the boot
# server's address on {prov.network} only and open to that network only; anyone else gets 403.
# Its own access log (combined format): what each node fetched, and how many bytes.
server {{
    listen {server_address(cluster)}:{prov.http_port};
    server_name _;
    root {BOOT_ROOT};
    autoindex off;
    access_log {ACCESS_LOG} combined;
    allow {network(cluster)};
    deny all;
    # Read-only: GET (and HEAD) only, in each location (nginx takes limit_except nowhere else).
    # A node's script changes with its image's version: never cached.
    location /{IPXE_DIR}/ {{
        limit_except GET {{
            deny all;
        }}
        add_header Cache-Control "no-store" always;
        try_files $uri =404;
    }}
    # The store itself (<image>/<version>/vmlinuz, initrd.img, root.squashfs): a version is
    # complete before it appears there, and never changes afterwards.
    location /images/ {{
        limit_except GET {{
            deny all;
        }}
        alias {store}/;
    }}
    location / {{
        return 404;
    }}
}}
"""
    )


# ---- images.json ------------------------------------------------------------------------------


def images_json(cluster: Cluster, versions: dict[str, tuple[str, dict]]) -> str:
    prov = cluster.provisioning
    images = {}
    for name in prov.images:
        version, data = versions[name]
        groups = [g for g in cluster.booted_groups if g.image == name]
        images[name] = {
            "version": version,
            "recipe": data,
            "hosts": fold_hostlists(g.hosts for g in groups) if groups else "",
        }
    doc = {
        "_comment": json_comment(cluster),
        "store": prov.image_store,
        "images": images,
        "groups": [g.name for g in cluster.booted_groups],
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# ---- Warewulf ---------------------------------------------------------------------------------


def _y(value) -> str:
    return json.dumps(value)


def warewulf_nodes(cluster: Cluster, entries: list[BootEntry]) -> str:
    net = network(cluster)
    out = [
        header(cluster),
        f"""\
# The network-booted nodes for a site that boots them with Warewulf instead of hal-provision's
# boot server: Warewulf {WAREWULF_SCHEMA}'s nodes.conf (the keys of its internal/pkg/node/datastructure.go
# at v4.6.5: NodesYaml, Profile, NetDev, IpmiConf, KernelConf). One profile per node group that
# boots an image, one node per boot MAC. Every node also names Warewulf's own `default` profile
# (overlays, init, root, iPXE template), which is not written here: merge these profiles and
# nodes into the server's /etc/warewulf/nodes.conf beside it, then `wwctl configure --all`.
# The image names are this model's; Warewulf boots its own image of that name (`wwctl image`).
# No BMC credentials, ever: ipmi username and password are set in Warewulf itself
# (`wwctl profile set --ipmiuser --ipmipass`). Warewulf drives BMCs through ipmitool only
# (lib/warewulf/bmc/ipmitool.tmpl): a group whose BMCs speak Redfish gets no ipmi section.
""",
    ]
    booted = [g for g in cluster.booted_groups if any(e.group == g.name for e in entries)]
    out.append("nodeprofiles:\n" if booted else "nodeprofiles: {}\n")
    for group in booted:
        out.extend(_warewulf_profile(cluster, group))
    out.append("nodes:\n" if entries else "nodes: {}\n")
    for entry in entries:
        out.append(f"  {_y(entry.host)}:\n")
        out.append(f"    profiles:\n      - {_y('default')}\n      - {_y(entry.group)}\n")
        out.append("    network devices:\n      default:\n")
        out.append(f"        hwaddr: {_y(entry.mac)}\n")
        if entry.address is not None:
            out.append(f"        ipaddr: {_y(entry.address)}\n")
            out.append(f"        netmask: {_y(str(net.netmask))}\n")
        target = cluster.bmc_of(entry.host)
        if target is not None and target.protocol == "ipmi":
            out.append(f"    ipmi:\n      ipaddr: {_y(target.address)}\n")
    return "".join(out)


def _warewulf_profile(cluster: Cluster, group) -> list[str]:
    """A booted node group as a Warewulf profile: the image, its kernel arguments, and for IPMI
    BMCs the interface (lanplus: IPMI 2.0, as `hal-provision power` speaks it) and netmask."""
    image = cluster.provisioning.images[group.image]
    out = [
        f"  {_y(group.name)}:\n",
        f"    comment: {_y(f'hal-provision node group {group.name} (image {group.image})')}\n",
        f"    image name: {_y(group.image)}\n",
    ]
    if image.kernel_args:
        out.append("    kernel:\n      args:\n")
        out.extend(f"        - {_y(arg)}\n" for arg in image.kernel_args)
    bmc_net = cluster.bmc_network(group) if group.bmc is not None and group.bmc.protocol == "ipmi" else None
    if bmc_net is not None:
        out.append("    ipmi:\n")
        out.append(f"      interface: {_y('lanplus')}\n")
        out.append(f"      netmask: {_y(str(cluster.networks[bmc_net].cidr.netmask))}\n")
    return out
