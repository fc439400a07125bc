"""The Telegraf stand-in: runs a rendered telegraf.conf where Telegraf cannot be installed.

    python3 -m hal_monitoring standin --config /etc/telegraf/telegraf.conf [--config-directory DIR] [--once | --check]

It reads the same files Telegraf would (the configuration, then every `*.conf` of the
configuration directory in name order, like Telegraf's --config-directory; default: the
`telegraf.d` beside the configuration; a missing directory adds nothing), after Telegraf's
environment substitution (`${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`,
`${VAR?error}`, comment lines left alone; the systemd unit loads the EnvironmentFile Telegraf's
does, /etc/default/telegraf). What it understands:

- `[agent]`: interval, round_interval (collect on multiples of the interval), precision
  (default: 1 s for intervals of a second or more, as Telegraf), hostname, omit_hostname,
  metric_batch_size, metric_buffer_limit (points a failed write keeps for the next round).
- `[global_tags]`; each input's `interval` and `[inputs.<name>.tags]`.
- `[[outputs.influxdb]]`: urls (tried in order), database, retention_policy, username,
  password, timeout, http_proxy, tls_ca, insecure_skip_verify. Points go to
  `<url>/write?db=..&rp=..&precision=ns` with HTTP basic authentication; an https URL's server
  is verified against tls_ca (else the system's CAs), its name against the certificate, unless
  insecure_skip_verify. The stand-in never creates the database.
- `[[inputs.exec]]`: commands (split like a shell, no shell run), timeout, data_format
  "influx" (the only one), ignore_error. A command's lines without a timestamp get the time the
  input ran.
- Telegraf's own inputs cpu, mem, system, disk, net, processes (hal_monitoring.host) and
  nvidia_smi (`<bin_path> -q -x`, hal_monitoring.gpu) with Telegraf's names. Any other input or
  output, processors and aggregators: one warning, then nothing.

Every point gets the global tags and `host` (unless it has them, or omit_hostname), then all
points of a round are written at once; a write error (HTTP status and InfluxDB's message,
connection refused) is logged and the points kept for the next round. One line per round on
stderr: `wrote N points in X.XX s`. SIGTERM or SIGINT ends the loop after the current round.
--once runs every input once, writes, and exits 1 if the write failed; --check only reads the
configuration (the telegraf role's `validate:`) and exits 1 on an error.
"""

from __future__ import annotations

import abc
import argparse
import base64
import glob
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Mapping

from . import gpu, host
from .commands import CollectorError, last_stderr_line, run
from .lineprotocol import Line, LineProtocolError, parse_line

NS = 1_000_000_000
EMULATED = ("cpu", "mem", "system", "disk", "net", "processes", "nvidia_smi")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


class ConfigError(Exception):
    """A configuration Telegraf would refuse, or the stand-in cannot run."""


