"""Checks: provisioning (bare metal): the boot network and server, each booted group's image,
boot MACs and addresses, and the BMCs (their network, the endpoint's address in it).

Credentials written into the model are refused earlier, by the model itself (a `password`
under a BMC or under provisioning is a schema error naming where credentials belong)."""

from __future__ import annotations

from ipaddress import IPv4Address

from ..findings import error
from ..hostlist import empty, expand, nodeset, outside
from ..model import Cluster, Role
from . import check
from .common import did_you_mean, nearest_host, shown

PROV = ("provisioning",)
# iPXE and the image's kernel (linux-image-amd64) are built for x86-64 machines; an OpenPOWER
# node boots through petitboot, which reads a pxelinux-style file this tool does not serve.
BOOTABLE_ARCHITECTURES = ("x86_64",)


def _node_path(c: Cluster, group_name: str, *rest) -> tuple:
    index = next(i for i, g in enumerate(c.nodes) if g.name == group_name)
    return ("nodes", index, *rest)


@check
def provisioning_network_and_boot_server(c: Cluster):
    """The boot network is an ethernet network of the model; the boot server is a management
    host with an address on it (dnsmasq and nginx listen there)."""
    p = c.provisioning
    if p is None:
        return
    net = c.networks.get(p.network)
    if net is None:
        yield error(
            (*PROV, "network"), f"{p.network!r} is not a network of the model" + did_you_mean(p.network, c.networks)
        )
    elif net.kind != "ethernet":
        yield error((*PROV, "network"), f"{p.network} is a {net.kind} network: nodes boot over an ethernet network")
    if net is not None and p.gateway is not None and p.gateway not in net.cidr:
        yield error((*PROV, "gateway"), f"the gateway {p.gateway} is outside {p.network} ({net.cidr})")
    group = c.group_of(p.boot_server)
    if group is None:
        yield error(
            (*PROV, "boot_server"),
            f"{p.boot_server!r} is not a host of the model" + nearest_host(c, nodeset(p.boot_server)),
        )
    elif not group.has(Role.management):
        yield error(
            (*PROV, "boot_server"),
            f"{p.boot_server} is a {group.role.value} node: the boot server is a management host (it keeps the "
            "images and answers the nodes' DHCP)",
        )
    elif net is not None and c.address_on(p.boot_server, p.network) is None:
        yield error(
            (*PROV, "boot_server"),
            f"{p.boot_server} has no address on {p.network} (its group's `addresses`): the nodes reach the boot "
            "server there",
        )


@check
def provisioning_groups_name_defined_images(c: Cluster):
    """A group's `image` is one of provisioning.images (and needs a provisioning section); its
    nodes are x86-64 machines (iPXE and the image's kernel)."""
    images = c.provisioning.images if c.provisioning is not None else {}
    for i, group in enumerate(c.nodes):
        if group.image is None:
            continue
        if c.provisioning is None:
            yield error(
                ("nodes", i, "image"),
                f"node group {group.name!r} boots image {group.image!r}, but the model has no `provisioning` "
                "section (the images and the boot server)",
            )
        elif group.image not in images:
            yield error(
                ("nodes", i, "image"),
                f"{group.image!r} is not an image under provisioning.images" + did_you_mean(group.image, images),
            )
        profile = c.profile_of(group)
        if profile is not None and profile.architecture not in BOOTABLE_ARCHITECTURES:
            yield error(
                ("nodes", i, "image"),
                f"{group.name} nodes are {profile.architecture} machines: network boot serves x86-64 nodes "
                "(iPXE, linux-image-amd64); OpenPOWER nodes boot through petitboot, which is not served",
            )


@check
def provisioning_boot_macs_name_the_groups_hosts(c: Cluster):
    """`boot_macs` names hosts of its own group; every host of a booted group has one (the
    boot server answers known MACs only)."""
    for i, group in enumerate(c.nodes):
        hosts = nodeset(group.hosts)
        named = nodeset(",".join(group.boot_macs)) if group.boot_macs else empty()
        strangers = outside(named, hosts)
        if len(strangers):
            yield error(
                ("nodes", i, "boot_macs"),
                f"{shown(strangers)} {'is not a host' if len(strangers) == 1 else 'are not hosts'} of group "
                f"{group.name} ({group.hosts})",
            )
        if group.image is not None and c.provisioning is not None:
            missing = outside(hosts, named)
            if len(missing):
                yield error(
                    ("nodes", i, "boot_macs"),
                    f"{shown(missing)} {'boots' if len(missing) == 1 else 'boot'} image {group.image} but "
                    f"{'has' if len(missing) == 1 else 'have'} no boot MAC: the boot server answers known MACs only "
                    "(take them from `hal-provision discover` or the vendor's sheet)",
                )


