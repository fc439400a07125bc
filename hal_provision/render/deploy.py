"""Deploy in pull mode: what the compute nodes need to converge themselves and what
the distribution points need to serve them the bundle.

- ``files/etc/hal-provision/deploy.json`` (every host; pure data): the mode, the points (host,
  address on the primary network, URL, the nodes each serves), each pull node's URL, the port,
  drain_wait_s, where a point keeps its bundles and where a node writes its result. Read by
  hal-converge on the nodes (hal_provision/node/converge.py) and by `hal-provision fleet` and
  playbooks/publish.yml on the controller; no "_comment" key, as backup.json: it is a contract.
- ``files/etc/systemd/system/hal-converge.service`` and ``hal-converge.timer``: one run of
  hal-converge, at boot and on deploy.schedule.
- ``files/etc/nginx/sites-available/hal-bundles/<point host>.conf``: each point's read-only
  HTTP server of the bundle root, on the point's primary address only and open to the pull nodes
  it serves only; current.json is never cached. The bundle_server role installs its own host's
  as hal-bundles.conf.
- ``inventory/deploy.yml``: the groups deploy_pull (the pull nodes) and deploy_points.

Nothing is rendered in push mode (the default): a push cluster's tree stays as it was.
"""

from __future__ import annotations

import json

from ..model import Cluster, DeployPoint
from .common import group_addresses, header

CONFIG = "files/etc/hal-provision/deploy.json"
SERVICE = "files/etc/systemd/system/hal-converge.service"
TIMER = "files/etc/systemd/system/hal-converge.timer"
NGINX_SITES = "files/etc/nginx/sites-available/hal-bundles"
"""One site per distribution point, named after its host (nginx_site_path)."""
INVENTORY = "inventory/deploy.yml"
PULL_GROUP = "deploy_pull"
POINTS_GROUP = "deploy_points"

PROGRAM = "/usr/local/sbin/hal-converge"
VERSION_FILE = "/var/lib/hal-provision/converge/last.json"
BUNDLE_ROOT = "/srv/hal-provision/bundles"
CURRENT = "current.json"
RELEASE_KEY = "/etc/hal-provision/release.pub"


def render(cluster: Cluster) -> dict[str, str]:
    if not cluster.deploy_pull:
        return {}
    return {
        CONFIG: config_json(cluster),
        SERVICE: service_unit(cluster),
        TIMER: timer_unit(cluster),
        **nginx_sites(cluster),
        **inventory_files(cluster),
    }


def inventory_files(cluster: Cluster) -> dict[str, str]:
    """The inventory file of pull mode ({} in push mode), for inventory/source.py too."""
    return {INVENTORY: inventory(cluster)} if cluster.deploy_pull else {}


def point_url(cluster: Cluster, host: str) -> str:
    return f"http://{cluster.host_address(host)}:{cluster.deploy.port}/"


def served_nodes(cluster: Cluster, point: DeployPoint) -> list[str]:
    """The pull nodes `point` serves, in hostlist order: what deploy.json gives each and what
    its site lets in."""
    pulling = cluster.deploy_pull_nodes
    return [host for host in point.serves if host in pulling]


def config_json(cluster: Cluster) -> str:
    points, nodes = [], {}
    for point in cluster.deploy_points:
        url = point_url(cluster, point.host)
        served = served_nodes(cluster, point)
        points.append({"host": point.host, "address": cluster.host_address(point.host), "url": url, "serves": served})
        nodes.update(dict.fromkeys(served, url))
    body = {
        "mode": cluster.deploy.mode,
        "cluster": cluster.cluster.name,
        # The public half of the controller's release key (hal_provision/release.py), installed
        # by the fleet_node role: hal-converge takes only releases it verifies.
        "release_key": RELEASE_KEY,
        "version_file": VERSION_FILE,
        "port": cluster.deploy.port,
        "drain_wait_s": cluster.deploy.drain_wait_s,
        "points": points,
        "nodes": nodes,
        "bundle_root": BUNDLE_ROOT,
    }
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def service_unit(cluster: Cluster) -> str:
    return (
        header(cluster)
        + f"""\
# One converge of this node from its distribution point's current bundle (deploy.json);
# started by hal-converge.timer, or now by `hal-provision fleet converge`.
[Unit]
Description=hal-provision pull converge of this node
Documentation=file:/etc/hal-provision/deploy.json
Wants=network-online.target
After=network-online.target munge.service slurmd.service

[Service]
Type=oneshot
ExecStart={PROGRAM}
# A failed run drains the node with the reason and waits for the next one: no restart loop.
Restart=no
TimeoutStartSec={cluster.deploy.drain_wait_s + 3600}
"""
    )


