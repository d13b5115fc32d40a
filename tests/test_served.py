"""/metrics as Prometheus scrapes it: content negotiation by Accept, gzip by Accept-Encoding, cached bodies.

The headers are the ones Prometheus sends (scrape/scrape.go `acceptHeader`, `acceptEncodingHeader`):
2.42 (Debian bookworm's), 2.53 and 3.x. Bodies are compared with prometheus_client's own encoders and parsed
with its parsers.
"""

from __future__ import annotations

import asyncio
import gzip

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest as om_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as text_parse
from prometheus_client.samples import Exemplar

from exporter.config import parse_config
from exporter.daemon import Daemon
from exporter.exposition_parser import parse
from exporter.exposition_writer import openmetrics_format, text_format
from exporter.metrics import HeadroomCollector
from exporter.served import ExpositionCache, accepts_gzip, negotiate
from exporter.server import CACHE_KEY, build_app
from exporter.simulate.server import start
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics
from exporter.vllm.names import normalize
from exporter.vllm.scrape import ScrapeResult

PROMETHEUS_2_42 = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
PROMETHEUS_2_53 = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
PROMETHEUS_3 = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


@pytest.mark.parametrize(
    "accept,want",
    [
        (PROMETHEUS_2_42, "openmetrics"),
        (PROMETHEUS_2_53, "openmetrics"),
        (PROMETHEUS_3, "openmetrics"),
        ("", "text"),
        ("*/*", "text"),
        ("text/plain", "text"),
        ("text/plain;version=0.0.4", "text"),
        ("application/openmetrics-text", "openmetrics"),
        ("application/openmetrics-text; version=1.0.0", "openmetrics"),
        ("application/openmetrics-text;q=0, text/plain", "text"),
        ("text/plain;q=1, application/openmetrics-text;q=0.5", "text"),
        ("application/openmetrics-text;version=2.0.0", "text"),  # a version we do not write
        ("application/json", "text"),
    ],
)
def test_negotiate(accept, want):
    assert negotiate(accept) == want


@pytest.mark.parametrize(
    "header,want",
    [
        ("gzip", True),
        ("identity", False),
        ("", False),
        ("gzip;q=0", False),
        ("*", True),
        ("br, gzip;q=0.5", True),
        ("deflate, br", False),
        ("*, gzip;q=0", False),
        ("GZIP", True),
    ],
)
def test_accepts_gzip(header, want):
    assert accepts_gzip(header) == want


class Families:
    def collect(self):
        c = CounterMetricFamily("req", "Requests.", labels=["code"], created=None)
        c.add_metric(["200"], 7, created=1700000000.5)
        c.add_sample("req_total", {"code": "500"}, 2, exemplar=Exemplar({"trace_id": 'a"b'}, 1.5, 1700000001))
        yield c
        h = HistogramMetricFamily("lat", "Latency.", labels=["m"], unit="seconds")
        h.add_metric(["x"], [("0.1", 1), ("+Inf", 3)], 4.5, timestamp=1700000002.25)
        yield h
        g = GaugeMetricFamily("g", 'help with "quotes", \\ and\nnewline', labels=["v"])
        g.add_metric(['q"\\\n'], float("nan"))
        g.add_metric(["inf"], float("inf"))
        yield g


def test_openmetrics_writer_matches_prometheus_client_byte_for_byte():
    r = CollectorRegistry()
    Gauge("g", "doc with \\ and\nnewline", ["a"], registry=r).labels('v "q" \\ \n').set(float("nan"))
    Counter("c", "c", ["b"], registry=r).labels("x").inc(1e21)
    Histogram("h", "h", registry=r).observe(0.3)
    Info("i", "i", registry=r).info({"k": "v"})
    assert openmetrics_format(r) == om_latest(r)
    assert openmetrics_format(Families()) == om_latest(Families())


def test_remembered_heads_and_values_write_what_prometheus_client_writes_every_time():
    values = [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1, 1.0, 0.5, 1e6, 123456789.0, 1e21, 2.5e-7]
    r = CollectorRegistry()
    g = Gauge("g", "g", ["a", "b"], registry=r)
    for i, v in enumerate(values):
        g.labels(str(i), 'q"\\').set(v)
    for _ in range(3):  # cold, then from the writer's caches: the same bytes
        assert openmetrics_format(r) == om_latest(r)
        assert text_format(r) == generate_latest(r)
    for i, v in enumerate(values):  # the other sign of zero, and each value under the other label set
        g.labels(str(i), 'q"\\').set(-v if v == 0 else values[-1 - i])
        assert openmetrics_format(r) == om_latest(r)


