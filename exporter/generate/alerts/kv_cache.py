"""KV cache: the page is on requests waiting for capacity and on preemptions, per DP engine; a full cache alone is
vLLM working as designed. Also the capacity the metric and the log disagree on."""

from __future__ import annotations

from exporter import catalog
from exporter.generate.spec import (
    ENGINE_BY,
    SERVER_BY,
    SERVER_BY_PROMQL,
    AlertSpec,
    Case,
    after,
    engine_series,
    num,
    server_series,
)
from exporter.generate.thresholds import Thresholds


def specs(t: Thresholds) -> list[AlertSpec]:
    sel = t.selector
    by = SERVER_BY_PROMQL
    out: list[AlertSpec] = []
    kv_runbook = {
        "meaning": "Requests wait because a DP engine's KV cache has no room for them: capacity, not compute, is "
        "the limit. A full cache alone is vLLM working as designed (it fills its memory budget with KV "
        "blocks); the symptom is the queue and the preemptions.",
        "confirm": "`engine:vllm_headroom_requests_waiting_capacity:sum` per engine (vLLM's "
        '`num_requests_waiting_by_reason{reason="capacity"}` where it has it), '
        f"`{catalog.series('kv_cache_usage_ratio')}` of the same engine, "
        f"`engine:vllm_headroom_preemptions:rate{t.preemption_window}`, the request mix (prompt "
        f"lengths) and `{catalog.series('kv_cache_capacity_tokens')}`. One engine queueing while the others "
        "have room points at DP routing, not capacity.",
        "first": "Tune: cap context per request, lower `--max-num-seqs`, enable prefix caching where prompts repeat, "
        "or use an fp8 KV cache; balance load across DP engines; replay the same request set to confirm "
        "the queue is gone.",
        "scale": "If requests still wait for capacity at the target load after tuning, add replicas or GPUs (the "
        "scale side of the weekly verdict).",
        "evidence": "Capacity queue and preemption rate per engine, KV usage, request mix, and the capacity figures "
        "from the startup log.",
    }
    engine_labels = tuple(ENGINE_BY.split(", "))
    qw, qn = t.kv_queue_window, t.kv_queue_page_requests
    out.append(
        AlertSpec(
            "VllmRequestsQueueingKVCacheFull",
            "critical",
            "page",
            t.kv_queue_for,
            f"avg_over_time(engine:vllm_headroom_requests_waiting_capacity:sum[{qw}]) >= {num(qn)}",
            "{{ $value | humanize }} requests on average wait for KV-cache capacity on {{ $labels.server }} engine "
            "{{ $labels.engine }} (" + qw + " mean)",
            "Requests queue because this DP engine's KV cache has no room: the symptom of too little capacity, "
            "smoothed and per engine.",
            engine_labels,
            [
                Case(
                    "capacity waiting on one engine fires",
                    [
                        engine_series(catalog.series("requests_waiting_by_reason"), "3x40", reason="capacity"),
                        engine_series(catalog.series("requests_waiting_by_reason"), "0x40", reason="deferred"),
                        engine_series(catalog.series("kv_cache_usage_ratio"), "0.99x40"),
                    ],
                    after(t.kv_queue_for, 10),
                    True,
                ),
                Case(
                    "exactly the page level on average fires",
                    [
                        engine_series(catalog.series("requests_waiting_by_reason"), f"{num(qn)}x40", reason="capacity"),
                        engine_series(catalog.series("kv_cache_usage_ratio"), "0.99x40"),
                    ],
                    after(t.kv_queue_for, 10),
                    True,
                ),
                Case(
                    "a full cache with no queue does not fire (vLLM by design)",
                    [
                        engine_series(catalog.series("requests_waiting_by_reason"), "0x40", reason="capacity"),
                        engine_series(catalog.series("requests_waiting"), "0x40"),
                        engine_series(catalog.series("kv_cache_usage_ratio"), "1x40"),
                    ],
                    after(t.kv_queue_for, 10),
                    False,
                ),
                Case(
                    "deferred waiting is not capacity",
                    [
                        engine_series(catalog.series("requests_waiting_by_reason"), "0x40", reason="capacity"),
                        engine_series(catalog.series("requests_waiting_by_reason"), "6x40", reason="deferred"),
                        engine_series(catalog.series("requests_waiting"), "6x40"),
                        engine_series(catalog.series("kv_cache_usage_ratio"), "1x40"),
                    ],
                    after(t.kv_queue_for, 10),
                    False,
                ),
                Case(
                    "without by_reason: engine 1 queueing at half KV while engine 0 is full does not fire",
                    [
                        engine_series(catalog.series("requests_waiting"), "0x40", engine="0"),
                        engine_series(catalog.series("kv_cache_usage_ratio"), "1x40", engine="0"),
                        engine_series(catalog.series("requests_waiting"), "5x40", engine="1"),
                        engine_series(catalog.series("kv_cache_usage_ratio"), "0.5x40", engine="1"),
                    ],
                    after(t.kv_queue_for, 10),
                    False,
                ),
                Case(
                    "without by_reason: waiting on the engine whose cache is full fires",
                    [
                        engine_series(catalog.series("requests_waiting"), "0x40", engine="0"),
                        engine_series(catalog.series("kv_cache_usage_ratio"), "0.5x40", engine="0"),
                        engine_series(catalog.series("requests_waiting"), "5x40", engine="1"),
                        engine_series(catalog.series("kv_cache_usage_ratio"), "0.99x40", engine="1"),
                    ],
                    after(t.kv_queue_for, 10),
                    True,
                    {"engine": "1"},
                ),
                Case(
                    "a 3-minute queue burst that clears does not fire",
                    [
                        engine_series(catalog.series("requests_waiting_by_reason"), "0x10 4x3 0x30", reason="capacity"),
                        engine_series(catalog.series("kv_cache_usage_ratio"), "1x45"),
                    ],
                    "25m",
                    False,
                ),
            ],
            kv_runbook,
        )
    )

    pr, pw = t.preemption_rate_warning, t.preemption_window
    per_min = pr * 60
    out.append(
        AlertSpec(
            "VllmPreemptionsRising",
            "warning",
            "ticket",
            t.preemption_for,
            f"engine:vllm_headroom_preemptions:rate{pw} > {num(pr)}",
            "{{ $labels.server }} engine {{ $labels.engine }} preempts {{ $value | humanize }} requests/s over "
            + pw
            + " (threshold "
            + num(pr)
            + "/s)",
            "The scheduler keeps evicting running requests to free KV cache: latency grows and work is recomputed.",
            engine_labels,
            [
                Case(
                    "a sustained preemption rate fires",
                    [engine_series(catalog.series("preemptions"), f"0+{num(per_min * 2)}x80")],
                    after(t.preemption_for, 20),
                    True,
                ),
                Case(
                    "just under the rate does not fire",
                    [engine_series(catalog.series("preemptions"), f"0+{num(per_min * 0.9)}x80")],
                    after(t.preemption_for, 20),
                    False,
                ),
                Case(
                    "a 2-minute burst that recovers does not fire",
                    [
                        engine_series(
                            catalog.series("preemptions"), f"0x20 0+{num(per_min * 5)}x2 {num(per_min * 10)}x60"
                        )
                    ],
                    "40m",
                    False,
                ),
            ],
            kv_runbook,
        )
    )

    out.append(
        AlertSpec(
            "VllmKVCacheCapacityMismatch",
            "info",
            "ticket",
            "0m",
            f"max by ({by}) ({catalog.series('kv_cache_capacity_mismatch')}{{{sel}}}) == 1",
            "KV-cache capacity from vLLM's metric and its startup log disagree on {{ $labels.server }}",
            "The two capacity figures differ by more than 10% (seen on hybrid models); trust the metric and record both.",
            SERVER_BY,
            [
                Case(
                    "a mismatch fires",
                    [server_series(catalog.series("kv_cache_capacity_mismatch"), "1x10")],
                    "5m",
                    True,
                ),
                Case(
                    "agreement does not fire",
                    [server_series(catalog.series("kv_cache_capacity_mismatch"), "0x10")],
                    "5m",
                    False,
                ),
            ],
            {
                "meaning": "vLLM's `cache_config_info` and its `GPU KV cache size` line give different capacities.",
                "confirm": f"`{catalog.series('kv_cache_capacity_tokens')}` and `..._capacity_log_tokens`.",
                "first": "Plan with the metric's figure; note the difference in the capacity review.",
                "scale": "Not by itself.",
                "evidence": "Both figures and the vLLM version.",
            },
        )
    )
    return out
