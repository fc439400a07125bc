"""Line-protocol points as Prometheus metrics: what the textfile runner writes for node exporter.

The collectors print InfluxDB line protocol for Telegraf; with the Prometheus backend the same
output goes, through this module, into node exporter's textfile directory, so both backends
carry the same meanings under names that follow from each other by these rules:

- metric name: the measurement, `hal_` in front unless it starts with it, then `_` and the
  field: slurm_node.up -> hal_slurm_node_up, hal_backup.age_s -> hal_backup_age_s. Every
  character outside [a-zA-Z0-9_] becomes `_` (metric_name).
- labels: the point's tags, but `job` becomes `job_name` and `instance` `instance_name`
  (Prometheus sets `job` and `instance` on every scraped sample: a tag of that name would be
  renamed `exported_job` or overwritten), and `host` is left out (the scrape configuration
  adds the target's `host` label, as Telegraf adds its host tag). Label names are sanitized
  like metric names; one that would start with a digit or with `__` (reserved for Prometheus)
  gets a single `_` in front instead (label_name).
- values: integer and float fields as they are, booleans as 1 and 0. String fields (a node's
  drain reason, a job's name) have no sample value and are left out, as are NaN and
  infinities, which line protocol cannot carry either.

The output is the classic text exposition format, version 0.0.4, which node exporter's
textfile collector parses (not OpenMetrics: no `# EOF`). Every metric is a gauge: the
collectors report states and levels, not counters Prometheus could rate. Each metric gets
`# HELP` (measurement, field and the collector that wrote it) and `# TYPE` once, its samples
grouped under them, in a fixed order (by name, then labels) and without timestamps (node
exporter refuses timestamps in textfiles; the scrape's time is the sample's). Two points of
one series in one run keep the later one's value, as InfluxDB keeps the later of two writes
to one series at one time (the collectors stamp a run's points alike).

metric_name and label_name are pure and imported by the controller side too (dashboards,
alert rules), so both sides derive the same names.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Union

from .lineprotocol import FieldValue, Line, Point

_OUTSIDE = re.compile(r"[^a-zA-Z0-9_]")
PREFIX = "hal_"
# Tags Prometheus owns as target labels: renamed (job, instance) or left to the scrape (host).
RENAMED_TAGS = {"job": "job_name", "instance": "instance_name"}
DROPPED_TAGS = frozenset({"host"})

Number = Union[int, float]


def _sanitize(text: str) -> str:
    return _OUTSIDE.sub("_", text)


def metric_name(measurement: str, field: str) -> str:
    """The Prometheus name of a measurement's field: slurm_node, up -> hal_slurm_node_up."""
    base = measurement if measurement.startswith(PREFIX) else PREFIX + measurement
    return _sanitize(f"{base}_{field}")


def label_name(tag: str) -> str | None:
    """The label a tag becomes; None for a tag left out (host)."""
    if tag in DROPPED_TAGS:
        return None
    name = _sanitize(RENAMED_TAGS.get(tag, tag))
    if not name or name[0].isdigit() or name.startswith("__"):
        name = "_" + name.lstrip("_")
    return name


def sample_value(value: object) -> Number | None:
    """A field value as a sample value; None for what has none (text, NaN, infinities)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return None


def escape_label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_number(value: Number) -> str:
    """Go's ParseFloat reads both: `12` and Python's repr of a float (`0.5`, `1e+16`)."""
    return str(value) if isinstance(value, int) else repr(float(value))


@dataclass(frozen=True)
class Sample:
    """One sample: a metric name, its labels (sorted name/value pairs) and its value."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: Number
    help: str

    def format(self) -> str:
        if not self.labels:
            return f"{self.name} {format_number(self.value)}"
        labels = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in self.labels)
        return f"{self.name}{{{labels}}} {format_number(self.value)}"


def _fields(point: Line | Point) -> Mapping[str, FieldValue]:
    """A parsed Line's fields (parsed on demand) or a Point's."""
    return point.fields() if isinstance(point, Line) else point.fields


def labels_of(tags: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    labels: dict[str, str] = {}
    for tag in sorted(tags):
        name, value = label_name(tag), tags[tag]
        if name is not None and value is not None and value != "":
            labels[name] = str(value)
    return tuple(sorted(labels.items()))


def samples(points: Iterable[Line | Point], collector: str) -> list[Sample]:
    """The samples of points (parsed lineprotocol.Line or lineprotocol.Point) a collector
    printed, in exposition order; a series given twice keeps the later value."""
    series: dict[tuple[str, tuple[tuple[str, str], ...]], Sample] = {}
    for point in points:
        labels = labels_of(point.tags)
        for field, raw in _fields(point).items():
            value = sample_value(raw)
            if value is None:
                continue
            name = metric_name(point.measurement, field)
            help_text = f"{point.measurement} {field}, from hal-collect {collector}"
            previous = series.get((name, labels))
            series[(name, labels)] = Sample(name, labels, value, previous.help if previous else help_text)
    return [series[key] for key in sorted(series)]


def exposition(samples_: Iterable[Sample]) -> str:
    """The text exposition (format 0.0.4) of samples: `# HELP`, `# TYPE <name> gauge` and the
    samples of each name, names and labels sorted. The first sample of a name gives its help."""
    by_name: dict[str, list[Sample]] = {}
    for sample in samples_:
        by_name.setdefault(sample.name, []).append(sample)
    out = []
    for name in sorted(by_name):
        group = sorted(by_name[name], key=lambda s: s.labels)
        out.append(f"# HELP {name} {escape_help(group[0].help)}")
        out.append(f"# TYPE {name} gauge")
        out += [s.format() for s in group]
    return "".join(line + "\n" for line in out)


def convert(points: Iterable[Line | Point], collector: str) -> str:
    """A collector's points as the text a `.prom` file holds ('' when none has a number)."""
    return exposition(samples(points, collector))
