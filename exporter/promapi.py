"""The one Prometheus HTTP API client (the report, and the tests that drive a real Prometheus).

`raw` returns the JSON body as Prometheus answered it, error bodies included (a 400 for a bad query says why);
`query` and `range` return the result list and raise PrometheusError, naming the server and the query, for
anything else.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class PrometheusError(Exception):
    pass


class PrometheusAPI:
    def __init__(self, url: str, timeout: float = 30) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def raw(self, path: str, **params: Any) -> dict[str, Any]:
        q = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{q}", timeout=self.timeout) as r:
                return dict(json.loads(r.read()))
        except urllib.error.HTTPError as exc:
            try:
                return dict(json.loads(exc.read()))
            except ValueError:
                raise PrometheusError(f"{self.url}: HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            raise PrometheusError(f"{self.url}: {exc}") from None

    def _result(self, path: str, **params: Any) -> list[dict]:
        body = self.raw(path, **params)
        if body.get("status") != "success":
            raise PrometheusError(f"{self.url}: {body.get('error', 'query failed')} ({params.get('query')})")
        return list(body["data"]["result"])

    def query(self, expr: str, at: float) -> list[dict]:
        return self._result("/api/v1/query", query=expr, time=at)

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self._result("/api/v1/query_range", query=expr, start=start, end=end, step=step)
