"""The client of the fabric manager's REST API that docs/composable-driver.md describes ("the
API this stub speaks"): a pool's status with each host's GPU count, attach N GPUs to a host,
detach N, JSON both ways, errors as HTTP statuses with a message.

An HTTP 4xx is the fabric manager refusing (nothing changed): a refusal, exit 1. A 5xx, an
answer that is not the API's JSON, or a server that cannot be reached is a driver error, exit 2.
Before attaching or detaching, the driver reads the pool's status and applies the contract's
own checks, so a request every driver refuses is refused with the same words, and the fabric
manager is asked only for what should succeed.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from . import contract
from .contract import DriverError, Pool, Refusal

TIMEOUT_S = 30


class RestDriver:
    def __init__(self, pool: str, url: str, timeout: float = TIMEOUT_S):
        if not url:
            raise DriverError("the rest driver needs --url, the fabric manager's base URL")
        self.pool_name, self.base, self.timeout = pool, url.rstrip("/"), timeout

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        url = f"{self.base}/v1/pools/{urllib.parse.quote(self.pool_name, safe='')}{path}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Accept": "application/json", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            message = _message(e.read()) or e.reason
            what = f"{method} {url}: HTTP {e.code}: {message}"
            if 400 <= e.code < 500:
                raise Refusal(f"the fabric manager refused {what}") from None
            raise DriverError(f"the fabric manager failed {what}") from None
        except urllib.error.URLError as e:
            raise DriverError(f"cannot reach the fabric manager at {self.base}: {getattr(e.reason, 'strerror', None) or e.reason}") from None
        except (TimeoutError, OSError) as e:
            raise DriverError(f"cannot reach the fabric manager at {self.base}: {e}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise DriverError(f"{method} {url} answered something that is not JSON") from None

    def _status(self, answer: dict) -> tuple[Pool, dict[str, int]]:
        """The API's pool status as the contract's pool and holding."""
        try:
            hosts = {str(h["name"]): int(h["attached"]) for h in answer["hosts"]}
            pool = Pool(name=str(answer["pool"]), gpu_type=str(answer["gpu"]["type"]), total=int(answer["gpu"]["total"]),
                        hosts=tuple(sorted(hosts)), slots_per_host=int(answer["slots_per_host"]))
        except (KeyError, TypeError, ValueError) as e:
            raise DriverError(f"the fabric manager's pool status lacks or mistypes {e}") from None
        return pool, hosts

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
        text = json.loads(raw).get("message", "")
    except (ValueError, AttributeError):
        text = raw.decode(errors="replace")
    return contract.one_line(text)[:300]
