"""The driver contract's JSON shapes and the refusals every driver shares.

A pool's holding is {host: pool GPUs it holds} over every host cabled to the pool (0 included).
Every built-in driver checks a request here before it touches the fabric, so the same request
is refused with the same one-line message whichever driver serves it; a refusal changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

COMMANDS = ("list", "attach", "detach")

# Exit codes of `python -m hal_provision.compose.driver`.
EXIT_OK = 0
EXIT_REFUSED = 1  # the request was refused; nothing changed
EXIT_ERROR = 2  # usage, configuration, or the fabric manager failed or could not be reached


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


def read_config(path: Path | str) -> dict:
    """The rendered files/etc/hal-provision/composable.json."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise DriverError(f"cannot read the composable configuration {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise DriverError(f"{path} is not JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(data, dict) or not isinstance(data.get("pools"), list) or not isinstance(data.get("layouts"), dict):
        raise DriverError(f"{path} has no 'pools' list and 'layouts' mapping: is it the rendered composable.json?")
    return data


def pool_from_config(config: dict, name: str, source: str = "composable.json") -> Pool:
    """Pool NAME's facts from a composable.json; an unknown name is an error naming the known ones."""
    for p in config["pools"]:
        if p.get("name") == name:
            try:
                return Pool(name=name, gpu_type=str(p["gpu_type"]), total=int(p["count"]),
                            hosts=tuple(sorted(p["hosts"])), slots_per_host=int(p["slots_per_host"]))
            except (KeyError, TypeError, ValueError) as e:
                raise DriverError(f"{source}: pools[{name}] lacks or mistypes {e}") from None
    known = ", ".join(sorted(str(p.get("name")) for p in config["pools"])) or "none"
    raise DriverError(f"{source} has no pool {name!r} (pools: {known})")


def active_holding(config: dict, pool: Pool, source: str = "composable.json") -> dict[str, int]:
    """What the active layout gives each of the pool's hosts: what a converge deployed."""
    active = config.get("active")
    layout = config["layouts"].get(active)
    if layout is None:
        raise DriverError(f"{source}: the active layout {active!r} is not among its layouts")
    return {h: int(layout.get(h, 0)) for h in pool.hosts}


def free(pool: Pool, holding: dict[str, int]) -> int:
    return pool.total - sum(holding.values())


def listing(pool: Pool, holding: dict[str, int]) -> dict:
    """`list`'s answer."""
    return {"pool": pool.name, "gpu_type": pool.gpu_type, "total": pool.total,
            "hosts": {h: holding.get(h, 0) for h in sorted(pool.hosts)}, "free": free(pool, holding)}


def action_result(pool: Pool, action: str, host: str, count: int, holding: dict[str, int]) -> dict:
    """`attach`'s and `detach`'s answer: the holding after the action."""
    return {"pool": pool.name, "action": action, "host": host, "count": count,
            "hosts": {h: holding.get(h, 0) for h in sorted(pool.hosts)}, "free": free(pool, holding)}


def check_request(pool: Pool, holding: dict[str, int], action: str, host: str, count: int) -> None:
    """Raise Refusal, naming what, when ACTION of COUNT GPUs on HOST cannot be done."""
    if count < 1:
        raise Refusal(f"{action} {host} {count}: the count must be at least 1")
    if host not in pool.hosts:
        raise Refusal(f"host {host} is not cabled to pool {pool.name} (its hosts: {', '.join(pool.hosts)})")
    held = holding.get(host, 0)
    if action == "attach":
        available = free(pool, holding)
        if count > available:
            raise Refusal(f"pool {pool.name} has {available} free GPU(s), {count} asked for {host}")
        if held + count > pool.slots_per_host:
            raise Refusal(f"{host} holds {held} of pool {pool.name}'s GPUs and has {pool.slots_per_host} slots: "
                          f"{count} more do not fit")
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
        return [] if isinstance(answer["error"], str) and "\n" not in answer["error"] else ["'error' is not one line"]
    expected = {"pool": str, "hosts": dict, "free": int}
    expected.update({"gpu_type": str, "total": int} if command == "list" else
                    {"action": str, "host": str, "count": int})
    problems = [f"'{k}' is missing" for k in expected if k not in answer]
    problems += [f"'{k}' is not a {t.__name__}" for k, t in expected.items()
                 if k in answer and (not isinstance(answer[k], t) or isinstance(answer[k], bool))]
    problems += [f"'{k}' is not in the contract" for k in sorted(set(answer) - set(expected))]
    if isinstance(answer.get("hosts"), dict):
        problems += [f"hosts[{h}] is not a count" for h, n in answer["hosts"].items()
                     if not isinstance(n, int) or isinstance(n, bool) or n < 0]
    if command != "list" and answer.get("action") not in (None, command):
        problems.append(f"'action' is {answer.get('action')!r}, not {command!r}")
    return problems
