"""What playbooks/compose.yml does to reach a layout: the driver command line of each pool, and
the moves from what the pools' drivers say the hosts hold now (`list`, the deployed counts) to
the layout's counts in the rendered composable.json. The playbook asks for them through the
filters hal.provision.compose_driver_argv and hal.provision.compose_moves.

Moves are computed from the deployed counts, not from the previous layout: a recomposition
stopped half way is finished by running compose.yml again, and a layout already in place moves
nothing. A host takes its pool GPUs from the first pool cabled to it (the model's rule).
"""

from __future__ import annotations


class ComposeError(ValueError):
    """The rendered composable.json and the drivers' answers do not fit together; one line."""


def driver_argv(pool: dict, python: str, config_path: str, state_dir: str) -> list[str]:
    """The driver's command line for POOL (an entry of composable.json's pools), without the
    command: --url for a pool with driver_url, --config and --state for the sandbox driver (its
    state file STATE_DIR/<pool>.json)."""
    argv = [python, "-m", "hal_provision.compose.driver", "--driver", pool["driver"], "--pool", pool["name"]]
    if pool.get("driver_url"):
        argv += ["--url", pool["driver_url"]]
    if pool["driver"] == "sandbox":
        argv += ["--config", config_path, "--state", f"{state_dir.rstrip('/')}/{pool['name']}.json"]
    return argv


def moves(config: dict, layout: str, listed: list[dict]) -> dict:
    """{"hosts": the hosts that lose or gain GPUs, sorted; "steps": {"action", "pool", "host",
    "count"} for every detach, then every attach (a GPU leaves one host before another takes
    it), pools in composable.json's order, hosts sorted}. LISTED holds each pool's `list` answer."""
    counts = config.get("layouts", {}).get(layout)
    if counts is None:
        raise ComposeError(
            f"layout {layout!r} is not in composable.json (its layouts: "
            f"{', '.join(sorted(config.get('layouts', {}))) or 'none'})"
        )
    answers = {a.get("pool"): a for a in listed}
    taken: set[str] = set()
    steps: dict[str, list[dict]] = {"detach": [], "attach": []}
    for pool in config.get("pools", []):
        answer = answers.get(pool["name"])
        if answer is None:
            raise ComposeError(f"no `list` answer for pool {pool['name']}")
        for host in sorted(set(pool["hosts"]) - taken):
            held, want = answer.get("hosts", {}).get(host, 0), counts.get(host, 0)
            if held != want:
                action = "detach" if held > want else "attach"
                steps[action].append({"action": action, "pool": pool["name"], "host": host, "count": abs(held - want)})
        taken.update(pool["hosts"])
    ordered = steps["detach"] + steps["attach"]
    return {"hosts": sorted({s["host"] for s in ordered}), "steps": ordered}
