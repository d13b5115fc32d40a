"""KV cache and prefix cache per server: usage and headroom per DP engine, capacity from the metric and from the log,
vLLM's own max concurrency, the prefix-cache hit ratio and the memory budget vLLM was started with."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from exporter import derive
from exporter.catalog import family

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from exporter.state import ServerReading


def _max_concurrency(cache_config: dict[str, str], facts: dict[str, Any]) -> float | None:
    """vllm:cache_config_info's kv_cache_max_concurrency where it has a number, else the startup log's."""
    raw = cache_config.get("kv_cache_max_concurrency")
    c: float | None
    try:
        c = float(raw) if raw not in (None, "", "None") else facts.get("max_concurrency")
    except ValueError:
        c = facts.get("max_concurrency")
    return None if c is None else float(c)


class KvCacheCollector:
    """The KV-cache and prefix-cache families; `window_s` is the prefix-cache hit ratio's window."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s

    def collect(self, servers: Sequence[ServerReading]) -> Iterator[Metric]:
        usage = family("kv_cache_usage_ratio")
        headroom = family("kv_cache_headroom_ratio")
        cap = family("kv_cache_capacity_tokens")
        cap_log = family("kv_cache_capacity_log_tokens")
        mismatch = family("kv_cache_capacity_mismatch")
        conc = family("max_concurrency")
        hit = family("prefix_cache_hit_ratio")
        enabled = family("prefix_cache_enabled")
        budget = family("gpu_memory_utilization_ratio")
        window = family("prefix_cache_window_seconds")
        window.add_metric([], self.window_s)
        for reading in servers:
            st, facts = reading.state, reading.facts
            for (model, engine), u in sorted(st.kv_usage.items()):
                usage.add_metric([st.name, model, engine], u)
                headroom.add_metric([st.name, model, engine], 1.0 - u)
            log_tokens = facts.get("kv_cache_tokens")
            metric_tokens = derive.capacity_from_config(st.cache_config)
            best = metric_tokens or log_tokens
            if best:
                cap.add_metric([st.name], best)
            if log_tokens:
                cap_log.add_metric([st.name], log_tokens)
            mm = derive.capacity_mismatch(metric_tokens, log_tokens)
            if mm is not None:
                mismatch.add_metric([st.name], 1 if mm else 0)
            c = _max_concurrency(st.cache_config, facts)
            if c is not None:
                conc.add_metric([st.name], c)
            for model, ratio in sorted(st.hit_ratios().items()):
                hit.add_metric([st.name, model], ratio)
            en = derive.prefix_enabled(st.cache_config)
            if en is None and isinstance(facts.get("enable_prefix_caching"), bool):
                en = facts["enable_prefix_caching"]
            if en is not None:
                enabled.add_metric([st.name], 1 if en else 0)
            util = derive.memory_utilization(st.cache_config, facts)
            if util is not None:
                budget.add_metric([st.name], util)
        yield from (usage, headroom, cap, cap_log, mismatch, conc, hit, enabled, window, budget)
