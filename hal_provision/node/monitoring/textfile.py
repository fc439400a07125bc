"""The textfile runner: the collectors feed Prometheus through node exporter's textfile directory.

With the Prometheus backend no Telegraf runs; node exporter's textfile collector serves every
`*.prom` file of its directory on each scrape. This runner takes Telegraf's exec role:

    python3 -m hal_monitoring textfile --config FILE --host NAME [--once]

FILE (rendered from the model) is JSON:

    {"interval_seconds": 60, "timeout_seconds": 30,
     "textfile_dir": "/var/lib/prometheus/node-exporter",
     "collectors": [{"name": "bmc", "argv": ["/usr/local/bin/hal-collect", "bmc"]}, ...],
     "hosts": {"fl-mgmt": [{"name": "slurm", "argv": [...]}, ...]}}

This host runs `collectors` and `hosts[NAME]` (none when NAME is absent). Every interval it
runs each argv (no shell, side by side, each killed after timeout_seconds), reads its stdout as
line protocol and writes it, converted by openmetrics.py, to `<textfile_dir>/hal_<name>.prom`.
A file is replaced atomically (a temporary file in the same directory, fsync, mode 0644,
rename), so a scrape never reads half of one. A collector that fails (non-zero exit, timeout,
output that is not line protocol) has its file removed: Prometheus must see its series end,
not keep serving the last good values as if they were current. Its first stderr line goes to
the runner's stderr (the journal), once per run.

`hal_collectors.prom` says how each run went, per collector of this host:
hal_collector_success (1 or 0), hal_collector_duration_seconds and
hal_collector_last_success_timestamp_seconds (absent until the collector first succeeded
since the runner started). `hal_*.prom` files of collectors no longer configured are removed;
no other file of the directory (the Debian package's own collectors write there too) is touched.

Runs start on a fixed monotonic schedule, so a slow run does not shift later ones (a run that
overruns its slot skips the slots it missed). SIGTERM or SIGINT end the runner after the
current run. --once runs once and exits: 0 when its files were written (a collector that
failed is recorded in hal_collectors.prom, not in the exit status, so an ExecStartPre check
does not keep the runner from starting while, say, slurmctld is down), 1 when the directory
could not be written. A configuration that is not as above is one line on stderr naming the
key, and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from . import openmetrics
from .commands import CollectorError
from .lineprotocol import LineProtocolError, parse_lines

PROG = "hal_monitoring textfile"
STATUS_FILE = "hal_collectors.prom"
COLLECTOR_NAME = re.compile(r"^[A-Za-z0-9_]+$")
CONFIG_KEYS = {"interval_seconds", "timeout_seconds", "textfile_dir", "collectors", "hosts"}
OPTIONAL_KEYS = {"hosts", "_comment"}  # _comment: the generated-by header of rendered JSON


class ConfigError(Exception):
    """The configuration is not what the runner reads: one line naming the key."""


@dataclass(frozen=True)
class Collector:
    name: str
    argv: tuple[str, ...]

    @property
    def file_name(self) -> str:
        return f"hal_{self.name}.prom"


@dataclass(frozen=True)
class Config:
    interval_seconds: int
    timeout_seconds: int
    textfile_dir: str
    collectors: tuple[Collector, ...]  # this host's: the common ones, then its own


# ---- the configuration ---------------------------------------------------------------------------


def _positive_int(doc: dict, key: str) -> int:
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{key}: must be a positive integer, not {value!r}")
    return value


def _collectors(value: object, where: str) -> list[Collector]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: must be a list of {{name, argv}}")
    found = []
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{at}: must be an object with name and argv")
        unknown = sorted(set(item) - {"name", "argv"})
        if unknown:
            raise ConfigError(f"{at}.{unknown[0]}: unknown key (a collector has name and argv)")
        name, argv = item.get("name"), item.get("argv")
        if not isinstance(name, str) or not COLLECTOR_NAME.match(name):
            raise ConfigError(f"{at}.name: must be letters, digits and _ (it names hal_<name>.prom), not {name!r}")
        if f"hal_{name}.prom" == STATUS_FILE:
            raise ConfigError(f"{at}.name: {name!r} is taken by the runner's own {STATUS_FILE}")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
            raise ConfigError(f"{at}.argv: must be a non-empty list of non-empty strings")
        found.append(Collector(name, tuple(argv)))
    return found


def parse_config(doc: object, host: str) -> Config:
    """The runner's configuration for `host`; ConfigError naming the first key that is wrong."""
    if not isinstance(doc, dict):
        raise ConfigError("the configuration must be a JSON object")
    for key in sorted(CONFIG_KEYS - OPTIONAL_KEYS):
        if key not in doc:
            raise ConfigError(f"{key}: missing")
    unknown = sorted(set(doc) - CONFIG_KEYS - OPTIONAL_KEYS)
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown key (known: {', '.join(sorted(CONFIG_KEYS))})")
    interval, timeout = _positive_int(doc, "interval_seconds"), _positive_int(doc, "timeout_seconds")
    directory = doc["textfile_dir"]
    if not isinstance(directory, str) or not os.path.isabs(directory):
        raise ConfigError(f"textfile_dir: must be an absolute path, not {directory!r}")
    collectors = _collectors(doc["collectors"], "collectors")
    hosts = doc.get("hosts", {})
    if not isinstance(hosts, dict):
        raise ConfigError("hosts: must be an object of host name -> collectors")
    for name in sorted(hosts):  # every host's list is checked, not only this one's
        own = _collectors(hosts[name], f"hosts.{name}")
        if name == host:
            collectors += own
    seen: set[str] = set()
    for c in collectors:
        if c.name in seen:
            where = "collectors" if host not in hosts else f"collectors and hosts.{host}"
            raise ConfigError(f"{where}: collector {c.name!r} is named twice for host {host}")
        seen.add(c.name)
    return Config(interval, timeout, directory, tuple(collectors))


