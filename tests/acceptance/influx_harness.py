"""A scratch InfluxDB 1.x (Debian's influxd) on free local ports, for the acceptance tests that
need a real database: the dashboards' panel queries and the backups' dump and restore."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

INFLUXD = shutil.which("influxd") or ("/usr/bin/influxd" if Path("/usr/bin/influxd").exists() else None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Influxd:
    def __init__(self, root: Path):
        self.port = free_port()
        self.rpc_port = free_port()  # the backup and restore service, never the default 8088
        conf = root / "influxdb.conf"
        conf.write_text(
            "reporting-disabled = true\n"
            f'bind-address = "127.0.0.1:{self.rpc_port}"\n'
            f'[meta]\n  dir = "{root}/meta"\n'
            f'[data]\n  dir = "{root}/data"\n  wal-dir = "{root}/wal"\n  query-log-enabled = false\n'
            f'[http]\n  bind-address = "127.0.0.1:{self.port}"\n  log-enabled = false\n'
            "[monitor]\n  store-enabled = false\n"
        )
        self.log = root / "influxd.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen([INFLUXD, "run", "-config", str(conf)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self._ping():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise AssertionError(f"influxd did not answer on port {self.port}:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    @property
    def rpc_address(self) -> str:
        """host:port of the backup and restore service (`influxd backup|restore -host`)."""
        return f"127.0.0.1:{self.rpc_port}"

    def _ping(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/ping", timeout=1) as resp:
                return resp.status == 204
        except OSError:
            return False

    def _post(self, path: str, params: dict, body: bytes) -> bytes:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}?{urllib.parse.urlencode(params)}", data=body, method="POST"
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.read()

    def create(self, db: str) -> None:
        self._post("/query", {"q": f'CREATE DATABASE "{db}"'}, b"")

    def write(self, db: str, lines: list[str]) -> None:
        self._post("/write", {"db": db, "precision": "s"}, "\n".join(lines).encode())

    def query(self, db: str, q: str) -> list[dict]:
        """The series a statement returns; fails on any error InfluxDB reports."""
        url = f"http://127.0.0.1:{self.port}/query?{urllib.parse.urlencode({'db': db, 'q': q, 'epoch': 's'})}"
        with urllib.request.urlopen(url, timeout=30) as resp:
            result = json.loads(resp.read())["results"][0]
        assert "error" not in result, f"{q}\n{result['error']}"
        return result.get("series", [])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
