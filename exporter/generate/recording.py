"""The fast recording rules (`level:metric:operation`, numerators and denominators summed before they divide),
evaluated every minute, and their promtool tests."""

from __future__ import annotations

from typing import Any

from exporter import catalog
from exporter.generate.spec import (
    BASE_LABELS,
    ENGINE_BY,
    SERVER_BY,
    SERVER_BY_PROMQL,
    engine_series,
    num,
    seconds,
)
from exporter.generate.thresholds import Thresholds


def recording_rules(t: Thresholds) -> list[dict[str, Any]]:
    sel = t.selector
    by = SERVER_BY_PROMQL
    fw, bw = t.prefix_fast_window, t.prefix_baseline_window
    engine_by = ENGINE_BY
    fast = [
        (
            "server:vllm_headroom_kv_cache_headroom_ratio:min",
            f"min by ({by}) ({catalog.series('kv_cache_headroom_ratio')}{{{sel}}})",
        ),
        (
            "server:vllm_headroom_kv_cache_usage_ratio:max",
            f"max by ({by}) ({catalog.series('kv_cache_usage_ratio')}{{{sel}}})",
        ),
        # each evaluation with KV data stands for one recording interval: summed over 7 days, the hours of data
        (
            "server:vllm_headroom_kv_cache_usage:hours",
            f"count by ({by}) ({catalog.series('kv_cache_usage_ratio')}{{{sel}}}) * 0 + {num(seconds(t.recording_interval) / 3600)}",
        ),
        # Requests waiting for KV capacity, per DP engine. vLLM's num_requests_waiting_by_reason{reason=
        # "capacity"} where it exports it; otherwise the engine's waiting requests while that same engine's
        # cache is full (joined per engine: one full engine says nothing of another's queue).
        (
            "engine:vllm_headroom_requests_waiting_capacity:sum",
            f'sum by ({engine_by}) ({catalog.series("requests_waiting_by_reason")}{{{sel},reason="capacity"}})\nor\n(\n'
            f"  sum by ({engine_by}) ({catalog.series('requests_waiting')}{{{sel}}})\n  * on ({engine_by})\n"
            f"  (max by ({engine_by}) ({catalog.series('kv_cache_usage_ratio')}{{{sel}}}) >= bool {num(t.kv_full_ratio)})\n"
            f"  unless on ({engine_by}) {catalog.series('requests_waiting_by_reason')}{{{sel}}}\n)",
        ),
        (
            "server:vllm_headroom_requests_waiting_capacity:queueing",
            f"max by ({by}) (avg_over_time(engine:vllm_headroom_requests_waiting_capacity:sum[{t.kv_queue_window}]))"
            f" >= bool {num(t.kv_queue_page_requests)}",
        ),
        (
            f"engine:vllm_headroom_preemptions:rate{t.preemption_window}",
            f"sum by ({engine_by}) (rate({catalog.series('preemptions')}{{{sel}}}[{t.preemption_window}]))",
        ),
        (
            "gpu:vllm_headroom_gpu_memory_headroom_ratio:min",
            f"min by (job, cluster, instance, gpu) ({catalog.series('gpu_memory_headroom_ratio')}{{{sel}}})",
        ),
        # GPU memory against the budget vLLM was given: it claims gpu_memory_utilization x total at start and
        # fills it with KV cache, so used/total sits at the budget on a healthy server.
        (
            "gpu:vllm_headroom_gpu_memory_peak_used:ratio",
            f"max by (job, cluster, instance, gpu) ({catalog.series('gpu_memory_peak_used_bytes')}{{{sel}}}\n"
            f"  / {catalog.series('gpu_memory_total_bytes')}{{{sel}}})",
        ),
        (
            "instance:vllm_headroom_gpu_memory_budget:ratio",
            f"max by (job, cluster, instance) ({catalog.series('gpu_memory_utilization_ratio')}{{{sel}}})",
        ),
        (
            "gpu:vllm_headroom_gpu_memory_over_budget:ratio",
            "gpu:vllm_headroom_gpu_memory_peak_used:ratio\n"
            "- on (job, cluster, instance) group_left ()\ninstance:vllm_headroom_gpu_memory_budget:ratio",
        ),
        (
            f"server:vllm_headroom_prefix_cache_hits:rate{fw}",
            f"sum by ({by}) (rate({catalog.series('prefix_cache_hits_tokens')}{{{sel}}}[{fw}]))",
        ),
        (
            f"server:vllm_headroom_prefix_cache_queries:rate{fw}",
            f"sum by ({by}) (rate({catalog.series('prefix_cache_queries_tokens')}{{{sel}}}[{fw}]))",
        ),
        (
            t.hit_ratio_fast,
            f"server:vllm_headroom_prefix_cache_hits:rate{fw} / (server:vllm_headroom_prefix_cache_queries:rate{fw} > 0)",
        ),
        # the long window from the recorded per-server rates (one series a server), not a day of raw
        # per-engine counters re-read every minute
        (
            t.hit_ratio_baseline,
            f"avg_over_time(server:vllm_headroom_prefix_cache_hits:rate{fw}[{bw}])\n"
            f"/\n(avg_over_time(server:vllm_headroom_prefix_cache_queries:rate{fw}[{bw}]) > 0)",
        ),
        (
            "server:vllm_headroom_preemptions:rate5m",
            f"sum by ({by}) (rate({catalog.series('preemptions')}{{{sel}}}[5m]))",
        ),
        (
            "server:vllm_headroom_oom_events:increase1h",
            f"sum by ({by}, stage, phase) (increase({catalog.series('oom_events')}{{{sel}}}[1h]))",
        ),
        # when a loading-stage OOM was seen, and when the engine was last ready: a later successful start
        # clears a loading failure in the weekly verdict
        (
            "server:vllm_headroom_loading_oom:timestamp",
            f'timestamp(sum by ({by}, stage) (increase({catalog.series("oom_events")}{{{sel},phase="loading"}}[5m])) '
            "> 0)",
        ),
        (
            "server:vllm_headroom_engine_ready:timestamp",
            f"timestamp(max by ({by}) ({catalog.series('engine_ready')}{{{sel}}}) == 1)",
        ),
        ("server:vllm_headroom_requests_waiting:sum", f"sum by ({by}) ({catalog.series('requests_waiting')}{{{sel}}})"),
        ("server:vllm_headroom_requests_running:sum", f"sum by ({by}) ({catalog.series('requests_running')}{{{sel}}})"),
    ]
    return [
        {
            "name": "vllm-headroom.recording",
            "interval": t.recording_interval,
            "rules": [{"record": r, "expr": e} for r, e in fast],
        }
    ]