def load_config(path: str, host: str) -> Config:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"not JSON: {exc}") from None
    return parse_config(doc, host)


# ---- one collector, one file ---------------------------------------------------------------------


@dataclass
class Outcome:
    """How one collector's run went: its converted text, or why it failed."""

    collector: Collector
    seconds: float
    text: str | None = None
    error: str | None = None


def run_group(argv: tuple[str, ...], timeout: float) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of argv, run without a shell in a session of its own, so
    that on timeout the whole group dies, children included (a collector may be a wrapper
    script): a runner that runs for months must not pile up hung tools. CollectorError when it
    cannot be started or outlives `timeout`."""
    try:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise CollectorError(f"{argv[0]}: command not found") from None
    except PermissionError as exc:
        raise CollectorError(f"{argv[0]}: {exc.strerror}") from None
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            process.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a descendant left the session and holds the pipes
            process.wait()
        raise CollectorError(f"no answer within {timeout:g} s (killed)") from None
    return process.returncode, stdout, stderr


def collect(collector: Collector, timeout: float, clock: Callable[[], float] = time.monotonic) -> Outcome:
    """Run the collector and convert what it printed."""
    start = clock()
    try:
        returncode, stdout, stderr = run_group(collector.argv, timeout)
    except CollectorError as exc:
        return Outcome(collector, clock() - start, error=str(exc))
    seconds = clock() - start
    if returncode != 0:
        first = next((line.strip() for line in stderr.splitlines() if line.strip()), None)
        return Outcome(collector, seconds, error=first or f"exit status {returncode}")
    try:
        text = openmetrics.convert(parse_lines(stdout), collector.name)
    except LineProtocolError as exc:
        return Outcome(collector, seconds, error=f"its output is not line protocol: {exc}")
    return Outcome(collector, seconds, text=text)


def write_atomic(directory: str, name: str, text: str) -> None:
    """Replace directory/name with text at once. The temporary name does not end in .prom, so
    the textfile collector never reads a file being written."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o644)
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def remove(directory: str, name: str) -> None:
    try:
        os.unlink(os.path.join(directory, name))
    except FileNotFoundError:
        pass


# ---- the runs ---------------------------------------------------------------------------------------


