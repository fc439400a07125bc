"""/etc/hosts for every node: each host on each of its networks."""

from __future__ import annotations

from ..model import Cluster
from .common import group_hosts_with_addresses, header

PATH = "files/etc/hosts"


def render(cluster: Cluster) -> dict[str, str]:
    domain = cluster.cluster.domain
    primary = cluster.cluster.primary_network
    suffix = {name: ("" if name == primary else net.host_suffix or f"-{name}") for name, net in cluster.networks.items()}
    lines = [
        header(cluster),
        "127.0.0.1\tlocalhost\n",
        "::1\tlocalhost ip6-localhost ip6-loopback\n",
    ]
    for group in cluster.nodes:
        lines.append(f"\n# {group.name} ({group.role.value}): {group.hosts}\n")
        for host, addresses in group_hosts_with_addresses(cluster, group):
            for net, addr in addresses.items():
                name = host + suffix[net]
                lines.append(f"{addr}\t{name}.{domain} {name}\n")
    return {PATH: "".join(lines)}
