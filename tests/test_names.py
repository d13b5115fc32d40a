"""Old and new vLLM names side by side: normalized once, never double counted."""

from __future__ import annotations

from exporter.exposition_parser import parse
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics
from exporter.vllm.names import canonical, normalize


def series(old: bool, engines: int = 2):
    m = VllmMetrics(engines=engines, old_names=old)
    for e in range(engines):
        m.set_load(e, EngineLoad(running=1, waiting=0, kv_usage=0.25 + 0.5 * e))
        m.serve_requests(e, 10, prompt_tokens=1000, cached_tokens=400, output_tokens=10)
    return normalize(parse(m.render().decode()).samples)


def test_canonical_names():
    assert canonical("vllm:gpu_cache_usage_perc") == "vllm:kv_cache_usage_perc"
    assert canonical("vllm:gpu_prefix_cache_hits_total") == "vllm:prefix_cache_hits_total"
    assert canonical("vllm:time_per_output_token_seconds_bucket") == "vllm:inter_token_latency_seconds_bucket"
    assert canonical("vllm:num_requests_running") == "vllm:num_requests_running"


def test_old_and_new_payloads_normalize_to_the_same_series():
    old, new = series(True), series(False)
    for name in (
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_hits_total",
        "vllm:prefix_cache_queries_total",
        "vllm:inter_token_latency_seconds_bucket",
    ):
        assert sorted((s.labels, s.value) for s in old[name]) == sorted((s.labels, s.value) for s in new[name])
    assert not any(n.startswith("vllm:gpu_") for n in old)


def test_transition_release_with_both_names_keeps_the_new_only():
    text = (
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.9\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.4\n'
        'vllm:gpu_prefix_cache_hits_total{engine="0",model_name="m"} 100\n'
    )
    out = normalize(parse(text).samples)
    assert [s.value for s in out["vllm:kv_cache_usage_perc"]] == [0.4]
    assert [s.value for s in out["vllm:prefix_cache_hits_total"]] == [100]


def test_dp_engines_are_kept_apart():
    out = series(False, engines=8)
    engines = sorted(s.label("engine") for s in out["vllm:kv_cache_usage_perc"])
    assert engines == [str(i) for i in range(8)]
