"""Derived signals: the prefix hit ratio over a window, across resets and idle periods; capacity."""

from __future__ import annotations

from exporter import derive
from exporter.config import ServerConfig
from exporter.exposition_parser import Sample, parse
from exporter.state import ServerState
from exporter.vllm import names
from exporter.vllm.names import normalize
from exporter.vllm.scrape import ScrapeResult


def result(engines: dict[str, tuple[float, float]], kv: float = 0.5, model: str = "m") -> ScrapeResult:
    lines = []
    for e, (hits, queries) in engines.items():
        lines.append(f'vllm:prefix_cache_hits_total{{engine="{e}",model_name="{model}"}} {hits}')
        lines.append(f'vllm:prefix_cache_queries_total{{engine="{e}",model_name="{model}"}} {queries}')
        lines.append(f'vllm:kv_cache_usage_perc{{engine="{e}",model_name="{model}"}} {kv}')
    return ScrapeResult(True, series=normalize(parse("\n".join(lines)).samples))


def state(window: float = 60) -> ServerState:
    return ServerState(ServerConfig(name="s"), window, None)


def test_ratio_sums_numerators_and_denominators_over_engines():
    s = state()
    s.update(result({"0": (0, 0), "1": (0, 0)}), 0)
    s.update(result({"0": (90, 100), "1": (10, 900)}), 10)
    assert s.hit_ratios() == {"m": 100 / 1000}  # not the mean of 0.9 and 0.011


def test_no_traffic_means_absent_not_zero():
    s = state()
    s.update(result({"0": (50, 100)}), 0)
    s.update(result({"0": (50, 100)}), 10)
    assert s.hit_ratios() == {}


def test_counter_reset_counts_from_zero():
    s = state()
    s.update(result({"0": (800, 1000)}), 0)
    s.update(result({"0": (900, 1100)}), 10)  # +100 / +100
    s.update(result({"0": (10, 100)}), 20)  # vLLM restarted: +10 / +100
    h, q = s.windows[("m", "0")].increases()
    assert (h, q) == (110, 200)
    assert s.hit_ratios()["m"] == 110 / 200


def test_window_forgets_old_increases():
    s = state(window=30)
    s.update(result({"0": (0, 0)}), 0)
    s.update(result({"0": (100, 100)}), 10)  # a burst of hits, then only misses
    for t in range(20, 100, 10):
        s.update(result({"0": (100, 100 + t)}), t)
    h, q = s.windows[("m", "0")].increases()
    assert h == 0 and q == 30
    assert s.hit_ratios()["m"] == 0.0


def test_capacity_from_cache_config():
    assert derive.capacity_from_config({"kv_cache_size_tokens": "2715392", "num_gpu_blocks": "1"}) == 2715392
    assert derive.capacity_from_config({"num_gpu_blocks": "1000", "block_size": "16"}) == 16000
    assert derive.capacity_from_config({"num_gpu_blocks": "None", "block_size": "16"}) is None
    assert derive.capacity_mismatch(2_000_000, 900_000) is True
    assert derive.capacity_mismatch(2_000_000, 1_950_000) is False
    assert derive.capacity_mismatch(None, 5) is None


def test_kv_usage_clamped_and_failed_scrape_clears_it():
    s = state()
    s.update(result({"0": (0, 0)}, kv=1.2), 0)
    assert s.kv_usage == {("m", "0"): 1.0}
    s.update(ScrapeResult(False, "refused"), 5)
    assert s.kv_usage == {} and not s.up and s.errors["refused"] == 1


def test_cardinality_is_capped_and_counted():
    from exporter.state import MAX_ENGINES

    s = state()
    engines = {str(e): (10, 100) for e in range(MAX_ENGINES + 36)}
    s.update(result(engines), 0)
    assert len(s.kv_usage) == MAX_ENGINES
    assert s.dropped_series == 36 * 3  # hits, queries and usage of each engine over the cap


def test_windows_of_engines_gone_for_longer_than_the_window_are_forgotten():
    s = state(window=30)
    for t in range(0, 300, 10):  # a new DP engine every scrape, each seen once (churn)
        s.update(result({f"e{t}": (t, 2 * t + 1)}), t)
    assert len(s.windows) <= 5


def test_v0_hit_rate_of_minus_one_is_no_ratio():
    """V0 exports -1 when prefix caching is off: never a negative ratio."""
    off = {names.PREFIX_HIT_RATE_V0: [Sample(names.PREFIX_HIT_RATE_V0, (("model_name", "m"),), -1.0)]}
    on = {names.PREFIX_HIT_RATE_V0: [Sample(names.PREFIX_HIT_RATE_V0, (("model_name", "m"),), 0.4)]}
    assert derive.v0_hit_rate(off) == {}
    assert derive.v0_hit_rate(on) == {"m": 0.4}


def test_memory_utilization_prefers_the_metric_then_the_log():
    assert derive.memory_utilization({"gpu_memory_utilization": "0.97"}, {"gpu_memory_utilization": 0.9}) == 0.97
    assert derive.memory_utilization({}, {"gpu_memory_utilization": 0.9}) == 0.9
    assert derive.memory_utilization({"gpu_memory_utilization": "None"}, {}) is None
    assert derive.memory_utilization({"gpu_memory_utilization": "1.5"}, {}) is None
