"""What one vLLM answer may bring into /metrics: every series capped, duplicates kept once, drops counted."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from exporter.config import ServerConfig
from exporter.exposition_parser import parse
from exporter.state import MAX_REEXPORTED, ServerState
from exporter.vllm.names import normalize
from exporter.vllm.scrape import ScrapeResult


def state_after(text: str) -> ServerState:
    st = ServerState(ServerConfig(name="s"), 300.0, None)
    st.update(ScrapeResult(True, series=normalize(parse(text).samples)), 0.0)
    return st


def rendered(st: ServerState) -> str:
    return "".join(text for _samples, text in st.reexported().values())


def test_100k_finished_reason_values_are_capped_and_counted():
    lines = ["# TYPE vllm:request_success_total counter"]
    lines += [
        f'vllm:request_success_total{{engine="0",finished_reason="r{i}",model_name="m"}} 1' for i in range(100_000)
    ]
    st = state_after("\n".join(lines) + "\n")
    out = rendered(st)
    assert out.count("\n") == MAX_REEXPORTED
    assert st.dropped_series == 100_000 - MAX_REEXPORTED


def test_series_differing_only_in_a_stripped_label_are_exported_once():
    text = (
        'vllm:num_requests_running{engine="0",model_name="m",pid="1"} 3\n'
        'vllm:num_requests_running{engine="0",model_name="m",pid="2"} 5\n'
    )
    st = state_after(text)
    out = rendered(st)
    assert out.count("vllm_headroom_requests_running{") == 1 and 'pid="' not in out
    assert "3" in out.split("} ")[1]  # the first one, deterministically
    list(text_string_to_metric_families(out))  # a valid exposition
    assert st.dropped_series == 1


def test_a_repeated_sample_is_not_summed_into_kv_usage():
    text = (
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.6\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.6\n'
    )
    st = state_after(text)
    assert st.kv_usage == {("m", "0"): 0.6}  # once summed to 1.0: headroom 0, a critical page
    assert st.dropped_series == 1
