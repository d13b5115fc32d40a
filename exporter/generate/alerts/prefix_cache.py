"""Prefix caching: a hit ratio that collapses against its own baseline, and caching off where prompts repeat."""

from __future__ import annotations

from exporter import catalog
from exporter.generate.spec import (
    SERVER_BY,
    AlertSpec,
    Case,
    engine_series,
    num,
    server_series,
)
from exporter.generate.thresholds import Thresholds


def specs(t: Thresholds) -> list[AlertSpec]:
    sel = t.selector
    out: list[AlertSpec] = []
    prefix_runbook = {
        "meaning": "The share of prompt tokens served from the prefix cache fell far below its own 1-day level.",
        "confirm": f"`{t.hit_ratio_fast}` against `{t.hit_ratio_baseline}`; check "
        f"`{catalog.series('prefix_cache_enabled')}`, recent restarts (the cache starts empty), routing changes "
        "that split repeat traffic across replicas, and `--prefix-cache-retention-interval` (vLLM's CacheConfig.prefix_cache_retention_interval in vllm/config/cache.py, for sliding-window and Mamba-style cache groups; recent releases only, so check `vllm serve --help`; vLLM has no environment variable of that name).",
        "first": "Restore prefix-aware routing or the retention setting that changed; on hybrid models make sure "
        "`--enable-prefix-caching` is given (it is off by default there).",
        "scale": "A lower hit ratio means more prefill work per request: if headroom and TTFT no longer hold at the "
        "target load, it feeds the weekly scale decision.",
        "evidence": "Hit ratio before and after, the deploy or routing change at that time, TTFT and prefill tokens.",
    }
    frac, floor = t.prefix_collapse_fraction, t.prefix_baseline_min_ratio
    out.append(
        AlertSpec(
            "VllmPrefixCacheHitRatioCollapsed",
            "warning",
            "ticket",
            t.prefix_collapse_for,
            f"({t.hit_ratio_fast} < {num(frac)} * {t.hit_ratio_baseline})\nand\n({t.hit_ratio_baseline} > {num(floor)})",
            "Prefix-cache hit ratio on {{ $labels.server }} fell to {{ $value | humanizePercentage }}, under "
            f"{num(frac * 100)}% of its 1-day level",
            "Repeat prompts stopped hitting the prefix cache.",
            SERVER_BY,
            [
                # 2-minute steps: 1 day of 60% hits, then 2 hours of 10%
                Case(
                    "a collapse against a healthy baseline fires",
                    [
                        engine_series(catalog.series("prefix_cache_queries_tokens"), "0+2000x800"),
                        engine_series(catalog.series("prefix_cache_hits_tokens"), "0+1200x720 864200+200x80"),
                    ],
                    "26h",
                    True,
                    interval="2m",
                ),
                Case(
                    "a steady ratio does not fire",
                    [
                        engine_series(catalog.series("prefix_cache_queries_tokens"), "0+2000x800"),
                        engine_series(catalog.series("prefix_cache_hits_tokens"), "0+1200x800"),
                    ],
                    "26h",
                    False,
                    interval="2m",
                ),
                Case(
                    "a low baseline does not count as a collapse",
                    [
                        engine_series(catalog.series("prefix_cache_queries_tokens"), "0+2000x800"),
                        engine_series(catalog.series("prefix_cache_hits_tokens"), "0+200x720 144020+20x80"),
                    ],
                    "26h",
                    False,
                    interval="2m",
                ),
            ],
            prefix_runbook,
        )
    )
    out.append(
        AlertSpec(
            "VllmPrefixCachingDisabled",
            "info",
            "ticket",
            "15m",
            f'{catalog.series("prefix_cache_enabled")}{{{sel},server=~"{t.prefix_reuse_servers}"}} == 0',
            "Prefix caching is off on {{ $labels.server }}, whose traffic is expected to repeat prefixes",
            "Repeated prefixes are recomputed on every request.",
            SERVER_BY,
            [
                Case("caching off fires", [server_series(catalog.series("prefix_cache_enabled"), "0x30")], "20m", True),
                Case(
                    "caching on does not fire",
                    [server_series(catalog.series("prefix_cache_enabled"), "1x30")],
                    "20m",
                    False,
                ),
            ],
            prefix_runbook,
        )
    )
    return out
