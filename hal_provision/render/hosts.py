"""/etc/hosts for every node: each host on each of its networks."""

from __future__ import annotations

from itertools import chain

from ..model import Cluster
from .common import group_addresses, header

PATH = "files/etc/hosts"


def render(cluster: Cluster) -> dict[str, str]:
    domain = cluster.cluster.domain
    primary = cluster.cluster.primary_network
    suffix = {
        name: ("" if name == primary else net.host_suffix or f"-{name}") for name, net in cluster.networks.items()
    }
    lines = [
        header(cluster),
        "127.0.0.1\tlocalhost\n",
        "::1\tlocalhost ip6-localhost ip6-loopback\n",
    ]
    for group in cluster.nodes:
        lines.append(f"\n# {group.name} ({group.role.value}): {group.hosts}\n")
        hosts, columns = group_addresses(cluster, group)
        # One column of lines per network, then interleaved: each host's networks together.
        per_network = [
            [f"{addr}\t{host}{tail}.{domain} {host}{tail}\n" for host, addr in zip(hosts, addrs)]
            for tail, addrs in ((suffix[net], addrs) for net, addrs in columns.items())
        ]
        lines.append("".join(chain.from_iterable(zip(*per_network))))
    return {PATH: "".join(lines)}
