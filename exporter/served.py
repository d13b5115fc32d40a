"""/metrics bodies built once per change of state and served as cached bytes to every scraper.

A Prometheus scrape asks (scrape/scrape.go, `acceptHeader` and `acceptEncodingHeader`, v2.53.0 and v3.14.0)
for OpenMetrics first and for gzip. Rendering thousands of samples and compressing them for every request
made us 5x slower than node_exporter under that header, so the families are collected once per state
version (exporter/daemon.py `Daemon.state_version`: a scrape of a vLLM server, a log poll, a changed GPU
reading), and each format and its gzip is written at most once per version, when first asked for. Two
Prometheus replicas, a curl and a dashboard all read the same bytes. Process and GC series are as of the
last build; `max_age_s` bounds how stale they get while nothing else changes.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable, Hashable

from prometheus_client.registry import Collector

from exporter.exposition_writer import openmetrics_format, text_format

TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
GZIP_LEVEL = 1  # bodies are highly repetitive: level 1 already shrinks them ~15x, at a fraction of level 9's CPU
# The OpenMetrics versions we write the same bytes for (1.0.0; 0.0.1 differs from it in nothing we use).
_OM_VERSIONS = ("", "1.0.0", "0.0.1")
_TEXT_VERSIONS = ("", "0.0.4", "1.0.0")  # 1.0.0 is 0.0.4 plus UTF-8 names; ours are all legacy names


def _params(part: str) -> tuple[str, dict[str, str]]:
    fields = part.split(";")
    params = {}
    for f in fields[1:]:
        key, _, value = f.partition("=")
        params[key.strip().lower()] = value.strip().strip('"')
    return fields[0].strip().lower(), params


def _q(params: dict[str, str]) -> float:
    try:
        return min(1.0, max(0.0, float(params.get("q", "1"))))
    except ValueError:
        return 0.0


def negotiate(accept: str) -> str:
    """'openmetrics' when the Accept header prefers it (by q, ties to OpenMetrics), else 'text'.

    Nothing acceptable (say `application/json`) still gets text, as prometheus_client answers: a 406 would
    only break a curl with an odd default.
    """
    om = text = 0.0
    for part in accept.split(","):
        if not part.strip():
            continue
        mtype, params = _params(part)
        q = _q(params)
        version = params.get("version", "")
        if mtype == "application/openmetrics-text" and version in _OM_VERSIONS:
            om = max(om, q)
        elif (mtype == "text/plain" and version in _TEXT_VERSIONS) or mtype in ("text/*", "*/*"):
            text = max(text, q)
    return "openmetrics" if om > 0 and om >= text else "text"


def accepts_gzip(accept_encoding: str) -> bool:
    """True when `gzip` (or `*`) is listed with q > 0 and gzip is not refused by name."""
    gz = star = None
    for part in accept_encoding.split(","):
        coding, params = _params(part)
        if coding == "gzip":
            gz = _q(params)
        elif coding == "*":
            star = _q(params)
    if gz is not None:
        return gz > 0
    return bool(star)


class ExpositionCache:
    """The current bodies for `version()`: (format, gzip) -> bytes, filled as scrapers ask."""

    def __init__(
        self,
        registry: Collector,
        version: Callable[[], Hashable],
        max_age_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.version = version
        self.max_age_s = max_age_s
        self.clock = clock
        self._key: Hashable = object()
        self._built = float("-inf")
        self._families: list = []
        self._bodies: dict[tuple[str, bool], bytes] = {}
        self.builds = 0  # collections done: what the tests and the benchmark count

    def body(self, fmt: str, gz: bool) -> bytes:
        key = self.version()
        now = self.clock()
        if key != self._key or now - self._built > self.max_age_s:
            self._families = list(self.registry.collect())
            self._bodies = {}
            self._key, self._built = key, now
            self.builds += 1
        out = self._bodies.get((fmt, gz))
        if out is None:
            if gz:
                out = gzip.compress(self.body(fmt, False), compresslevel=GZIP_LEVEL, mtime=0)
            else:
                out = (openmetrics_format if fmt == "openmetrics" else text_format)(self._families)
            self._bodies[(fmt, gz)] = out
        return out

    @staticmethod
    def content_type(fmt: str) -> str:
        return OPENMETRICS if fmt == "openmetrics" else TEXT
