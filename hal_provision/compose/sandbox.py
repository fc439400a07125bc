"""The sandbox's driver: the fabric is podman, a pool GPU is a device file in a node container.

Node containers are named after their hosts (sandbox/lifecycle.py runs them with --name HOST),
and compute containers are privileged, so mknod works in them. A host's GPU k is
/dev/nvidia<k> (character device 195:k), its own GPUs first, as the slurm role makes them.
Attaching N makes the next N device files after the highest one present; detaching N removes
the N highest. Which host holds how many of the pool's GPUs is kept in a JSON state file,
created on first use from the active layout (what a converge deployed), after checking that
every host has at least that many device files.

Every podman call goes through one function, `podman`, which the tests replace with a fake
runner that records the argv lists.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from ..files import write_atomic
from . import contract
from .contract import DriverError, Pool

NVIDIA_MAJOR = 195
_DEVICE = re.compile(r"^/dev/nvidia(\d+)$")

Runner = Callable[[list[str]], subprocess.CompletedProcess]


def podman(argv: list[str]) -> subprocess.CompletedProcess:
    """The one podman call: ARGV (starting with "podman") run, its output captured."""
    try:
        return subprocess.run(argv, text=True, capture_output=True, check=False, timeout=60)
    except FileNotFoundError:
        raise DriverError("podman is not installed: the sandbox driver needs it") from None
    except subprocess.TimeoutExpired:
        raise DriverError(f"{' '.join(argv)} took more than 60 s") from None


class SandboxDriver:
    def __init__(self, pool: Pool, initial: dict[str, int], state: Path, runner: Runner | None = None):
        self.pool, self.initial, self.state = pool, initial, Path(state)
        self._runner = runner

    def runner(self, argv: list[str]) -> subprocess.CompletedProcess:
        return (self._runner or podman)(argv)

    # ---- the fabric --------------------------------------------------------------------------

    def _exec(self, host: str, *argv: str) -> str:
        cmd = ["podman", "exec", host, *argv]
        proc = self.runner(cmd)
        if proc.returncode != 0:
            why = contract.one_line(proc.stderr or proc.stdout or f"exit status {proc.returncode}")
            raise DriverError(f"{' '.join(cmd)} failed: {why}")
        return proc.stdout or ""

    def devices(self, host: str) -> list[int]:
        """The indices k of HOST's /dev/nvidia<k>, sorted (its own GPUs and the pool's)."""
        out = self._exec(host, "find", "/dev", "-maxdepth", "1", "-name", "nvidia[0-9]*")
        return sorted(int(m.group(1)) for line in out.splitlines() if (m := _DEVICE.match(line.strip())))

    # ---- the state ---------------------------------------------------------------------------

    def holding(self) -> dict[str, int]:
        if self.state.exists():
            again = "remove it to start again from the active layout"
            try:
                data = contract.loads(self.state.read_bytes())
            except (OSError, ValueError) as e:
                raise DriverError(f"the state file {self.state} is unreadable ({e}): {again}") from None
            if not isinstance(data, dict) or not isinstance(data.get("hosts"), dict):
                raise DriverError(f"the state file {self.state} has no 'hosts' mapping: {again}")
            hosts = {
                h: contract.count_of(n, f"the state file {self.state}: hosts[{h}]") for h, n in data["hosts"].items()
            }
            if data.get("pool") != self.pool.name or set(hosts) != set(self.pool.hosts):
                raise DriverError(
                    f"the state file {self.state} is for pool {contract.shown(data.get('pool'))} on "
                    f"{', '.join(sorted(hosts))}, not pool {self.pool.name} on {', '.join(self.pool.hosts)}"
                )
            return contract.check_holding(self.pool, hosts, f"the state file {self.state}")
        for host in self.pool.hosts:
            present = len(self.devices(host))
            if present < self.initial.get(host, 0):
                raise DriverError(
                    f"{host} has {present} /dev/nvidia* device file(s), fewer than the "
                    f"{self.initial[host]} pool GPU(s) the active layout gives it: converge it first"
                )
        self._save(self.initial)
        return dict(self.initial)

    def _save(self, holding: dict[str, int]) -> None:
        state = {"pool": self.pool.name, "hosts": dict(sorted(holding.items()))}
        write_atomic(self.state, json.dumps(state, indent=1) + "\n")

    # ---- the contract ------------------------------------------------------------------------

    def list(self) -> dict:
        return contract.listing(self.pool, self.holding())

    def attach(self, host: str, count: int) -> dict:
        holding = self.holding()
        contract.check_request(self.pool, holding, "attach", host, count)
        present = self.devices(host)
        start = present[-1] + 1 if present else 0
        made: list[str] = []
        try:
            for k in range(start, start + count):
                self._exec(host, "mknod", "-m", "0666", f"/dev/nvidia{k}", "c", str(NVIDIA_MAJOR), str(k))
                made.append(f"/dev/nvidia{k}")
        except DriverError:
            if made:  # leave the host as it was
                self.runner(["podman", "exec", host, "rm", "-f", *made])
            raise
        holding = contract.after(holding, "attach", host, count)
        self._save(holding)
        return contract.action_result(self.pool, "attach", host, count, holding)

    def detach(self, host: str, count: int) -> dict:
        holding = self.holding()
        contract.check_request(self.pool, holding, "detach", host, count)
        present = self.devices(host)
        if len(present) < count:
            raise DriverError(
                f"{host} has {len(present)} /dev/nvidia* device file(s), the state says it holds "
                f"{holding[host]} of pool {self.pool.name}'s: the state file {self.state} is stale"
            )
        gone = [f"/dev/nvidia{k}" for k in present[-count:]]
        self._exec(host, "rm", "-f", *gone)
        holding = contract.after(holding, "detach", host, count)
        self._save(holding)
        return contract.action_result(self.pool, "detach", host, count, holding)