def timer_unit(cluster: Cluster) -> str:
    d = cluster.deploy
    return (
        header(cluster)
        + f"""\
[Unit]
Description=hal-provision pull converge of this node ({d.schedule})

[Timer]
# At boot (a node that was down catches up), then on the schedule.
OnBootSec={d.boot_delay_s}s
OnCalendar={d.schedule}
# The nodes of a herd do not all fetch at once.
RandomizedDelaySec={d.randomized_delay_s}
Persistent=true

[Install]
WantedBy=timers.target
"""
    )


def nginx_site_path(host: str) -> str:
    """The rendered site of the distribution point on `host`."""
    return f"{NGINX_SITES}/{host}.conf"


def nginx_sites(cluster: Cluster) -> dict[str, str]:
    """Each point's site, open to the pull nodes it serves (all of its entries', should a host
    be named twice)."""
    served: dict[str, list[str]] = {}
    for point in cluster.deploy_points:
        served.setdefault(point.host, []).extend(served_nodes(cluster, point))
    addresses = primary_addresses(cluster)
    return {
        nginx_site_path(host): nginx_site(cluster, addresses[host], [addresses[n] for n in nodes])
        for host, nodes in served.items()
    }


def primary_addresses(cluster: Cluster) -> dict[str, str]:
    """Every host's address on the primary network (cluster.host_address of each, computed once
    per group rather than once per host)."""
    primary, out = cluster.cluster.primary_network, {}
    for group in cluster.nodes:
        hosts, columns = group_addresses(cluster, group)
        if primary in columns:
            out.update(zip(hosts, columns[primary]))
    return out


def nginx_site(cluster: Cluster, address: str, clients: list[str]) -> str:
    allow = "".join(f"    allow {client};\n" for client in clients)
    return (
        header(cluster)
        + f"""\
# The bundles of this distribution point, read-only. A bundle is the whole rendered tree and
# inventory of the cluster, which no one outside it has to read: the site listens on the point's
# address on the cluster's primary network only, not on every interface, and lets in only the
# pull nodes this point serves (deploy.json's "serves"); anyone else gets 403.
server {{
    listen {address}:{cluster.deploy.port};
    server_name _;
    root {BUNDLE_ROOT};
    autoindex off;
{allow}    deny all;
    # Read-only: GET (and HEAD) only, in each location (nginx takes limit_except nowhere else).
    # Replaced last on every publish: a node must never read a stale one.
    location = /{CURRENT} {{
        limit_except GET {{
            deny all;
        }}
        add_header Cache-Control "no-store" always;
        expires off;
        etag off;
        if_modified_since off;
    }}
    location / {{
        limit_except GET {{
            deny all;
        }}
        try_files $uri =404;
    }}
}}
"""
    )


def inventory(cluster: Cluster) -> str:
    out = [header(cluster), "all:\n", "  children:\n"]
    for group, hosts in (
        (PULL_GROUP, list(cluster.deploy_pull_nodes)),
        (POINTS_GROUP, list(dict.fromkeys(p.host for p in cluster.deploy_points))),
    ):
        out.append(f"    {group}:\n      hosts:\n")
        out.extend(f"        {host}:\n" for host in hosts)
    return "".join(out)