def _daemon(tmp_path, servers: int = 3) -> Daemon:
    """A daemon with a fixed state (no background scraping), so two renderings can be compared exactly."""
    cfg = parse_config(
        {
            "servers": [{"name": f"vllm-{i}"} for i in range(servers)],
            "state_dir": str(tmp_path / "state"),
            "gpu": {"backend": "none"},
        },
        "test",
    )
    daemon = Daemon(cfg)
    for i, st in enumerate(daemon.servers.values()):
        _feed(st, VllmMetrics(engines=2, model_name=f"model-{i}"), 50)
    return daemon


def _feed(st, m: VllmMetrics, requests: int) -> None:
    for e in range(2):
        m.set_load(e, EngineLoad(running=12, waiting=1, kv_usage=0.6))
        m.serve_requests(e, requests, prompt_tokens=8000, cached_tokens=3000, output_tokens=300)
    st.update(ScrapeResult(True, series=normalize(parse(m.render().decode()).samples), size_bytes=1), 0.0)


def _steady(text: str) -> str:
    """Without the line that differs between two collections of the same state."""
    return "".join(
        line
        for line in text.splitlines(True)
        if "collect_duration_seconds " not in line and "collect_duration_seconds{" not in line
    )


def test_metrics_endpoint_negotiates_compresses_and_serves_the_current_state(tmp_path):
    daemon = _daemon(tmp_path)
    registry = CollectorRegistry()
    registry.register(HeadroomCollector(daemon))  # no process series: the state is fixed, bytes compare exactly

    async def main():
        runner, port = await start(build_app(daemon, registry, background=False))
        url = f"http://127.0.0.1:{port}/metrics"
        cache = runner.app[CACHE_KEY]
        try:
            async with aiohttp.ClientSession(auto_decompress=False) as http:

                async def get(accept: str | None, encoding: str) -> tuple[str, str, bytes]:
                    headers = {"Accept-Encoding": encoding}
                    if accept is not None:
                        headers["Accept"] = accept
                    async with http.get(url, headers=headers) as r:
                        assert r.status == 200
                        body = await r.read()
                        if r.headers.get("Content-Encoding") == "gzip":
                            body = gzip.decompress(body)
                            assert encoding == "gzip"
                        else:
                            assert encoding != "gzip"
                        return r.headers["Content-Type"], r.headers.get("Content-Encoding", ""), body

                om_want = _steady(om_latest(registry).decode())
                text_want = _steady(generate_latest(registry).decode())
                for accept in (PROMETHEUS_2_42, PROMETHEUS_2_53, PROMETHEUS_3):
                    for encoding in ("gzip", "identity"):
                        ctype, _, body = await get(accept, encoding)
                        assert ctype.startswith("application/openmetrics-text; version=1.0.0")
                        assert _steady(body.decode()) == om_want
                        families = list(om_parse(body.decode()))
                        assert any(f.name == "vllm_headroom_kv_cache_usage_ratio" for f in families)
                for accept in (None, "text/plain", "*/*"):
                    for encoding in ("gzip", ""):
                        ctype, _, body = await get(accept, encoding)
                        assert ctype == "text/plain; version=0.0.4; charset=utf-8"
                        assert _steady(body.decode()) == text_want
                        assert any(f.name == "vllm_headroom_kv_cache_usage_ratio" for f in text_parse(body.decode()))
                assert cache.builds == 1  # eight formats and encodings asked for, one collection

                st = daemon.servers["vllm-1"]
                _feed(st, VllmMetrics(engines=2, model_name="model-1", kv_cache_size_tokens=123_456), 60)
                _, _, body = await get(PROMETHEUS_3, "gzip")
                assert cache.builds == 2
                assert _steady(body.decode()) == _steady(om_latest(registry).decode()) != om_want
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_cache_rebuilds_on_a_new_version_or_after_max_age():
    class Registry:
        calls = 0

        def collect(self):
            Registry.calls += 1
            g = GaugeMetricFamily("calls", "Collections so far.")
            g.add_metric([], Registry.calls)
            yield g

    version = [0]
    clock = [100.0]
    cache = ExpositionCache(Registry(), lambda: version[0], max_age_s=5.0, clock=lambda: clock[0])
    first = cache.body("text", False)
    assert cache.body("text", False) is first and cache.body("openmetrics", True)
    assert Registry.calls == 1
    version[0] += 1
    assert b"calls 2.0" in cache.body("text", False)
    clock[0] += 5.5  # nothing changed, but the process series would be stale by now
    assert b"calls 3.0" in gzip.decompress(cache.body("text", True))
    assert Registry.calls == 3