def parse_duration(value: object, what: str) -> float:
    """Telegraf's durations: Go's `1m30s`, `500ms`, `60s`, or a number of seconds."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: {value!r} is not a duration")
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    if text in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text):
        raise ConfigError(f"{what}: {value!r} is not a duration such as 60s, 1m30s or 500ms")
    return total


def substitute_env(text: str, env: Mapping[str, str], strict: bool = True) -> tuple[str, list[str]]:
    """Telegraf's substitution of environment variables, skipping comment lines. Returns the
    text and the warnings (unset variables). With strict=False a `:?`/`?` error is a warning."""
    warnings: list[str] = []

    def one(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        value = env.get(name)
        if op == ":-":
            return value if value else arg
        if op == "-":
            return arg if value is None else value
        if op in (":?", "?") and (value is None or (op == ":?" and not value)):
            message = f"${{{name}}}: {arg or 'not set'}"
            if strict:
                raise ConfigError(message)
            warnings.append(message)
            return ""
        if value is None:
            warnings.append(f"${{{name}}} is not set in the environment; it reads as empty")
            return ""
        return value

    lines = [line if line.lstrip().startswith("#") else _ENV.sub(one, line) for line in text.splitlines(True)]
    return "".join(lines), warnings


# ---- configuration --------------------------------------------------------------------------------


@dataclass
class Agent:
    interval: float = 10.0
    round_interval: bool = True
    precision: float = 0.0
    hostname: str = ""
    omit_hostname: bool = False
    metric_batch_size: int = 1000
    metric_buffer_limit: int = 10000

    def rounding_ns(self) -> int:
        """Telegraf's getPrecision: the configured precision, else 1 s for intervals of a
        second or more (1 ms, 1 us below)."""
        if self.precision > 0:
            return max(1, round(self.precision * NS))
        for step in (1.0, 1e-3, 1e-6):
            if self.interval >= step:
                return round(step * NS)
        return 1


@dataclass
class InfluxOutput:
    urls: list[str]
    database: str = "telegraf"
    retention_policy: str = ""
    username: str = ""
    password: str = ""
    timeout: float = 5.0
    http_proxy: str = ""
    tls_ca: str = ""
    insecure_skip_verify: bool = False

    def describe(self) -> str:
        return f"{', '.join(self.urls)} (database {self.database})"


@dataclass
class InputConfig:
    plugin: str
    options: dict
    interval: float
    tags: dict[str, str]
    source: str

    def describe(self) -> str:
        if self.plugin == "exec":
            return f"exec ({'; '.join(self.options.get('commands', []))})"
        return self.plugin


@dataclass
class Config:
    files: list[str]
    agent: Agent = field(default_factory=Agent)
    global_tags: dict[str, str] = field(default_factory=dict)
    outputs: list[InfluxOutput] = field(default_factory=list)
    inputs: list[InputConfig] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def hostname(self) -> str | None:
        if self.agent.omit_hostname:
            return None
        return self.agent.hostname or socket.gethostname()


def config_files(path: str, directory: str | None) -> list[str]:
    """The configuration, then the directory's *.conf in name order (Telegraf's order)."""
    directory = (
        directory if directory is not None else os.path.join(os.path.dirname(os.path.abspath(path)), "telegraf.d")
    )
    extra = sorted(glob.glob(os.path.join(glob.escape(directory), "*.conf"))) if os.path.isdir(directory) else []
    return [path] + extra


def _tables(value: object, what: str) -> list[dict]:
    """`[[inputs.x]]` gives a list of tables, `[inputs.x]` one table."""
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return value
    raise ConfigError(f"{what} must be a table or an array of tables")


def _bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{what} must be true or false")
    return value


def _str_list(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{what} must be a non-empty list of strings")
    return value


def _agent(table: dict, where: str) -> Agent:
    agent = Agent()
    durations = {"interval", "precision"}
    for key, value in table.items():
        if key in durations:
            setattr(agent, key, parse_duration(value, f"{where} [agent] {key}"))
        elif key in ("round_interval", "omit_hostname"):
            if not isinstance(value, bool):
                raise ConfigError(f"{where} [agent] {key} must be true or false")
            setattr(agent, key, value)
        elif key == "hostname":
            agent.hostname = str(value)
        elif key in ("metric_batch_size", "metric_buffer_limit"):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{where} [agent] {key} must be a positive integer")
            setattr(agent, key, value)
    if agent.interval <= 0:
        raise ConfigError(f"{where} [agent] interval must be more than 0")
    return agent


def _influx_output(table: dict, where: str) -> InfluxOutput:
    urls = _str_list(table.get("urls", ["http://127.0.0.1:8086"]), f"{where} outputs.influxdb urls")
    for url in urls:
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(
                f"{where} outputs.influxdb: {url!r} is not an http(s) URL (the stand-in writes over HTTP)"
            )
    return InfluxOutput(
        urls,
        str(table.get("database", "telegraf")),
        str(table.get("retention_policy", "")),
        str(table.get("username", "")),
        str(table.get("password", "")),
        parse_duration(table.get("timeout", "5s"), f"{where} outputs.influxdb timeout"),
        str(table.get("http_proxy", "")),
        str(table.get("tls_ca", "")),
        _bool(table.get("insecure_skip_verify", False), f"{where} outputs.influxdb insecure_skip_verify"),
    )


def _input(plugin: str, table: dict, where: str, agent: Agent) -> InputConfig:
    what = f"{where} inputs.{plugin}"
    if plugin == "exec":
        for command in _str_list(table.get("commands"), f"{what} commands"):
            try:
                shlex.split(command)
            except ValueError as exc:
                raise ConfigError(f"{what}: command {command!r}: {exc}") from None
        if table.get("data_format", "influx") != "influx":
            raise ConfigError(f'{what}: data_format {table["data_format"]!r}; the stand-in reads only "influx"')
        parse_duration(table.get("timeout", "5s"), f"{what} timeout")
    tags = table.get("tags", {})
    if not isinstance(tags, dict):
        raise ConfigError(f"{what}.tags must be a table")
    interval = parse_duration(table["interval"], f"{what} interval") if "interval" in table else agent.interval
    if interval <= 0:
        raise ConfigError(f"{what} interval must be more than 0")
    return InputConfig(plugin, table, interval, {str(k): str(v) for k, v in tags.items()}, where)


def load_config(
    path: str, config_directory: str | None = None, env: Mapping[str, str] | None = None, strict: bool = True
) -> Config:
    """Read, substitute and check the configuration like Telegraf; ConfigError on an error."""
    env = os.environ if env is None else env
    config = Config(config_files(path, config_directory))
    if config_directory is not None and not os.path.isdir(config_directory):
        config.warnings.append(f"{config_directory}: no such directory; no additions read")
    agent_table: dict = {}
    raw_outputs: list[tuple[str, str, dict]] = []
    raw_inputs: list[tuple[str, str, dict]] = []
    for name in config.files:
        try:
            text = open(name, encoding="utf-8-sig").read()
        except OSError as exc:
            raise ConfigError(f"{name}: {exc.strerror}") from None
        text, warnings = substitute_env(text, env, strict)
        config.warnings += [f"{name}: {w}" for w in warnings]
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{name}: not valid TOML: {exc}") from None
        for section, value in data.items():
            if section == "agent":
                agent_table.update(value)
            elif section == "global_tags":
                config.global_tags.update({str(k): str(v) for k, v in value.items()})
            elif section in ("inputs", "outputs") and isinstance(value, dict):
                target = raw_inputs if section == "inputs" else raw_outputs
                for plugin, tables in value.items():
                    target += [(plugin, name, t) for t in _tables(tables, f"{name}: {section}.{plugin}")]
            else:
                config.warnings.append(f"{name}: [{section}] is not emulated by the stand-in; ignored")
    config.agent = _agent(agent_table, path)
    for plugin, name, table in raw_outputs:
        if plugin == "influxdb":
            config.outputs.append(_influx_output(table, name))
        else:
            config.warnings.append(
                f"{name}: outputs.{plugin} is not emulated by the stand-in; nothing is written there"
            )
    for plugin, name, table in raw_inputs:
        config.inputs.append(_input(plugin, table, name, config.agent))
        if plugin != "exec" and plugin not in EMULATED:
            config.warnings.append(
                f"{name}: inputs.{plugin} is not emulated by the stand-in; its metrics will be missing"
            )
    return config


# ---- inputs ---------------------------------------------------------------------------------------------


@dataclass
class Gathered:
    lines: list[Line] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Input(abc.ABC):
    """One configured input: gathers Lines, never raises."""

    def __init__(self, config: InputConfig):
        self.config = config
        self.label = f"inputs.{config.plugin}"

    def gather(self, now_ns: int) -> Gathered:
        out = Gathered()
        try:
            self._gather(now_ns, out)
        except (CollectorError, OSError, ValueError, LineProtocolError, subprocess.SubprocessError) as exc:
            out.errors.append(f"{self.label}: {exc}")
        except Exception as exc:  # a bug in one input must not stop the others or the agent
            out.errors.append(f"{self.label}: {type(exc).__name__}: {exc}")
        return out

    @abc.abstractmethod
    def _gather(self, now_ns: int, out: Gathered) -> None:
        """Add this input's points (or errors) of one round to `out`."""


