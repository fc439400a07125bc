"""systemd calendar expressions (a timer's OnCalendar=, systemd.time(7)): the common forms,
checked without systemd. Standard library only.

Accepted (each is also accepted by systemd; tests/unit/render/test_backup.py compares the two where
`systemd-analyze` exists):

- a shorthand, in any case: minutely, hourly, daily, weekly, monthly, quarterly,
  semiannually (or semi-annually), yearly, annually;
- `[DOW] [[Y-]M-D] [H:M[:S]]`, at least one of the three, separated by spaces, e.g.
  `*-*-* 02:30:00`, `Mon..Fri 02:30`, `*-*-01 00:00`, `*:0/15`. DOW: weekday names (Mon or
  Monday, any case), lists with commas and ranges with `..` (Mon..Fri,Sun). The date and time
  fields: `*`, a number, lists (1,15), ranges (1..5) and repetitions (0/15, 1..10/2); years
  1970-2199 (two digits: 70-99 are 19xx, 00-69 20xx), months 1-12, days 1-31, hours 0-23,
  minutes and seconds 0-59 (seconds may have up to six decimals);
- any of these followed by `UTC`.

Refused although systemd takes them (write the common form instead): other time zones,
the last days of a month (`~`), `@` timestamps and the old `Mon-Fri` for `Mon..Fri`.

`period_seconds` gives the longest time between two elapses for the simple forms (a
shorthand, one time a day, one minute an hour), what a backup's age is compared with.
"""

from __future__ import annotations

import re

SHORTHANDS = (
    "minutely",
    "hourly",
    "daily",
    "weekly",
    "monthly",
    "quarterly",
    "semiannually",
    "semi-annually",
    "yearly",
    "annually",
)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

FORMS = (
    "a shorthand (minutely, hourly, daily, weekly, monthly, quarterly, semiannually, yearly) or "
    "'[DOW] [Y-]M-D H:M[:S]' with *, lists (1,15), ranges (1..5) and repetitions (0/15), optionally "
    "followed by UTC, e.g. '*-*-* 02:30:00' or 'Mon..Fri 02:30'"
)
"""What calendar_problem accepts, for messages and descriptions."""

# The longest time between two elapses of each shorthand (a month of 31 days, a quarter of 92,
# half a year of 184, a leap year).
_DAY = 86400
SHORTHAND_PERIODS = {
    "minutely": 60,
    "hourly": 3600,
    "daily": _DAY,
    "weekly": 7 * _DAY,
    "monthly": 31 * _DAY,
    "quarterly": 92 * _DAY,
    "semiannually": 184 * _DAY,
    "semi-annually": 184 * _DAY,
    "yearly": 366 * _DAY,
    "annually": 366 * _DAY,
}
_EVERY_DAY = ("*-*-*", "*-*")
_NUMBER = re.compile(r"[0-9]+", re.ASCII)
_SECONDS = re.compile(r"[0-9]+(\.[0-9]{1,6})?", re.ASCII)
# (field name, lowest, highest)
_DATE = (("year", 1970, 2199), ("month", 1, 12), ("day", 1, 31))
_TIME = (("hour", 0, 23), ("minute", 0, 59), ("second", 0, 59))


class _Invalid(ValueError):
    pass


def calendar_problem(expression: str) -> str | None:
    """None when `expression` is a calendar expression of the accepted forms (module text);
    otherwise what is wrong with it, in a sentence that ends with the forms accepted."""
    try:
        _parse(expression)
    except _Invalid as exc:
        return f"{expression!r} is not a calendar expression: {exc}; write {FORMS}"
    return None


def period_seconds(expression: str) -> int | None:
    """The longest time between two elapses of `expression` for the simple forms: a shorthand,
    one fixed time every day (`02:30`, `*-*-* 02:30:00`: a day), one fixed minute every hour
    (`*:15`, `*-*-* *:15:00`: an hour), each optionally in UTC. None for anything else (lists,
    ranges, repetitions, weekdays, dates) and for what calendar_problem refuses."""
    if calendar_problem(expression) is not None:
        return None
    parts = expression.split()
    if parts[-1].upper() == "UTC":
        parts = parts[:-1]
    if len(parts) == 1 and parts[0].lower() in SHORTHAND_PERIODS:
        return SHORTHAND_PERIODS[parts[0].lower()]
    if len(parts) == 2 and parts[0] in _EVERY_DAY:
        parts = parts[1:]
    if len(parts) != 1 or ":" not in parts[0]:
        return None
    hour, *rest = parts[0].split(":")
    if not all(_SECONDS.fullmatch(field) for field in rest):
        return None
    if _NUMBER.fullmatch(hour):
        return _DAY
    return 3600 if hour == "*" else None