STATUS_HELP = {
    "hal_collector_success": "whether the collector's last run succeeded (1) or failed (0), from hal-collect textfile",
    "hal_collector_duration_seconds": "how long the collector's last run took, from hal-collect textfile",
    "hal_collector_last_success_timestamp_seconds": "when the collector last succeeded (Unix time), "
    "from hal-collect textfile",
}


@dataclass
class Runner:
    config: Config
    log: Callable[[str], None]
    now: Callable[[], float] = time.time
    last_success: dict[str, float] = field(default_factory=dict)

    def run_once(self) -> bool:
        """One run of every collector; False when a file could not be written."""
        collectors = self.config.collectors
        with ThreadPoolExecutor(max_workers=max(1, len(collectors))) as pool:
            outcomes = list(pool.map(lambda c: collect(c, self.config.timeout_seconds), collectors))
        directory, written = self.config.textfile_dir, True
        for outcome in outcomes:
            name = outcome.collector.file_name
            try:
                if outcome.text is not None:
                    write_atomic(directory, name, outcome.text)
                    self.last_success[outcome.collector.name] = round(self.now(), 3)
                else:
                    remove(directory, name)
            except OSError as exc:
                outcome.text, outcome.error, written = None, f"{name}: {exc.strerror or exc}", False
            if outcome.error is not None:
                self.log(f"{PROG}: {outcome.collector.name}: {outcome.error}")
        try:
            write_atomic(directory, STATUS_FILE, self.status(outcomes))
            self.remove_unconfigured()
        except OSError as exc:
            self.log(f"{PROG}: {directory}: {exc.strerror or exc}")
            written = False
        return written

    def status(self, outcomes: list[Outcome]) -> str:
        samples = []
        for outcome in outcomes:
            name = outcome.collector.name
            labels = (("collector", name),)
            samples.append(self._sample("hal_collector_success", labels, int(outcome.text is not None)))
            samples.append(self._sample("hal_collector_duration_seconds", labels, round(outcome.seconds, 3)))
            if name in self.last_success:
                samples.append(
                    self._sample("hal_collector_last_success_timestamp_seconds", labels, self.last_success[name])
                )
        return openmetrics.exposition(samples)

    @staticmethod
    def _sample(name: str, labels: tuple[tuple[str, str], ...], value: float) -> openmetrics.Sample:
        return openmetrics.Sample(name, labels, value, STATUS_HELP[name])

    def remove_unconfigured(self) -> None:
        wanted = {c.file_name for c in self.config.collectors} | {STATUS_FILE}
        for name in os.listdir(self.config.textfile_dir):
            if name.startswith("hal_") and name.endswith(".prom") and name not in wanted:
                remove(self.config.textfile_dir, name)
                self.log(f"{PROG}: removed {name}: no such collector in the configuration")

    def run_forever(self, stop: threading.Event, clock: Callable[[], float] = time.monotonic) -> None:
        interval = self.config.interval_seconds
        due = clock()
        while not stop.is_set():
            self.run_once()
            due += interval
            late = clock() - due
            if late > 0:  # the run overran its slot: start again at the next one still ahead
                skipped = int(late // interval) + 1
                due += skipped * interval
                self.log(f"{PROG}: a run took longer than interval_seconds ({interval} s); {skipped} run(s) skipped")
            stop.wait(max(0.0, due - clock()))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run this host's collectors every interval and write their output as Prometheus "
        "textfiles for node exporter.",
    )
    parser.add_argument("--config", required=True, help="the runner's JSON configuration")
    parser.add_argument("--host", required=True, help="this host's inventory name (selects hosts[NAME])")
    parser.add_argument("--once", action="store_true", help="one run, then exit (1 when a file could not be written)")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        config = load_config(args.config, args.host)
    except ConfigError as exc:
        log(f"{PROG}: {args.config}: {exc}")
        return 2
    runner = Runner(config, log)
    if args.once:
        return 0 if runner.run_once() else 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    names = ", ".join(c.name for c in config.collectors) or "none"
    log(f"{PROG}: every {config.interval_seconds} s into {config.textfile_dir}: {names}")
    runner.run_forever(stop)
    return 0
