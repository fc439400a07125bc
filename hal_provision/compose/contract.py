"""The driver contract's JSON shapes and the refusals every driver shares.

A pool's holding is {host: pool GPUs it holds} over every host cabled to the pool (0 included).
Every built-in driver checks a request here before it touches the fabric, so the same request
is refused with the same one-line message whichever driver serves it; a refusal changes nothing.

Everything a driver reads (composable.json, the sandbox's state file, the fabric manager's
answers, a site program's answer) is read with `loads` and its counts with `count_of`: JSON
without NaN, Infinity or numbers too large for a float (1e999), nested no deeper than the
contract's shapes need, counts that are whole numbers from 0, and a holding that fits the pool
(`check_holding`). Anything else is a DriverError, exit 2, never a traceback.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

COMMANDS = ("list", "attach", "detach")

# Exit codes of `python -m hal_provision.compose.driver`.
EXIT_OK = 0
EXIT_REFUSED = 1  # the request was refused; nothing changed
EXIT_ERROR = 2  # usage, configuration, or the fabric manager failed or could not be reached

# The contract's shapes nest three levels ({"hosts": [{"name": ...}]}); a vendor's extra fields
# a few more. Deeper is refused before anything walks it (the json module recurses per level).
MAX_JSON_DEPTH = 32


class Refusal(Exception):
    """A request the pool cannot satisfy; nothing was changed. The message is one line."""


class DriverError(Exception):
    """The driver could not do its work (bad configuration, fabric unreachable or failing)."""


@dataclass(frozen=True)
class Pool:
    """A pool's facts, as composable.json (or the fabric manager) gives them."""

    name: str
    gpu_type: str
    total: int
    hosts: tuple[str, ...]
    slots_per_host: int


def one_line(text: str) -> str:
    """Whitespace folded so a message is one line whatever a program or server answered."""
    return " ".join(str(text).split())


def shown(value: object, limit: int = 60) -> str:
    """VALUE as JSON writes it, for a message, cut to LIMIT characters (a hostile value may be long)."""
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _short_int(text: str) -> int:
    if len(text) > 30:  # int() of thousands of digits is slow, then refused by Python itself
        raise ValueError(f"a number of {len(text)} digits is too large")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:30]} is too large a number")
    return value


def loads(text: str | bytes) -> object:
    """TEXT's JSON value, strictly: ValueError (one line) for what is not JSON, NaN and
    Infinity, a number that overflows a float, and nesting deeper than MAX_JSON_DEPTH."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, parse_int=_short_int)
    except json.JSONDecodeError as e:
        raise ValueError(f"{e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 ({e.reason})") from None
    open_values, depth = [(value, 1)], 0
    while open_values:  # a loop, not recursion: the depth is what is being checked
        item, level = open_values.pop()
        if isinstance(item, (dict, list)):
            depth = max(depth, level)
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
            open_values.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return value


def is_count(value: object) -> bool:
    """A number of GPUs: a JSON whole number from 0 (not a bool, a float or a string)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def count_of(value: object, what: str) -> int:
    """VALUE when it is a number of GPUs; DriverError naming WHAT otherwise."""
    if not is_count(value):
        raise DriverError(f"{what} is {shown(value)}, not a number of GPUs (a whole number from 0)")
    return value


def name_of(value: object, what: str) -> str:
    """VALUE when it is a non-empty string; DriverError naming WHAT otherwise."""
    if not isinstance(value, str) or not value.strip():
        raise DriverError(f"{what} is {shown(value)}, not a name")
    return value


def check_holding(pool: Pool, holding: dict[str, int], source: str) -> dict[str, int]:
    """HOLDING when it fits POOL: no host beyond its slots, no more GPUs held than the pool
    has. DriverError naming SOURCE otherwise (the counts are already counts)."""
    for host, held in sorted(holding.items()):
        if held > pool.slots_per_host:
            raise DriverError(
                f"{source}: {host} holds {held} of pool {pool.name}'s GPUs, more than its {pool.slots_per_host} slots"
            )
    if sum(holding.values()) > pool.total:
        raise DriverError(
            f"{source}: the hosts hold {sum(holding.values())} of pool {pool.name}'s GPUs, more than its {pool.total}"
        )
    return holding


def read_config(path: Path | str) -> dict:
    """The rendered files/etc/hal-provision/composable.json."""
    try:
        data = loads(Path(path).read_bytes())
    except OSError as e:
        raise DriverError(f"cannot read the composable configuration {path}: {e.strerror}") from None
    except ValueError as e:
        raise DriverError(f"{path} is not JSON: {e}") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("pools"), list)
        or not isinstance(data.get("layouts"), dict)
        or not all(isinstance(p, dict) for p in data["pools"])
    ):
        raise DriverError(
            f"{path} has no 'pools' list of objects and 'layouts' mapping: is it the rendered composable.json?"
        )
    return data


def pool_from_config(config: dict, name: str, source: str = "composable.json") -> Pool:
    """Pool NAME's facts from a composable.json; an unknown name is an error naming the known ones."""
    for p in config["pools"]:
        if p.get("name") == name:
            where = f"{source}: pools[{name}]"
            missing = [k for k in ("gpu_type", "count", "hosts", "slots_per_host") if k not in p]
            if missing:
                raise DriverError(f"{where} lacks {', '.join(missing)}")
            hosts = p["hosts"]
            if not isinstance(hosts, list):
                raise DriverError(f"{where}.hosts is {shown(hosts)}, not a list of host names")
            hosts = [name_of(h, f"{where}.hosts[{i}]") for i, h in enumerate(hosts)]
            if len(set(hosts)) != len(hosts):
                raise DriverError(f"{where}.hosts names a host twice")
            return Pool(
                name=name,
                gpu_type=name_of(p["gpu_type"], f"{where}.gpu_type"),
                total=count_of(p["count"], f"{where}.count"),
                hosts=tuple(sorted(hosts)),
                slots_per_host=count_of(p["slots_per_host"], f"{where}.slots_per_host"),
            )
    known = ", ".join(sorted(str(p.get("name")) for p in config["pools"])) or "none"
    raise DriverError(f"{source} has no pool {name!r} (pools: {known})")