class ExecInput(Input):
    def _gather(self, now_ns: int, out: Gathered) -> None:
        options = self.config.options
        timeout = parse_duration(options.get("timeout", "5s"), "timeout")
        for command in options["commands"]:
            argv, label = shlex.split(command), f"{self.label} ({command})"
            try:
                done = run(argv, timeout)
            except CollectorError as exc:
                out.errors.append(f"{label}: {exc}")
                continue
            if done.returncode != 0:
                said = last_stderr_line(done)
                out.errors.append(f"{label}: exit status {done.returncode}" + (f": {said}" if said else ""))
                if not options.get("ignore_error", False):
                    continue
            for text in done.stdout.splitlines():
                try:
                    line = parse_line(text)
                except LineProtocolError as exc:
                    out.errors.append(f"{label}: {exc}")
                    continue
                if line is not None:
                    if line.timestamp_ns is None:
                        line.timestamp_ns = now_ns
                    out.lines.append(line)


class PointsInput(Input):
    """An emulated built-in input: a function returning Points, stamped with the gather time."""

    def __init__(self, config: InputConfig, points: Callable[[], list]):
        super().__init__(config)
        self.points = points

    def _gather(self, now_ns: int, out: Gathered) -> None:
        out.lines += [p.line(now_ns) for p in self.points()]


