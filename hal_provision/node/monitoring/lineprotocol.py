"""InfluxDB line protocol (the 1.x dialect Telegraf's exec input and InfluxDB 1.6 read).

    measurement,tag=value,tag2=value2 field=1.5,count=12i,ok=true,name="text" 1700000000000000000

Escaping follows InfluxDB 1.x's parser: in the measurement, commas and spaces; in tag keys,
tag values and field keys, commas, equals signs and spaces; in string field values, double
quotes and backslashes. InfluxDB 1.x reads any other backslash literally, so none is added;
a trailing backslash would escape the separator after it, so it is dropped, and newlines
(which would end the point) become spaces. Integers carry the `i` suffix; NaN and infinite
floats have no representation and are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Union

FieldValue = Union[int, float, bool, str]


class LineProtocolError(ValueError):
    """A line that is not valid line protocol."""


def _clean(text: str) -> str:
    return str(text).replace("\r", " ").replace("\n", " ").rstrip("\\")


def escape_measurement(name: str) -> str:
    return _clean(name).replace(",", "\\,").replace(" ", "\\ ")


def escape_key(text: str) -> str:
    """Tag key, tag value or field key."""
    return _clean(text).replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")


def format_value(value: FieldValue) -> str | None:
    """A field value in line protocol, or None for a float NaN/inf (not representable)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\r", " ").replace("\n", " ")
    return f'"{text}"'


def format_tags(tags: Mapping[str, str]) -> str:
    """`,k=v,k2=v2` with keys sorted (InfluxDB's preferred order), empty values left out
    (InfluxDB rejects them)."""
    return "".join(
        f",{escape_key(k)}={escape_key(v)}" for k, v in sorted(tags.items()) if v is not None and _clean(v) != ""
    )


def format_fields(fields: Mapping[str, FieldValue]) -> str:
    parts = []
    for key in sorted(fields):
        value = fields[key]
        text = None if value is None else format_value(value)
        if text is not None:
            parts.append(f"{escape_key(key)}={text}")
    return ",".join(parts)


def format_point(
    measurement: str, tags: Mapping[str, str], fields: Mapping[str, FieldValue], timestamp_ns: int | None = None
) -> str:
    """One point. Raises LineProtocolError when no field is left (a point needs one)."""
    return Point(measurement, tags, fields).format(timestamp_ns)


@dataclass(frozen=True)
class Point:
    """A point before it has a time: what a collector or an emulated input produces."""

    measurement: str
    tags: Mapping[str, str]
    fields: Mapping[str, FieldValue]

    def format(self, timestamp_ns: int | None = None) -> str:
        return self.line(timestamp_ns).format()

    def line(self, timestamp_ns: int | None = None) -> "Line":
        field_set = format_fields(self.fields)
        if not field_set:
            raise LineProtocolError(f"{self.measurement}: a point needs at least one field")
        return Line(self.measurement, dict(self.tags), field_set, timestamp_ns)


@dataclass
class Line:
    """A parsed line: tags and measurement unescaped, the field set kept as written."""

    measurement: str
    tags: dict[str, str] = field(default_factory=dict)
    fields_raw: str = ""
    timestamp_ns: int | None = None

    def fields(self) -> dict[str, FieldValue]:
        return parse_fields(self.fields_raw)

    def format(self) -> str:
        line = f"{escape_measurement(self.measurement)}{format_tags(self.tags)} {self.fields_raw}"
        return line if self.timestamp_ns is None else f"{line} {self.timestamp_ns}"


def _scan(text: str, start: int, stops: str, quoted: bool = False) -> int:
    """Index of the first unescaped character of `stops` at or after `start` (len(text) if
    none). With `quoted`, characters inside double-quoted strings do not count."""
    i, in_string = start, False
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            i += 2
            continue
        if quoted and c == '"':
            in_string = not in_string
        elif not in_string and c in stops:
            return i
        i += 1
    if in_string:
        raise LineProtocolError(f"unterminated string in {text!r}")
    return i


def _unescape(text: str, specials: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in specials:
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _split_pairs(text: str, quoted: bool = False) -> list[tuple[str, str]]:
    pairs, i = [], 0
    while i < len(text):
        end = _scan(text, i, ",", quoted)
        item = text[i:end]
        eq = _scan(item, 0, "=")
        if eq >= len(item) or eq == 0:
            raise LineProtocolError(f"{item!r} is not key=value")
        pairs.append((item[:eq], item[eq + 1 :]))
        i = end + 1
    return pairs


def parse_line(line: str) -> Line | None:
    """Parse one line; None for a blank line or a comment."""
    text = line.strip("\r\n")
    if not text.strip() or text.lstrip().startswith("#"):
        return None
    key_end = _scan(text, 0, " ")
    series = text[:key_end]
    meas_end = _scan(series, 0, ",")
    measurement = _unescape(series[:meas_end], ", ")
    if not measurement:
        raise LineProtocolError(f"no measurement in {line!r}")
    tags = {_unescape(k, ",= "): _unescape(v, ",= ") for k, v in _split_pairs(series[meas_end + 1 :])}
    rest = text[key_end:].lstrip(" ")
    fields_end = _scan(rest, 0, " ", quoted=True)
    fields_raw = rest[:fields_end]
    if not fields_raw:
        raise LineProtocolError(f"no fields in {line!r}")
    parse_fields(fields_raw)  # validates
    stamp = rest[fields_end:].strip()
    try:
        timestamp = int(stamp) if stamp else None
    except ValueError:
        raise LineProtocolError(f"bad timestamp {stamp!r} in {line!r}") from None
    return Line(measurement, tags, fields_raw, timestamp)


def _parse_value(raw: str) -> FieldValue:
    if raw.startswith('"'):
        if len(raw) < 2 or not raw.endswith('"'):
            raise LineProtocolError(f"bad string value {raw!r}")
        return _unescape(raw[1:-1], '"\\')
    if raw in ("t", "T", "true", "True", "TRUE"):
        return True
    if raw in ("f", "F", "false", "False", "FALSE"):
        return False
    try:
        if raw.endswith("i") or raw.endswith("u"):
            return int(raw[:-1])
        return float(raw)
    except ValueError:
        raise LineProtocolError(f"bad field value {raw!r}") from None


def parse_fields(fields_raw: str) -> dict[str, FieldValue]:
    return {_unescape(k, ",= "): _parse_value(v) for k, v in _split_pairs(fields_raw, quoted=True)}


def parse_lines(text: str) -> list[Line]:
    return [p for p in (parse_line(line) for line in text.splitlines()) if p is not None]