def active_holding(config: dict, pool: Pool, source: str = "composable.json") -> dict[str, int]:
    """What the active layout gives each of the pool's hosts: what a converge deployed."""
    active = config.get("active")
    layout = config["layouts"].get(active) if isinstance(active, str) else None
    if layout is None:
        raise DriverError(f"{source}: the active layout {shown(active)} is not among its layouts")
    if not isinstance(layout, dict):
        raise DriverError(f"{source}: layouts[{active}] is {shown(layout)}, not a mapping of host to GPUs")
    holding = {h: count_of(layout.get(h, 0), f"{source}: layouts[{active}][{h}]") for h in pool.hosts}
    return check_holding(pool, holding, f"{source}: layouts[{active}]")


def free(pool: Pool, holding: dict[str, int]) -> int:
    return pool.total - sum(holding.values())


def listing(pool: Pool, holding: dict[str, int]) -> dict:
    """`list`'s answer."""
    return {
        "pool": pool.name,
        "gpu_type": pool.gpu_type,
        "total": pool.total,
        "hosts": {h: holding.get(h, 0) for h in sorted(pool.hosts)},
        "free": free(pool, holding),
    }


def action_result(pool: Pool, action: str, host: str, count: int, holding: dict[str, int]) -> dict:
    """`attach`'s and `detach`'s answer: the holding after the action."""
    return {
        "pool": pool.name,
        "action": action,
        "host": host,
        "count": count,
        "hosts": {h: holding.get(h, 0) for h in sorted(pool.hosts)},
        "free": free(pool, holding),
    }


def check_count(pool: Pool, action: str, host: str, asked: int) -> None:
    """DriverError (a usage mistake, not a refusal) for a count no state of the pool could
    serve: below 1, or more than the pool has GPUs."""
    if not is_count(asked) or asked < 1:
        raise DriverError(f"{action} {host} {shown(asked)}: the count must be a whole number from 1")
    if asked > pool.total:
        raise DriverError(f"{action} {host} {asked}: pool {pool.name} has {pool.total} GPU(s) in all")


def check_request(pool: Pool, holding: dict[str, int], action: str, host: str, count: int) -> None:
    """Raise Refusal, naming what, when ACTION of COUNT GPUs on HOST cannot be done now
    (DriverError for a count no state of the pool could serve: check_count)."""
    check_count(pool, action, host, count)
    if host not in pool.hosts:
        raise Refusal(f"host {host} is not cabled to pool {pool.name} (its hosts: {', '.join(pool.hosts)})")
    held = holding.get(host, 0)
    if action == "attach":
        available = free(pool, holding)
        if count > available:
            raise Refusal(f"pool {pool.name} has {available} free GPU(s), {count} asked for {host}")
        if held + count > pool.slots_per_host:
            raise Refusal(
                f"{host} holds {held} of pool {pool.name}'s GPUs and has {pool.slots_per_host} slots: "
                f"{count} more do not fit"
            )
    elif action == "detach":
        if count > held:
            raise Refusal(f"{host} holds {held} of pool {pool.name}'s GPUs, {count} asked to detach")
    else:
        raise DriverError(f"unknown action {action!r} (one of attach, detach)")


def after(holding: dict[str, int], action: str, host: str, count: int) -> dict[str, int]:
    """The holding once an action checked by check_request is done."""
    new = dict(holding)
    new[host] = new.get(host, 0) + (count if action == "attach" else -count)
    return new


def shape_problems(command: str, answer: object) -> list[str]:
    """What is wrong with a driver's answer to COMMAND (an empty list: nothing). Used on a site's
    own program's answers and by the contract test on every built-in driver's."""
    if not isinstance(answer, dict):
        return [f"the answer is a {type(answer).__name__}, not a JSON object"]
    if set(answer) == {"error"}:
        return (
            []
            if isinstance(answer["error"], str) and "\n" not in answer["error"]
            else ["'error' is not one line of text"]
        )
    expected = {"pool": str, "hosts": dict, "free": int}
    expected.update(
        {"gpu_type": str, "total": int} if command == "list" else {"action": str, "host": str, "count": int}
    )
    problems = [f"'{k}' is missing" for k in expected if k not in answer]
    problems += [
        f"'{k}' is not a {t.__name__}"
        for k, t in expected.items()
        if k in answer and (not isinstance(answer[k], t) or isinstance(answer[k], bool))
    ]
    problems += [
        f"'{k}' is negative"
        for k, t in expected.items()
        if t is int and isinstance(answer.get(k), int) and answer[k] < 0
    ]
    problems += [f"'{k}' is not in the contract" for k in sorted(set(answer) - set(expected))]
    if isinstance(answer.get("hosts"), dict):
        problems += [f"hosts[{h}] is not a count" for h, n in answer["hosts"].items() if not is_count(n)]
        counts = [n for n in answer["hosts"].values() if is_count(n)]
        if command == "list" and not problems and answer["free"] != answer["total"] - sum(counts):
            problems.append("'free' is not 'total' less the hosts' GPUs")
    if command != "list" and answer.get("action") not in (None, command):
        problems.append(f"'action' is {shown(answer.get('action'))}, not {command!r}")
    return problems
