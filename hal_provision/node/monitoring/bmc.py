"""The BMC collector: temperatures, fans, power, voltages and currents from IPMI sensors.

HAL read its AC922s' BMC data through IBM's crassd; the same sensors are readable with
ipmitool, in-band against the node's own OpenBMC (the default: `/dev/ipmi0`, which needs
root or a udev rule giving the telegraf user access) or out-of-band with `-I lanplus -H BMC`
(pass the whole command with --command). It runs:

    ipmitool sdr elist full

ipmitool's best-documented sensor listing: the man page shows its columns (`ipmitool sdr type
Temperature` prints the same lines) and ipmitool 1.8.19's `ipmi_sdr_print_sensor_fc` prints

    <name, %-16s> | <sensor number>h | <status> | <entity>.<instance> | <reading> <unit>

for every full sensor record (the threshold sensors: temperatures, fans, voltages, power).
Status is `ok`, a threshold crossed (`lnc`, `unc`, `lcr`, `ucr`, `lnr`, `unr`) or `ns` (no
reading: `No Reading` or `Disabled`, an absent DIMM or PSU). Readings that are not numbers
(discrete states such as `0x00`) and `ns` sensors are left out rather than written as ok=0:
an empty DIMM slot is not an alarm.

Each reading becomes one line (a sensor name that occurs twice, e.g. Dell's per-CPU `Temp`,
gets its entity id appended so the series stay apart):

    bmc,kind=temperature,sensor=Inlet\\ Temp,unit=degrees_C ok=1i,value=23.0

kind comes from the unit: temperature (degrees C/F/K), fan (RPM, or percent on a sensor named
fan), power (Watts), voltage (Volts), current (Amps), other. Units are ipmitool's with
spaces as underscores (degrees_C, RPM, Watts, Volts, Amps, percent, ...).
"""

from __future__ import annotations

import argparse
import re
import shlex
import time
from collections import Counter
from dataclasses import dataclass

from .commands import CollectorError, emit, run_command
from .lineprotocol import Point

COMMAND = ("ipmitool", "sdr", "elist", "full")
THRESHOLD_STATES = {"ok", "lnc", "unc", "lcr", "ucr", "lnr", "unr", "nc", "cr", "nr"}
_READING = re.compile(r"^(-?\d+(?:\.\d+)?)\s+([^,]+)")


@dataclass(frozen=True)
class Reading:
    sensor: str
    number: str
    status: str
    entity: str
    value: float
    unit: str
    kind: str

    @property
    def ok(self) -> int:
        return int(self.status == "ok")


def normalise_unit(unit: str) -> str:
    unit = unit.strip()
    if unit == "percent" or unit.startswith("% "):
        return "percent"
    return re.sub(r"\s+", "_", unit)


def kind_of(unit: str, sensor: str) -> str:
    if unit.startswith("degrees_"):
        return "temperature"
    if unit == "RPM" or (unit == "percent" and "fan" in sensor.lower()):
        return "fan"
    return {"Watts": "power", "Volts": "voltage", "Amps": "current"}.get(unit, "other")


def parse_sdr_elist(text: str) -> list[Reading]:
    """The numeric readings of `ipmitool sdr elist` output; ns sensors and discrete states
    are left out. CollectorError when lines exist but none has the five columns."""
    readings, lines, columns = [], 0, 0
    for line in text.splitlines():
        if not line.strip():
            continue
        lines += 1
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 5:
            continue
        columns += 1
        name, number, status, entity, reading = parts
        m = _READING.match(reading)
        if status == "ns" or status not in THRESHOLD_STATES or not m:
            continue
        unit = normalise_unit(m.group(2))
        readings.append(Reading(name, number, status, entity, float(m.group(1)), unit, kind_of(unit, name)))
    if lines and not columns:
        raise CollectorError(
            "the output has no `name | number | status | entity | reading` line; is this `ipmitool sdr elist`?"
        )
    return readings


def points(readings: list[Reading]) -> list[Point]:
    seen = Counter(r.sensor for r in readings)
    return [
        Point(
            "bmc",
            {"sensor": f"{r.sensor} ({r.entity})" if seen[r.sensor] > 1 else r.sensor, "kind": r.kind, "unit": r.unit},
            {"value": r.value, "ok": r.ok},
        )
        for r in readings
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="hal_monitoring bmc",
        description="Print the BMC's temperature, fan, "
        "power, voltage and current sensors as InfluxDB line protocol (bmc).",
    )
    parser.add_argument(
        "--command",
        default=" ".join(COMMAND),
        help="the sensor listing to run, e.g. 'ipmitool -I lanplus -H bmc01 -U monitor -E sdr "
        "elist full' (default: %(default)s, in-band)",
    )
    parser.add_argument("--timeout", type=float, default=25.0, help="seconds ipmitool may take (default 25)")
    args = parser.parse_args(argv)
    stamp = time.time_ns()
    found = points(parse_sdr_elist(run_command(shlex.split(args.command), args.timeout)))
    emit([p.format(stamp) for p in found])
    return 0