def _parse(expression: str) -> None:
    if expression != expression.strip() or not expression:
        raise _Invalid("it is empty" if not expression.strip() else "it starts or ends with a space")
    parts = expression.split()
    if parts[-1].upper() == "UTC":
        parts = parts[:-1]
        if not parts:
            raise _Invalid("UTC alone names no time")
    if len(parts) == 1 and parts[0].lower() in SHORTHANDS:
        return
    if "~" in expression:
        raise _Invalid("the last days of a month ('~') are not accepted here")
    if expression.startswith("@"):
        raise _Invalid("a timestamp ('@...') is a single moment, not a schedule")
    order = ("weekdays", "date", "time")
    seen: list[str] = []
    for part in parts:
        kind = "time" if ":" in part else "date" if "-" in part else "weekdays"
        if seen and kind == "weekdays" and not _is_weekdays(part):
            raise _Invalid(f"{part!r} is not a time zone accepted here (UTC only)")
        if seen and order.index(kind) <= order.index(seen[-1]):
            raise _Invalid(f"{part!r} comes after the {seen[-1]}: write weekdays, then date, then time, once each")
        seen.append(kind)
        {"weekdays": _weekdays, "date": _date, "time": _time}[kind](part)


def _is_weekdays(text: str) -> bool:
    try:
        _weekdays(text)
    except _Invalid:
        return False
    return True


def _weekdays(text: str) -> None:
    for item in text.split(","):
        first, dots, last = item.partition("..")
        start, end = _weekday(first, text), _weekday(last, text) if dots else None
        if end is not None and end < start:
            raise _Invalid(f"weekday range {item!r} runs backwards (the week starts on Monday)")


def _weekday(name: str, text: str) -> int:
    low = name.lower()
    for i, day in enumerate(WEEKDAYS):
        if low in (day, day[:3]):
            return i
    raise _Invalid(f"{name!r} is not a weekday (Mon..Sun or Monday..Sunday), a shorthand or a time zone")


def _date(text: str) -> None:
    fields = text.split("-")
    if any(_is_weekdays(field) for field in fields):
        raise _Invalid(f"{text!r}: write weekday ranges with '..' (Mon..Fri)")
    if len(fields) == 2:
        fields = ["*", *fields]
    if len(fields) != 3:
        raise _Invalid(f"date {text!r} is not Y-M-D or M-D")
    for value, (name, low, high) in zip(fields, _DATE):
        _component(value, name, low, high, text, year=name == "year")


def _time(text: str) -> None:
    fields = text.split(":")
    if len(fields) == 2:
        fields = [*fields, "00"]
    if len(fields) != 3:
        raise _Invalid(f"time {text!r} is not H:M or H:M:S")
    for value, (name, low, high) in zip(fields, _TIME):
        _component(value, name, low, high, text, seconds=name == "second")


def _component(
    value: str, name: str, low: int, high: int, text: str, year: bool = False, seconds: bool = False
) -> None:
    """One field of a date or time: *, or a list of values, ranges and repetitions."""
    if value == "*":
        return
    if not value:
        raise _Invalid(f"{text!r} has an empty {name}")
    for item in value.split(","):
        item_range, slash, step = item.partition("/")
        if slash and (not _NUMBER.fullmatch(step) or int(step) == 0):
            raise _Invalid(f"{name} {item!r}: a repetition is '/N' with N a whole number of at least 1")
        first, dots, last = item_range.partition("..")
        start = _value(first, name, low, high, text, year, seconds)
        if dots and _value(last, name, low, high, text, year, seconds) < start:
            raise _Invalid(f"{name} range {item_range!r} runs backwards")


def _value(text: str, name: str, low: int, high: int, whole: str, year: bool, seconds: bool) -> float:
    if not (_SECONDS if seconds else _NUMBER).fullmatch(text):
        raise _Invalid(f"{whole!r}: {name} {text!r} is not a number" + (" (use .. for ranges)" if "." in text else ""))
    number = float(text)
    if year and number < 100:
        number += 2000 if number < 70 else 1900
    if not low <= number < high + 1:
        raise _Invalid(f"{whole!r}: {name} {text} is outside {low}..{high}")
    return number