class NvidiaSmiInput(Input):
    def __init__(self, config: InputConfig):
        super().__init__(config)
        wanted = str(config.options.get("bin_path", "/usr/bin/nvidia-smi"))
        # Telegraf: the configured path, else nvidia-smi on PATH.
        self.bin_path = wanted if os.path.exists(wanted) else (shutil.which("nvidia-smi") or wanted)
        self.timeout = parse_duration(config.options.get("timeout", "5s"), "timeout")

    def _gather(self, now_ns: int, out: Gathered) -> None:
        out.lines += [p.line(now_ns) for p in gpu.read_nvidia_smi(self.bin_path, self.timeout)]


class IgnoredInput(Input):
    def _gather(self, now_ns: int, out: Gathered) -> None:
        return None


def make_input(config: InputConfig) -> Input:
    o = config.options
    if config.plugin == "exec":
        return ExecInput(config)
    if config.plugin == "nvidia_smi":
        return NvidiaSmiInput(config)
    if config.plugin == "cpu":
        stats = host.CpuStats(
            percpu=o.get("percpu", True),
            totalcpu=o.get("totalcpu", True),
            collect_cpu_time=o.get("collect_cpu_time", False),
            report_active=o.get("report_active", False),
        )
        return PointsInput(config, stats.points)
    simple: dict[str, Callable[[], list]] = {
        "mem": host.mem_points,
        "system": host.system_points,
        "disk": lambda: host.disk_points(o.get("ignore_fs"), o.get("mount_points")),
        "net": lambda: host.net_points(o.get("interfaces")),
        "processes": host.processes_points,
    }
    if config.plugin in simple:
        return PointsInput(config, simple[config.plugin])
    return IgnoredInput(config)