@check
def provisioning_boot_macs_unique(c: Cluster):
    """No MAC is written twice: two hosts answering one MAC would boot each other's image."""
    seen: dict[str, tuple[str, str]] = {}
    for i, group in enumerate(c.nodes):
        for host, mac in group.boot_macs.items():
            if mac in seen:
                other_group, other_host = seen[mac]
                yield error(
                    ("nodes", i, "boot_macs", host),
                    f"MAC {mac} is also {other_host}'s (group {other_group}): each boot MAC belongs to one host",
                )
            else:
                seen[mac] = (group.name, host)


@check
def provisioning_static_leases_have_addresses(c: Cluster):
    """With dhcp: static the boot server hands each booted host its model address on the boot
    network: its group must have one there."""
    p = c.provisioning
    if p is None or p.dhcp != "static" or p.network not in c.networks:
        return
    for i, group in enumerate(c.nodes):
        if group.image is not None and p.network not in group.addresses:
            yield error(
                ("nodes", i, "addresses"),
                f"{group.name} boots from the network with static leases (provisioning.dhcp: static) but has no "
                f"address on {p.network}: give addresses.{p.network}, or dhcp: proxy beside the site's DHCP",
            )


@check
def bmc_network_and_endpoint(c: Cluster):
    """A group's BMCs answer on a network of kind bmc (the one the model has, or the one named);
    each node has an address there, or one `endpoint` inside it answers for all."""
    for i, group in enumerate(c.nodes):
        bmc = group.bmc
        if bmc is None:
            continue
        path = ("nodes", i, "bmc")
        bmc_networks = [name for name, n in c.networks.items() if n.kind == "bmc"]
        if bmc.network is not None:
            net = c.networks.get(bmc.network)
            if net is None:
                yield error(
                    (*path, "network"),
                    f"{bmc.network!r} is not a network of the model" + did_you_mean(bmc.network, c.networks),
                )
                continue
            if net.kind != "bmc":
                yield error((*path, "network"), f"{bmc.network} is a {net.kind} network, not a network of kind bmc")
                continue
            network = bmc.network
        elif len(bmc_networks) != 1:
            yield error(
                path,
                "name the BMC network (bmc.network): the model has "
                + (f"{len(bmc_networks)} networks of kind bmc" if bmc_networks else "no network of kind bmc"),
            )
            continue
        else:
            network = bmc_networks[0]
        cidr = c.networks[network].cidr
        if bmc.endpoint is not None:
            host = bmc.endpoint.split("://", 1)[1].split("/", 1)[0].split(":", 1)[0]
            if IPv4Address(host) not in cidr:
                yield error(
                    (*path, "endpoint"),
                    f"the BMC endpoint {host} is outside its network {network} ({cidr})",
                )
        elif network not in group.addresses:
            yield error(
                path,
                f"{group.name}'s BMCs answer at each node's address on {network}, and the group has none there "
                f"(addresses.{network}), nor a bmc.endpoint",
            )


@check
def bmc_protocol_fits_the_endpoint(c: Cluster):
    """One `endpoint` for many nodes is a Redfish service (each node a system of it); IPMI
    answers for one machine per address."""
    for i, group in enumerate(c.nodes):
        bmc = group.bmc
        if bmc is not None and bmc.protocol == "ipmi" and bmc.endpoint is not None:
            yield error(
                ("nodes", i, "bmc", "endpoint"),
                "an endpoint serves many nodes over Redfish only: IPMI answers for one machine per address "
                "(leave `endpoint` out, give the nodes addresses on the BMC network)",
            )
        if bmc is not None and bmc.endpoint is not None and (bmc.system is None or "{host}" not in bmc.system):
            if len(expand(group.hosts)) > 1:
                yield error(
                    ("nodes", i, "bmc", "system"),
                    "behind one endpoint each node is its own Redfish system: name it with {host} "
                    '(e.g. system: "{host}")',
                )
