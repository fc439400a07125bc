"""The pull-mode fleet as the controller sees it (`hal-provision fleet`): pure functions, no I/O.

Inputs are what the CLI fetched: the rendered deploy.json, each distribution point's
current.json (the published version), each pull node's last.json (the result hal-converge
wrote, or nothing) and the inventory's SSH settings. Outputs: one result per node with its
drift, the results folded into rows (version x state x drift -> a hostlist), and the
ssh_config the fan-out passes to ssh with -F.

Drift is anything short of "this node converged successfully to the version its point
publishes", in the order it is decided:
  unreachable          the node did not answer over SSH
  never-ran            no last.json: hal-converge never finished a run there
  unreadable           last.json is not hal-converge's JSON
  failed               the last run failed (the node drained itself)
  refused              the last run refused the published release (unsigned, signed with
                       another key, another cluster's, expired, or a rollback): nothing changed
  waiting              the last run drained the node and is waiting for its jobs
  unreachable-source   the last run could not read its point's current.json
  unpublished          the node's point did not give its current.json to the controller
  behind               the node's version is not the published one
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field

from ..hostlist import fold
from ..node.converge import STATES, SUCCESSFUL

DEPLOY_JSON = "etc/hal-provision/deploy.json"  # in the rendered files tree
UNIT = "hal-converge.service"
# The order drift is decided and reported in; the states of an unsuccessful run (hal-converge's
# STATES but its SUCCESSFUL ones) are drifts of their own name.
DRIFTS = (
    "unreachable",
    "never-ran",
    "unreadable",
    "failed",
    "refused",
    "waiting",
    "unreachable-source",
    "unpublished",
    "behind",
)


class FleetError(ValueError):
    """Rendered data or an inventory the fleet commands cannot use; the message names the field."""


@dataclass(frozen=True)
class Point:
    host: str
    url: str
    serves: tuple[str, ...]


@dataclass(frozen=True)
class Deploy:
    """What `fleet` reads of deploy.json."""

    mode: str
    version_file: str
    points: tuple[Point, ...]
    nodes: dict[str, str]  # pull node -> its point's URL
    cluster: str = ""
    bundle_root: str = ""  # where each point keeps the bundles and current.json


def parse_deploy(text: str, where: str = "deploy.json") -> Deploy:
    """deploy.json of a pull cluster; FleetError naming the field otherwise (deploy.mode for push)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FleetError(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise FleetError(f"{where}: not a JSON object")
    mode = data.get("mode", "push")
    if mode != "pull":
        raise FleetError(
            f"{where}: deploy.mode is {mode!r}: `fleet` reads pull-mode nodes; "
            "set deploy.mode: pull in cluster.yml and render"
        )
    try:
        points = tuple(Point(p["host"], p["url"], tuple(p.get("serves", ()))) for p in data["points"])
        nodes = {str(host): str(url) for host, url in data["nodes"].items()}
        version_file = str(data["version_file"])
        cluster, bundle_root = str(data["cluster"]), str(data["bundle_root"])
    except (KeyError, TypeError, AttributeError) as exc:
        raise FleetError(f"{where}: missing or malformed field {exc}") from None
    urls = {p.url for p in points}
    for host, url in sorted(nodes.items()):
        if url not in urls:
            raise FleetError(f"{where}: nodes.{host}: {url} is no point's url")
    return Deploy(mode, version_file, points, nodes, cluster, bundle_root)


def published_version(text: str | None) -> str | None:
    """The version a current.json (a signed release's envelope) publishes; None when there is
    none to read. Unverified: the point's row says whether the signature verifies."""
    from ..release import open_envelope

    data = open_envelope(text) if text is not None else None
    version = data.get("version") if isinstance(data, dict) else None
    return version if isinstance(version, str) and version else None


@dataclass(frozen=True)
class NodeResult:
    host: str
    version: str  # '?' unknown (unreachable, unreadable), '-' none (never ran)
    state: str  # hal-converge's state, or unreachable / never-ran / unreadable
    published: str | None
    drift: str | None  # one of DRIFTS; None: current
    last: dict | None = field(default=None, compare=False)


def classify(host: str, last_text: str | None, published: str | None) -> NodeResult:
    """One node's result from its last.json (None: unreachable; '': none) and its point's version."""
    if last_text is None:
        return NodeResult(host, "?", "unreachable", published, "unreachable")
    if not last_text.strip():
        return NodeResult(host, "-", "never-ran", published, "never-ran")
    try:
        last = json.loads(last_text)
    except json.JSONDecodeError:
        last = None
    if not isinstance(last, dict) or not isinstance(last.get("state"), str):
        return NodeResult(host, "?", "unreadable", published, "unreadable")
    version, state = str(last.get("version") or "-"), last["state"]
    if state not in STATES:
        drift = "unreadable"
    elif state not in SUCCESSFUL:
        drift = state
    elif published is None:
        drift = "unpublished"
    elif version != published:
        drift = "behind"
    else:
        drift = None
    return NodeResult(host, version, state, published, drift, last)


@dataclass(frozen=True)
class Row:
    version: str
    state: str
    drift: str | None
    nodes: str  # a folded hostlist
    count: int
    last_run: str = "-"  # when their last runs finished: the earliest, or "earliest .. latest"


def rows(results: list[NodeResult]) -> list[Row]:
    """The results folded: one row per (version, state, drift), current rows first, then by drift's order."""
    groups: dict[tuple[str, str, str | None], list[str]] = {}
    finished: dict[tuple[str, str, str | None], list[str]] = {}
    for r in results:
        groups.setdefault((r.version, r.state, r.drift), []).append(r.host)
        if r.last and isinstance(r.last.get("finished"), str):
            finished.setdefault((r.version, r.state, r.drift), []).append(r.last["finished"])

    def when(key) -> str:
        times = sorted(finished.get(key, []))
        return "-" if not times else times[0] if times[0] == times[-1] else f"{times[0]} .. {times[-1]}"

    def order(key):
        version, state, drift = key
        return (drift is not None, DRIFTS.index(drift) if drift else 0, version, state)

    return [
        Row(*key, fold(hosts), len(hosts), when(key))
        for key, hosts in sorted(groups.items(), key=lambda kv: order(kv[0]))
    ]


def drifted(results: list[NodeResult]) -> int:
    return sum(1 for r in results if r.drift is not None)


def report(points: list[dict], results: list[NodeResult]) -> dict:
    """`fleet status --json`: the points with what they publish, the rows, each node's detail."""
    return {
        "points": points,
        "rows": [asdict(row) for row in rows(results)],
        "nodes": {
            r.host: {"version": r.version, "state": r.state, "published": r.published, "drift": r.drift, "last": r.last}
            for r in sorted(results, key=lambda r: r.host)
        },
        "drift": drifted(results),
    }


# ssh_config keywords for the short options ansible_ssh_common_args may carry.
_FLAG_KEYWORDS = {"-i": "IdentityFile", "-p": "Port", "-l": "User", "-J": "ProxyJump"}


def _quoted(value: str) -> str:
    return f'"{value}"' if any(c.isspace() for c in value) else value


def _common_args(host: str, args: str) -> list[tuple[str, str]]:
    """ansible_ssh_common_args as ssh_config lines (keyword, value); FleetError for what has none."""
    out: list[tuple[str, str]] = []
    tokens = shlex.split(args)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        flag, attached = token[:2], token[2:]
        if flag != "-o" and flag not in _FLAG_KEYWORDS:
            raise FleetError(
                f"{host}: ansible_ssh_common_args: {token!r} has no ssh_config form "
                "(use -o Keyword=value, -i, -p, -l or -J)"
            )
        if attached:
            value = attached
        elif i + 1 < len(tokens):
            i += 1
            value = tokens[i]
        else:
            raise FleetError(f"{host}: ansible_ssh_common_args: {token} without a value")
        if flag == "-o":
            keyword, sep, rest = value.partition("=")
            if not sep:
                keyword, _, rest = value.partition(" ")
            if not keyword or not rest.strip():
                raise FleetError(f"{host}: ansible_ssh_common_args: -o {value!r} is not Keyword=value")
            out.append((keyword.strip(), rest.strip()))
        else:
            out.append((_FLAG_KEYWORDS[flag], value))
        i += 1
    return out


def ssh_config(hostvars: dict[str, dict]) -> str:
    """An ssh_config with one Host block per node, from its inventory variables: ansible_host,
    ansible_port, ansible_user, ansible_ssh_private_key_file, ansible_ssh_common_args. Hosts
    are reached by their inventory names; anything the inventory leaves out is ssh's default."""
    lines = ["# Written by hal-provision fleet from the inventory; used with ssh -F for one run.\n"]
    for host in sorted(hostvars):
        hv = hostvars[host]
        pairs = [("HostName", str(hv.get("ansible_host") or host))]
        for var, keyword in (
            ("ansible_port", "Port"),
            ("ansible_user", "User"),
            ("ansible_ssh_private_key_file", "IdentityFile"),
        ):
            if hv.get(var) not in (None, ""):
                pairs.append((keyword, str(hv[var])))
        if hv.get("ansible_ssh_common_args"):
            pairs += _common_args(host, str(hv["ansible_ssh_common_args"]))
        for keyword, value in pairs:
            if "{{" in value:
                raise FleetError(f"{host}: {keyword} {value!r}: a Jinja template; fleet reads the inventory as data")
        lines.append(f"Host {host}\n")
        lines += [f"  {keyword} {_quoted(value)}\n" for keyword, value in pairs]
    return "".join(lines)


def last_json_command(version_file: str) -> str:
    """Prints the node's last.json, or nothing when there is none; exit 0 either way."""
    path = shlex.quote(version_file)
    return f"if [ -e {path} ]; then cat {path}; fi"


def converge_command(wait: bool) -> str:
    return f"systemctl start{'' if wait else ' --no-block'} {UNIT}"
