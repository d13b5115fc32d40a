"""What a scrape keeps: the families the daemon reads (names.USED), the rest cut from the text before parsing,
never a sample the daemon would have read."""

from __future__ import annotations

import pytest

from exporter.exposition_parser import parse
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics
from exporter.vllm import names
from exporter.vllm.names import normalize
from exporter.vllm.scrape import _parse, used_families


def body(old: bool = False, engines: int = 2) -> str:
    m = VllmMetrics(engines=engines, old_names=old)
    for e in range(engines):
        m.set_load(e, EngineLoad(running=3, waiting=1, kv_usage=0.5))
        m.serve_requests(e, 10, prompt_tokens=1000, cached_tokens=400, output_tokens=10)
    return m.render().decode()


@pytest.mark.parametrize("old", [False, True])
@pytest.mark.parametrize("engines", [1, 8])
def test_the_cut_text_gives_the_same_series_as_the_whole(old, engines):
    text = body(old, engines)
    cut = used_families(text)
    assert len(cut) < 0.6 * len(text)  # vLLM's e2e, inter-token and token-count histograms are gone
    whole = normalize(parse(text).samples, used_only=True)
    assert normalize(parse(cut).samples, used_only=True) == whole
    assert names.KV_USAGE in whole and "vllm:time_to_first_token_seconds_bucket" in whole
    assert not any(n.startswith("vllm:e2e_request_latency") for n in whole)


def test_a_used_sample_inside_an_unused_familys_block_keeps_the_block():
    text = (
        "# HELP vllm:e2e_request_latency_seconds e2e\n"
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="m"} 1.0\n'
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'  # untyped, in the block above
        "# HELP vllm:inter_token_latency_seconds itl\n"
        "# TYPE vllm:inter_token_latency_seconds histogram\n"
        'vllm:inter_token_latency_seconds_bucket{engine="0",le="1.0",model_name="m"} 1.0\n'
        "# HELP vllm:kv_cache_usage_perc kv\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
    )
    cut = used_families(text)
    assert "vllm:inter_token_latency_seconds_bucket" not in cut
    series = normalize(parse(cut).samples, used_only=True)
    assert [s.value for s in series["vllm:num_requests_running"]] == [3.0]
    assert [s.value for s in series[names.KV_USAGE]] == [0.5]


def test_an_old_name_that_becomes_a_used_one_is_never_cut():
    text = (
        "# HELP vllm:gpu_prefix_cache_hits_total hits\n"
        "# TYPE vllm:gpu_prefix_cache_hits_total counter\n"
        'vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 7.0\n'
        "# HELP vllm:e2e_request_latency_seconds e2e\n"
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 1.0\n'
    )
    series = normalize(parse(used_families(text)).samples, used_only=True)
    assert [s.value for s in series["vllm:prefix_cache_hits_total"]] == [7.0]


def test_a_server_with_only_families_the_daemon_does_not_read_is_still_a_vllm_server():
    text = (
        "# HELP vllm:e2e_request_latency_seconds e2e\n"
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 1.0\n'
        "# HELP vllm:inter_token_latency_seconds itl\n"
        "# TYPE vllm:inter_token_latency_seconds histogram\n"
        'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 1.0\n'
    ).encode()
    result = _parse([text], len(text))
    assert result.ok and result.reason is None and result.series  # not no_vllm_metrics, not unparsable
    garbage = b"<html>502</html>\n"
    assert _parse([garbage], len(garbage)).reason == "unparsable"
