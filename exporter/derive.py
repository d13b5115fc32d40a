"""Signals derived from what vLLM reports: KV-cache headroom, prefix-cache hit ratio, capacity.

The hit ratio is hits / queries over a window, computed from the two counters per engine: increases are
summed across scrapes, a counter that went down (a vLLM restart) counts from zero, and with no queries in
the window the ratio is absent, not 0 and not NaN. Numerator and denominator are summed over engines
first, then divided: ratios are never averaged.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from exporter.exposition_parser import Sample
from exporter.vllm import names

CAPACITY_MISMATCH = 0.10  # metric and log disagree by more than this fraction: flagged


@dataclass(slots=True)
class _Point:
    t: float
    hits: float
    queries: float


class CounterWindow:
    """Increases of a (hits, queries) counter pair over a sliding window, safe across counter resets."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.points: deque[_Point] = deque()

    def add(self, t: float, hits: float, queries: float) -> None:
        self.points.append(_Point(t, hits, queries))
        # keep one point at or before the window's start as the baseline
        while len(self.points) > 2 and self.points[1].t <= t - self.window_s:
            self.points.popleft()

    def increases(self) -> tuple[float, float]:
        hits = queries = 0.0
        pts = self.points
        for i in range(1, len(pts)):
            a, b = pts[i - 1], pts[i]
            reset = b.queries < a.queries or b.hits < a.hits
            hits += b.hits if reset else b.hits - a.hits
            queries += b.queries if reset else b.queries - a.queries
        return hits, queries


def _by_engine(samples: list[Sample] | None) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for s in samples or ():
        key = (s.label("model_name"), s.label("engine"))
        out[key] = out.get(key, 0.0) + s.value
    return out


def kv_usage(series: dict[str, list[Sample]]) -> dict[tuple[str, str], float]:
    """KV-cache usage 0..1 per (model_name, engine)."""
    return {k: min(max(v, 0.0), 1.0) for k, v in _by_engine(series.get(names.KV_USAGE)).items()}


def prefix_counters(series: dict[str, list[Sample]]) -> dict[tuple[str, str], tuple[float, float]]:
    """(hits, queries) per (model_name, engine), from the V1 counters."""
    hits = _by_engine(series.get("vllm:prefix_cache_hits_total"))
    queries = _by_engine(series.get("vllm:prefix_cache_queries_total"))
    return {k: (hits.get(k, 0.0), q) for k, q in queries.items()}


def v0_hit_rate(series: dict[str, list[Sample]]) -> dict[str, float]:
    """V0's own hit-rate gauge per model (0..1), for servers too old for the counters.

    V0 reports -1 when prefix caching is off, and its figure is an average since start: a value outside
    0..1 means "no ratio", never a negative one. The counters win wherever they exist (see hit_ratios).
    """
    out: dict[str, float] = {}
    for s in series.get(names.PREFIX_HIT_RATE_V0) or ():
        if 0.0 <= s.value <= 1.0:
            out[s.label("model_name")] = s.value
    return out


def memory_utilization(cfg: dict[str, str], facts: dict) -> float | None:
    """The gpu_memory_utilization vLLM claims of each GPU (0..1]: cache_config_info's label, else the log's.

    vLLM's CacheConfig.gpu_memory_utilization (vllm/config/cache.py; default 0.92 on main at commit 002f10e,
    0.9 in earlier releases) is the per-instance share of the GPU's total it reserves at start and fills with
    KV cache; cache_config_info carries every CacheConfig field as a label (CacheConfig.metrics_info).
    """
    for value in (cfg.get("gpu_memory_utilization"), facts.get("gpu_memory_utilization")):
        try:
            v = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if 0.0 < v <= 1.0:
            return v
    return None


def cache_config(series: dict[str, list[Sample]]) -> dict[str, str]:
    """The labels of vllm:cache_config_info (the first engine's: they describe one shared config)."""
    for s in series.get(names.CACHE_CONFIG) or ():
        return dict(s.labels)
    return {}


def capacity_from_config(cfg: dict[str, str]) -> float | None:
    """KV capacity in tokens: `kv_cache_size_tokens` where vLLM has it, else blocks x block size."""
    try:
        if cfg.get("kv_cache_size_tokens") not in (None, "", "None"):
            return float(cfg["kv_cache_size_tokens"])
        blocks, size = cfg.get("num_gpu_blocks"), cfg.get("block_size")
        if blocks not in (None, "", "None") and size not in (None, "", "None"):
            return float(blocks) * float(size)
    except ValueError:
        return None
    return None


def prefix_enabled(cfg: dict[str, str]) -> bool | None:
    value = cfg.get("enable_prefix_caching")
    if value is None:
        return None
    return value.strip().lower() in ("true", "1")


def capacity_mismatch(metric_tokens: float | None, log_tokens: float | None) -> bool | None:
    """True when vLLM's metric and its startup log disagree on KV capacity (seen on hybrid models)."""
    if not metric_tokens or not log_tokens:
        return None
    return abs(metric_tokens - log_tokens) / max(metric_tokens, log_tokens) > CAPACITY_MISMATCH
