"""The client of the fabric manager's REST API that docs/composable-driver.md describes ("the
API this stub speaks"): a pool's status with each host's GPU count, attach N GPUs to a host,
detach N, JSON both ways, errors as HTTP statuses with a message.

An HTTP 4xx is the fabric manager refusing (nothing changed): a refusal, exit 1. A 5xx, an
answer that is not the API's JSON, or a server that cannot be reached is a driver error, exit 2.
Before attaching or detaching, the driver reads the pool's status and applies the contract's
own checks, so a request every driver refuses is refused with the same words, and the fabric
manager is asked only for what should succeed.

The fabric manager is not trusted to answer well: an answer is read up to MAX_ANSWER_BYTES and
checked as the contract reads everything (`contract.loads`, counts, the holding against the
pool); one that breaks it is a driver error, exit 2, before anything is sent after it.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request

from . import contract
from .contract import DriverError, Pool, Refusal

TIMEOUT_S = 30
MAX_ANSWER_BYTES = 1 << 20  # a pool's status is a few hundred bytes
MAX_MESSAGE_CHARS = 300


class RestDriver:
    def __init__(self, pool: str, url: str, timeout: float = TIMEOUT_S):
        if not url:
            raise DriverError("the rest driver needs --url, the fabric manager's base URL")
        try:
            scheme = urllib.parse.urlsplit(url).scheme
        except ValueError:
            scheme = None
        if scheme not in ("http", "https"):
            raise DriverError(f"--url {contract.shown(url)} is not an http:// or https:// URL")
        self.pool_name, self.base, self.timeout = pool, url.rstrip("/"), timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> object:
        url = f"{self.base}/v1/pools/{urllib.parse.quote(self.pool_name, safe='')}{path}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            url, data=data, method=method, headers={"Accept": "application/json", "Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as e:
            message = _message(e.read(MAX_ANSWER_BYTES)) or e.reason
            what = f"{method} {url}: HTTP {e.code}: {message}"
            if 400 <= e.code < 500:
                raise Refusal(f"the fabric manager refused {what}") from None
            raise DriverError(f"the fabric manager failed {what}") from None
        except urllib.error.URLError as e:
            raise DriverError(
                f"cannot reach the fabric manager at {self.base}: {getattr(e.reason, 'strerror', None) or e.reason}"
            ) from None
        except (TimeoutError, OSError) as e:
            raise DriverError(f"cannot reach the fabric manager at {self.base}: {e}") from None
        except http.client.HTTPException as e:
            raise DriverError(f"{method} {url} answered something that is not HTTP: {type(e).__name__}") from None
        if len(raw) > MAX_ANSWER_BYTES:
            raise DriverError(f"{method} {url} answered more than {MAX_ANSWER_BYTES} bytes")
        try:
            return contract.loads(raw)
        except ValueError as e:
            raise DriverError(f"{method} {url} answered something that is not JSON ({e})") from None

    def _status(self, answer: object) -> tuple[Pool, dict[str, int]]:
        """The API's pool status as the contract's pool and holding, checked: every field the
        contract reads present and of its type, counts whole numbers from 0, each host named
        once, none beyond its slots, no more held than the pool has."""
        what = "the fabric manager's pool status"
        if (
            not isinstance(answer, dict)
            or not isinstance(answer.get("gpu"), dict)
            or not isinstance(answer.get("hosts"), list)
        ):
            raise DriverError(f"{what} is not an object with a 'gpu' object and a 'hosts' list")
        gpu = answer["gpu"]
        missing = [k for k in ("pool", "slots_per_host") if k not in answer] + [
            f"gpu.{k}" for k in ("type", "total") if k not in gpu
        ]
        if missing:
            raise DriverError(f"{what} lacks {', '.join(missing)}")
        if answer["pool"] != self.pool_name:
            raise DriverError(f"{what} is for pool {contract.shown(answer['pool'])}, not {self.pool_name}")
        hosts: dict[str, int] = {}
        for i, h in enumerate(answer["hosts"]):
            if not isinstance(h, dict) or "name" not in h or "attached" not in h:
                raise DriverError(f"{what}: hosts[{i}] is not an object with 'name' and 'attached'")
            host = contract.name_of(h["name"], f"{what}: hosts[{i}].name")
            if host in hosts:
                raise DriverError(f"{what} names host {host} twice")
            hosts[host] = contract.count_of(h["attached"], f"{what}: hosts[{i}].attached")
        pool = Pool(
            name=self.pool_name,
            gpu_type=contract.name_of(gpu["type"], f"{what}: gpu.type"),
            total=contract.count_of(gpu["total"], f"{what}: gpu.total"),
            hosts=tuple(sorted(hosts)),
            slots_per_host=contract.count_of(answer["slots_per_host"], f"{what}: slots_per_host"),
        )
        return pool, contract.check_holding(pool, hosts, what)

    def list(self) -> dict:
        return contract.listing(*self._status(self._call("GET", "")))

    def _act(self, action: str, host: str, count: int) -> dict:
        pool, holding = self._status(self._call("GET", ""))
        contract.check_request(pool, holding, action, host, count)
        pool, holding = self._status(self._call("POST", f"/{action}", {"host": host, "count": count}))
        return contract.action_result(pool, action, host, count, holding)

    def attach(self, host: str, count: int) -> dict:
        return self._act("attach", host, count)

    def detach(self, host: str, count: int) -> dict:
        return self._act("detach", host, count)


def _message(raw: bytes) -> str:
    """An error answer's message, one line: the API's {"message": ...}, else its text."""
    try:
        text = contract.loads(raw).get("message", "")
    except (ValueError, AttributeError):
        text = raw[: MAX_MESSAGE_CHARS * 4].decode(errors="replace")
    return contract.one_line(text)[:MAX_MESSAGE_CHARS]
