"""Whose drain is it: the one rule by which a program that drains a Slurm node resumes it.

A program (or playbook) that drains a node gives a reason that starts with its own prefix, and
later resumes the node only if its reason is still one of its own: an administrator's drain, or
another tool's, is left alone. A reason is ours when it is the prefix itself, or the prefix
followed by ':' or ' '. Every reason hal-provision writes fits that, with one prefix per writer:

    hal-provision rolling apply                      playbooks/rolling.yml (the prefix itself)
    hal-provision compose: layout NAME               playbooks/compose.yml
    hal-provision converge: version V                hal-converge (converge.py)
    hal-provision converge failed: version V: TASK   hal-converge, after a failed converge
    hal-health: CHECK: PROBLEM                       hal-healthcheck (the model's health prefix)

and "hal-provision converged by hand", "hal-healthy admin note" or "after hal-provision rolling
apply" are not ours. hal-converge and hal-healthcheck import this module; the roles install it
beside them (standard library only, it imports nothing). playbooks/tasks/resume-ours.yml applies
the same functions through the collection's filter hal.provision.slurm_drained_ours.
"""

from __future__ import annotations

NO_REASON = "none"  # what sinfo's %E prints for a node without a reason
STATE_FLAGS = "*~#!%$@^-+"  # sinfo's suffixes: not responding, powered off, rebooting, ...
DRAINED_STATES = frozenset({"drain", "drained", "draining", "drng"})


def parse(line: str) -> tuple[str, str] | None:
    """(state, reason) from a line of `sinfo -h -N -n HOST -o '%T|%E'`: the state in lower case
    without sinfo's flag suffixes ('drained*' -> 'drained'), the reason '' where sinfo prints
    'none'; None for a line that is not one (no '|')."""
    state, bar, reason = line.strip().partition("|")
    if not bar:
        return None
    reason = reason.strip()
    return state.strip().lower().rstrip(STATE_FLAGS), "" if reason == NO_REASON else reason


def is_drained(state: str) -> bool:
    """Drained or draining: a state as parse() gives it (or as scontrol writes it, 'mixed+drain')."""
    return any(part in DRAINED_STATES for part in state.strip().lower().rstrip(STATE_FLAGS).split("+"))


def ours(reason: str, prefix: str) -> bool:
    """Whether a drain reason is one the owner of `prefix` wrote (the module's rule)."""
    return bool(prefix) and (reason == prefix or reason.startswith((prefix + ":", prefix + " ")))
