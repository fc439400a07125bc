"""Slurm time strings (MaxTime, DefaultTime, MaxWall, PriorityDecayHalfLife): the one place
that reads and writes them on the controller. Standard library only.

Slurm's forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, and UNLIMITED or INFINITE.
(swrun's -t, which takes hours, is the wrapper suite's own: swsuite/translate.py.)
"""

from __future__ import annotations

import math
import re

UNLIMITED = ("UNLIMITED", "INFINITE")

_TIME = re.compile(r"^(UNLIMITED|INFINITE|(\d+-)?\d{1,2}(:\d{2}){0,2}|\d+)$")


def check(value: str) -> str:
    """`value`, when it is a Slurm time; ValueError saying the forms otherwise."""
    if not _TIME.match(value):
        raise ValueError(f"{value!r} is not a Slurm time (use MM, HH:MM:SS, D-HH:MM:SS or UNLIMITED)")
    return value


def check_finite(value: str) -> str:
    """`value`, when it is not unlimited; ValueError otherwise."""
    if value.upper() in UNLIMITED:
        raise ValueError(f"{value!r}: give a length of time (MM, HH:MM:SS or D-HH:MM:SS), not unlimited")
    return value


def minutes(value: str) -> float | None:
    """Minutes of a Slurm time string (MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]); None: unlimited."""
    if value.upper() in UNLIMITED:
        return None
    days, _, clock = value.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, mins, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 3:  # HH:MM:SS
        hours, mins, seconds = parts
    else:  # MM, MM:SS
        hours, mins, seconds = 0, parts[0], (parts + [0])[1]
    return (int(days or 0) * 24 + hours) * 60 + mins + seconds / 60


def limit_minutes(value: str | None) -> float | None:
    """A limit as Slurm lists it (scontrol, sacctmgr) in minutes; None for no limit (unset,
    UNLIMITED, NONE)."""
    if not value or value.upper() == "NONE":
        return None
    return minutes(value)


def clock(total_minutes: float) -> str:
    """Minutes as Slurm prints a limit, seconds rounded up to whole minutes: D-HH:MM:SS from one
    day on, HH:MM:SS below (1-00:00:00, 20:00:00)."""
    days, rest = divmod(math.ceil(total_minutes), 24 * 60)
    hhmmss = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return f"{days}-{hhmmss}" if days else hhmmss
