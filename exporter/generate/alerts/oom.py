"""Memory failures the log shows, tagged by stage: a runtime OOM pages, a loading-stage OOM opens a ticket."""

from __future__ import annotations

from exporter import catalog
from exporter.generate.spec import (
    SERVER_BY,
    SERVER_BY_PROMQL,
    AlertSpec,
    Case,
    minutes,
    server_series,
)
from exporter.generate.thresholds import Thresholds


def specs(t: Thresholds) -> list[AlertSpec]:
    sel = t.selector
    by = SERVER_BY_PROMQL
    out: list[AlertSpec] = []

    def oom_alert(
        name: str,
        phase: str,
        severity: str,
        routing: str,
        summary: str,
        description: str,
        runbook: dict[str, str],
        stage: str,
        other_phase_stage: str,
        window: str,
    ) -> AlertSpec:
        expr = f'sum by ({by}, stage) (increase({catalog.series("oom_events")}{{{sel},phase="{phase}"}}[{window}])) > 0'
        other = "loading" if phase == "runtime" else "runtime"
        w = int(minutes(window))
        return AlertSpec(
            name,
            severity,
            routing,
            "0m",
            expr,
            summary,
            description,
            SERVER_BY + ("stage",),
            [
                Case(
                    "an OOM in this phase fires",
                    [server_series(catalog.series("oom_events"), "0 0 0 1 1 1 1 1", stage=stage, phase=phase)],
                    "5m",
                    True,
                    {"stage": stage},
                ),
                Case(
                    f"a {other}-stage OOM does not fire it",
                    [
                        server_series(
                            catalog.series("oom_events"), "0 0 0 1 1 1 1 1", stage=other_phase_stage, phase=other
                        )
                    ],
                    "5m",
                    False,
                ),
                Case(
                    "a flat counter does not fire",
                    [server_series(catalog.series("oom_events"), "2x20", stage=stage, phase=phase)],
                    "15m",
                    False,
                ),
                Case(
                    f"an OOM ages out after {window}",
                    [server_series(catalog.series("oom_events"), f"0 1x{w + 30}", stage=stage, phase=phase)],
                    f"{w + 15}m",
                    False,
                ),
            ],
            runbook,
        )

    out.append(
        oom_alert(
            "VllmRuntimeOOM",
            "runtime",
            "critical",
            "page",
            "Runtime OOM on {{ $labels.server }} during {{ $labels.stage }} ({{ $value | humanize }} in 10m)",
            "The engine ran out of GPU memory while serving, after readiness. Reduce context, concurrency or cache "
            "retention, replay the same request set, and scale only if the target load still leaves no stable headroom.",
            {
                "meaning": "vLLM's engine hit an out-of-memory error during a prefill or decode step after it was ready; "
                "in V1 the engine process dies and in-flight requests fail.",
                "confirm": "`vllm-headroom triage <log>` on the server's log: stage prefill or decode, `ready before: yes`. "
                f"Check `{catalog.series('gpu_memory_peak_used_bytes')}` and `{catalog.series('kv_cache_usage_ratio')}` just "
                "before the failure.",
                "first": "Reduce one at a time: the context (`--max-model-len`, prompt caps), the concurrency "
                "(`--max-num-seqs`, `--max-num-batched-tokens` for long prefills), or the cache retention "
                "(prefix caching, `--prefix-cache-retention-interval` (vLLM's CacheConfig.prefix_cache_retention_interval in vllm/config/cache.py, for sliding-window and Mamba-style cache groups; recent releases only, so check `vllm serve --help`; vLLM has no environment variable of that name)). Replay the same request set after "
                "each change and watch the headroom.",
                "scale": "If the target load still leaves no stable headroom after those changes, scale out (more "
                "replicas or GPUs); new hardware is not the first move for a runtime OOM.",
                "evidence": "The triage report, the scheduler dump's step kind, peak GPU memory, KV usage, running and "
                "waiting requests at the time, and the settings you changed.",
            },
            "prefill",
            "weight_loading",
            "10m",
        )
    )
    out.append(
        oom_alert(
            "VllmLoadingStageOOM",
            "loading",
            "warning",
            "ticket",
            "Loading-stage OOM on {{ $labels.server }} during {{ $labels.stage }}: check image, driver, hardware and "
            "topology",
            "The engine ran out of memory before it was ready. Lowering concurrency does not help: check the image, the "
            "driver, the hardware and the parallel topology first.",
            {
                "meaning": "vLLM failed while loading weights, compiling or capturing CUDA graphs, sizing or allocating "
                "the KV cache, or warming up: the engine never served.",
                "confirm": "`vllm-headroom triage <log>`: the stage and the memory facts the log states (weights per GPU, "
                "available KV cache memory, vLLM's own estimate of the max model length that would fit).",
                "first": "Lowering concurrency does not help here. Check the image (vLLM version, a CUDA 13 build for "
                "GB300), the driver (R580+), the hardware (GPU model, count, memory) and the parallel topology "
                "(TP/PP/DP/EP sizes); make sure no other process holds GPU memory; for KV-cache failures compare "
                "`--max-model-len` with the capacity the log states and revisit `--gpu-memory-utilization`. One "
                "exception, which triage names: a hybrid model's `max_num_seqs (N) exceeds available Mamba cache "
                "blocks (M)` is fixed by `--max-num-seqs` at most M (or more `--gpu-memory-utilization`).",
                "scale": "If the model's weights and one max-length request cannot fit on this topology at any setting, "
                "this is a migrate-or-scale decision: more or larger GPUs, or a different parallel layout.",
                "evidence": f"The triage report (stage, startup timeline, memory split), `{catalog.series('environment_check')}`, "
                "the image tag, driver and CUDA versions, GPU model and count, and the parallel sizes.",
            },
            "kv_cache_alloc",
            "decode",
            "1h",
        )
    )  # 1h: a crash loop restarting every few minutes stays one alert
    return out