def recording_tests(t: Thresholds, rule_files: list[str]) -> dict[str, Any]:
    tests = [
        {
            "name": "prefix hit ratio sums hits and queries over engines before dividing",
            "interval": "1m",
            "input_series": [
                {"series": s, "values": v}
                for s, v in (
                    engine_series(catalog.series("prefix_cache_hits_tokens"), "0+90x20", engine="0"),
                    engine_series(catalog.series("prefix_cache_queries_tokens"), "0+100x20", engine="0"),
                    engine_series(catalog.series("prefix_cache_hits_tokens"), "0+10x20", engine="1"),
                    engine_series(catalog.series("prefix_cache_queries_tokens"), "0+900x20", engine="1"),
                )
            ],
            "promql_expr_test": [
                {
                    "expr": f"round({t.hit_ratio_fast} * 1000)",
                    "eval_time": "15m",
                    "exp_samples": [
                        {
                            "labels": "{"
                            + ",".join(f'{k}="{BASE_LABELS[k]}"' for k in SERVER_BY if k in BASE_LABELS)
                            + "}",
                            "value": 100,
                        }
                    ],  # 100 / 1000, not the mean of 0.9 and 0.011
                },
                {
                    "expr": t.hit_ratio_fast,
                    "eval_time": "40m",
                    "exp_samples": [],
                },
            ],  # no queries in the window: absent, not 0 and not NaN
        }
    ]
    return {"rule_files": rule_files, "evaluation_interval": "1m", "tests": tests}