def finish(
    line: Line, input_tags: Mapping[str, str], global_tags: Mapping[str, str], hostname: str | None, rounding_ns: int
) -> Line:
    """Telegraf's order: the input's tags replace the point's, global tags and host only fill in."""
    line.tags.update(input_tags)
    for key, value in global_tags.items():
        line.tags.setdefault(key, value)
    if hostname:
        line.tags.setdefault("host", hostname)
    if line.timestamp_ns is not None and rounding_ns > 1:
        line.timestamp_ns = (line.timestamp_ns + rounding_ns // 2) // rounding_ns * rounding_ns
    return line


# ---- output ---------------------------------------------------------------------------------------------


class WriteError(Exception):
    pass


def tls_context(output: InfluxOutput, url: str) -> ssl.SSLContext:
    """How an https output's server is checked, as Telegraf's tls_ca and insecure_skip_verify
    say: its chain against tls_ca (else the system's CAs), its name against the URL's host."""
    if output.insecure_skip_verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cafile=output.tls_ca or None)
    except (OSError, ssl.SSLError) as exc:
        raise WriteError(
            f"{url}: tls_ca {output.tls_ca}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"
        ) from None


def post_lines(output: InfluxOutput, url: str, body: str) -> None:
    """One write request; WriteError with InfluxDB's own message when it is refused."""
    params = {"db": output.database, "precision": "ns"}
    if output.retention_policy:
        params["rp"] = output.retention_policy
    request = urllib.request.Request(
        f"{url.rstrip('/')}/write?{urllib.parse.urlencode(params)}",
        data=body.encode("utf-8"),
        method="POST",
        headers={"Content-Type": "text/plain; charset=utf-8", "User-Agent": "hal-monitoring-standin"},
    )
    if output.username or output.password:
        token = base64.b64encode(f"{output.username}:{output.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    proxies = {"http": output.http_proxy, "https": output.http_proxy} if output.http_proxy else {}
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler(proxies)]
    if url.startswith("https:"):
        handlers.append(urllib.request.HTTPSHandler(context=tls_context(output, url)))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=output.timeout or None) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", "replace").strip()
        try:
            text = json.loads(text).get("error", text)
        except (ValueError, AttributeError):
            pass
        raise WriteError(f"{url}: HTTP {exc.code}: {text[:300] or exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason.strerror if isinstance(exc.reason, OSError) and exc.reason.strerror else exc.reason
        raise WriteError(f"{url}: {reason}") from None
    except (OSError, TimeoutError) as exc:
        raise WriteError(f"{url}: {exc}") from None


class Writer:
    """One output with its buffer: what a failed write leaves is sent first next time."""

    def __init__(
        self,
        output: InfluxOutput,
        batch_size: int,
        buffer_limit: int,
        post: Callable[[InfluxOutput, str, str], None] = post_lines,
    ):
        self.output, self.batch_size, self.post = output, batch_size, post
        self.buffer: deque[str] = deque(maxlen=buffer_limit)

    def write(self, lines: list[str]) -> tuple[int, str | None]:
        """Points written, and the error that stopped the rest (None when all were written)."""
        self.buffer.extend(lines)
        written = 0
        while self.buffer:
            batch = [self.buffer[i] for i in range(min(self.batch_size, len(self.buffer)))]
            errors = []
            for url in self.output.urls:
                try:
                    self.post(self.output, url, "\n".join(batch) + "\n")
                    break
                except WriteError as exc:
                    errors.append(str(exc))
            else:
                return written, "; ".join(errors)
            for _ in batch:
                self.buffer.popleft()
            written += len(batch)
        return written, None


# ---- the loop -------------------------------------------------------------------------------------------


class StandIn:
    def __init__(
        self, config: Config, log: Callable[[str], None], post: Callable[[InfluxOutput, str, str], None] = post_lines
    ):
        self.config, self.log = config, log
        self.inputs = [make_input(c) for c in config.inputs]
        self.writers = [
            Writer(o, config.agent.metric_batch_size, config.agent.metric_buffer_limit, post) for o in config.outputs
        ]
        self.hostname = config.hostname()

    def gather(self, inputs: list[Input]) -> Gathered:
        now_ns = time.time_ns()
        done = Gathered()
        if not inputs:
            return done
        with ThreadPoolExecutor(max_workers=len(inputs)) as pool:
            results = list(pool.map(lambda i: (i, i.gather(now_ns)), inputs))
        rounding = self.config.agent.rounding_ns()
        for source, got in results:
            done.lines += [
                finish(line, source.config.tags, self.config.global_tags, self.hostname, rounding) for line in got.lines
            ]
            done.errors += got.errors
        return done

    def round(self, inputs: list[Input]) -> bool:
        """Gather and write once; False when a write failed."""
        start = time.monotonic()
        got = self.gather(inputs)
        for error in got.errors:
            self.log(f"E! {error}")
        lines = [line.format() for line in got.lines]
        ok, written = True, 0
        for writer in self.writers:
            count, error = writer.write(lines)
            written = max(written, count)
            if error:
                ok = False
                self.log(f"E! write failed: {error}; {len(writer.buffer)} points kept for the next round")
        if not self.writers:
            self.log("W! no [[outputs.influxdb]]: the points were not written anywhere")
        self.log(f"wrote {written} points in {time.monotonic() - start:.2f} s")
        return ok

    def run_forever(self, stop: threading.Event) -> None:
        started = time.time()
        due = {id(i): self._next_slot(i.config.interval, started, started) for i in self.inputs}
        while not stop.is_set():
            if not self.inputs:
                stop.wait()
                break
            wake = min(due.values())
            if stop.wait(max(0.0, wake - time.time())):
                break
            now = time.time()
            ready = [i for i in self.inputs if due[id(i)] <= now + 1e-3]
            self.round(ready)
            finished = time.time()
            for i in ready:
                nxt = self._next_slot(i.config.interval, finished, due[id(i)])
                if nxt - due[id(i)] > i.config.interval * 1.5:
                    self.log(
                        f"W! inputs.{i.config.plugin} skipped a collection: the round took "
                        f"{finished - now:.1f} s, its interval is {i.config.interval:g} s"
                    )
                due[id(i)] = nxt

    def _next_slot(self, interval: float, now: float, last: float) -> float:
        if self.config.agent.round_interval:
            return (math.floor(now / interval) + 1) * interval
        nxt = last + interval
        while nxt <= now:
            nxt += interval
        return nxt


def check(config: Config) -> str:
    inputs = ", ".join(c.describe() for c in config.inputs) or "none"
    outputs = "; ".join(o.describe() for o in config.outputs) or "none"
    return f"{' + '.join(config.files)}: interval {config.agent.interval:g} s; outputs: {outputs}; inputs: {inputs}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="hal_monitoring standin",
        description="Run a telegraf.conf where "
        "Telegraf cannot be installed: HAL's exec collectors and emulations of "
        "Telegraf's cpu, mem, system, disk, net, processes and nvidia_smi inputs, "
        "written to InfluxDB.",
    )
    parser.add_argument("--config", required=True, help="the telegraf.conf, e.g. /etc/telegraf/telegraf.conf")
    parser.add_argument("--config-directory", help="more *.conf files (default: telegraf.d beside --config)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one round, then exit (1 if the write failed)")
    mode.add_argument("--check", action="store_true", help="only read and check the configuration")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        config = load_config(args.config, args.config_directory, strict=not args.check)
    except ConfigError as exc:
        log(f"hal_monitoring standin: {exc}")
        return 1
    for warning in config.warnings:
        log(f"W! {warning}")
    if args.check:
        programs = {
            shlex.split(command)[0] for c in config.inputs if c.plugin == "exec" for command in c.options["commands"]
        }
        for program in sorted(p for p in programs if not shutil.which(p)):
            log(f"W! inputs.exec runs {program}, which is not installed here (yet)")
        print(check(config))
        return 0
    standin = StandIn(config, log)
    if args.once:
        return 0 if standin.round(standin.inputs) else 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log(f"standin: {check(config)}")
    standin.run_forever(stop)
    return 0
