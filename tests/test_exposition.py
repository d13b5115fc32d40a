"""Our exposition parser agrees with prometheus_client's on everything vLLM and prometheus_client emit."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.openmetrics.exposition import generate_latest as om_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition_parser import parse
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics


def theirs(text: str) -> list[tuple]:
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append((s.name, tuple(sorted(s.labels.items())), _key(s.value)))
    return sorted(out)


def ours(text: str) -> list[tuple]:
    expo = parse(text)
    assert expo.errors == 0, expo.first_error
    return sorted((s.name, s.labels, _key(s.value)) for s in expo.samples)


def _key(v: float):
    return "nan" if math.isnan(v) else v


def payload(engines: int, old: bool) -> str:
    m = VllmMetrics(engines=engines, old_names=old)
    for e in range(engines):
        m.set_load(e, EngineLoad(running=3 + e, waiting=e, kv_usage=0.1 * (e % 10)))
        m.serve_requests(e, 40 + e, prompt_tokens=30_000, cached_tokens=12_000, output_tokens=500, ttft_s=0.7)
    return m.render().decode()


@pytest.mark.parametrize("engines", [1, 8, 32])
@pytest.mark.parametrize("old", [False, True])
def test_same_samples_as_prometheus_client_on_vllm_payloads(engines, old):
    text = payload(engines, old)
    assert ours(text) == theirs(text)
    assert len(ours(text)) > 100 * engines


def test_edge_cases_match():
    r = CollectorRegistry()
    g = Gauge("weird", "help with \\ backslash\nand newline", ["v"], registry=r)
    g.labels('quote " backslash \\ newline \n end').set(float("nan"))
    g.labels("{braces},=commas").set(float("inf"))
    g.labels("").set(-0.0)
    Counter("c", "c", registry=r).inc(1e-9)
    Histogram("h", "h", buckets=(0.1, 1.0), registry=r).observe(5)
    Info("build", "b", registry=r).info({"version": "1.2.3"})
    from prometheus_client import generate_latest

    text = generate_latest(r).decode()
    assert ours(text) == theirs(text)
    expo = parse(text)
    assert expo.types["weird"] == "gauge" and expo.types["h"] == "histogram"
    assert expo.helps["weird"] == "help with \\ backslash\nand newline"
    labels = {s.labels for s in expo.samples if s.name == "weird"}
    assert (("v", 'quote " backslash \\ newline \n end'),) in labels


def test_openmetrics_eof_timestamps_and_exemplars():
    r = CollectorRegistry()
    Counter("req", "requests", ["code"], registry=r).labels("200").inc(3)
    text = om_latest(r).decode()
    assert text.rstrip().endswith("# EOF")
    expo = parse(text + "after_eof 1\n")
    assert {s.name for s in expo.samples} == {"req_total", "req_created"}
    expo = parse('x{a="1"} 5 1700000000.5\ny_total 2 # {trace_id="abc"} 1.0 1700000000\n')
    assert expo.samples[0].timestamp == 1700000000.5
    assert expo.samples[1].value == 2 and expo.errors == 0


def test_bad_lines_are_counted_not_fatal():
    expo = parse('good 1\nno_value\nbad{a="1" 2\n{a="b"} 3\nname{a=unquoted} 4\nx{a="1"}} 1\nalso_good{b="2"} 2\n')
    assert [s.name for s in expo.samples] == ["good", "also_good"]
    assert expo.errors == 5 and expo.first_error


def test_html_error_page_yields_no_samples():
    expo = parse("<html><body><h1>502 Bad Gateway</h1></body></html>\n")
    assert expo.samples == [] and expo.errors == 1


def test_lines_needing_care_keep_their_place_and_spoil_nothing_else():
    text = 'a{x="1"} 1\nb{x="q\\"uote"} 2\nc_total 3 # {trace_id="t"} 1.0\nd{x="1"} oops\r\ne{x="1"} 5\r\n'
    expo = parse(text)
    assert [(s.name, s.labels, s.value) for s in expo.samples] == [
        ("a", (("x", "1"),), 1.0),
        ("b", (("x", 'q"uote'),), 2.0),
        ("c_total", (), 3.0),
        ("e", (("x", "1"),), 5.0),
    ]
    assert expo.errors == 1 and "oops" in expo.first_error


@pytest.mark.parametrize("engines", [1, 8])
def test_crlf_and_a_kept_label_cache_change_nothing(engines):
    from exporter.exposition_parser import LabelCache

    text = payload(engines, False)
    want = ours(text)
    assert ours(text.replace("\n", "\r\n")) == want
    cache = LabelCache()
    for _ in range(3):  # the steady state: the same blocks on every scrape, parsed once
        expo = parse(text, cache)
        assert sorted((s.name, s.labels, _key(s.value)) for s in expo.samples) == want
    assert len(cache.blocks) > 10
    small = LabelCache(limit=50)
    parse(text, small)
    assert len(small.blocks) + len(small.pairs) + len(small.names) <= 50  # bounded: cleared when it grows past
