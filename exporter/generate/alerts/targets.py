"""The vLLM servers themselves: not ready, down, KV series gone, and the environment the guide requires."""

from __future__ import annotations

from exporter import catalog
from exporter.generate.spec import (
    LOADING,
    SERVER_BY,
    SERVER_BY_PROMQL,
    AlertSpec,
    Case,
    after,
    engine_series,
    minutes,
    series,
    server_series,
)
from exporter.generate.thresholds import Thresholds
from exporter.vllm import names

# the KV-usage gauge's name before vLLM renamed it (exporter/vllm/names.py RENAMES)
KV_USAGE_BEFORE = next(old for old, new in names.RENAMES.items() if new == names.KV_USAGE)


def specs(t: Thresholds) -> list[AlertSpec]:
    sel = t.selector
    by = SERVER_BY_PROMQL
    out: list[AlertSpec] = []
    ready_runbook = {
        "meaning": "The engine is not serving: it is still loading, crashed, or stopped answering.",
        "confirm": f"`{catalog.series('engine_stage')}` shows where it is; `vllm-headroom triage <log>` tells a loading-stage "
        f"failure from a runtime crash; `{catalog.series('target_up')}` says whether /metrics answers.",
        "first": "If it crashed on memory, follow VllmLoadingStageOOM or VllmRuntimeOOM; if it is still loading, "
        f"compare `{catalog.series('startup_stage_duration_seconds')}` with earlier starts.",
        "scale": "Repeated failures to start on this hardware are a migrate-or-scale decision (see the loading-stage "
        "runbook).",
        "evidence": "Engine stage timeline, triage report, restart count of the pod or unit.",
    }
    recent_oom = f"(sum by ({by}) (increase({catalog.series('oom_events')}{{{sel}}}[30m])) > 0)"
    out.append(
        AlertSpec(
            "VllmEngineNotReady",
            "warning",
            "ticket",
            t.engine_not_ready_for,
            f'(max by ({by}) ({catalog.series("engine_stage")}{{{sel},stage=~"{LOADING}"}}) == 1)\nunless on ({by})\n'
            f"{recent_oom}",
            "vLLM engine on {{ $labels.server }} has been loading for more than " + t.engine_not_ready_for,
            "The engine is loading for longer than a normal start, with no memory failure to explain it (those have "
            "their own alerts).",
            SERVER_BY,
            [
                Case(
                    "loading past the startup budget fires",
                    [server_series(catalog.series("engine_stage"), "1x40", stage="weight_loading")],
                    after(t.engine_not_ready_for),
                    True,
                ),
                Case(
                    "a normal start does not fire",
                    [
                        server_series(
                            catalog.series("engine_stage"),
                            f"1x{int(minutes(t.engine_not_ready_for)) - 5} 0x30",
                            stage="weight_loading",
                        )
                    ],
                    after(t.engine_not_ready_for),
                    False,
                ),
                Case(
                    "a crash loop on a loading-stage OOM is the OOM alert's, not this one's",
                    [
                        server_series(catalog.series("engine_stage"), "1x40", stage="weight_loading"),
                        server_series(catalog.series("oom_events"), "0+1x40", stage="weight_loading", phase="loading"),
                    ],
                    after(t.engine_not_ready_for),
                    False,
                ),
            ],
            ready_runbook,
        )
    )
    out.append(
        AlertSpec(
            "VllmTargetDown",
            "critical",
            "page",
            t.target_down_for,
            f"(max by ({by}) ({catalog.series('target_up')}{{{sel}}}) == 0)\nunless on ({by})\n"
            f'(max by ({by}) ({catalog.series("engine_stage")}{{{sel},stage=~"{LOADING}"}}) == 1)\nunless on ({by})\n'
            f"{recent_oom}",
            "vLLM on {{ $labels.server }} does not answer, is not loading, and no memory failure explains it",
            "The vLLM server is down: its /metrics does not answer and its log does not say it is starting.",
            SERVER_BY,
            [
                Case(
                    "down and not loading fires",
                    [
                        server_series(catalog.series("target_up"), "0x30"),
                        server_series(catalog.series("engine_stage"), "1x30", stage="crashed"),
                    ],
                    after(t.target_down_for),
                    True,
                ),
                Case(
                    "down while loading weights does not fire",
                    [
                        server_series(catalog.series("target_up"), "0x30"),
                        server_series(catalog.series("engine_stage"), "1x30", stage="weight_loading"),
                    ],
                    after(t.target_down_for),
                    False,
                ),
                Case(
                    "down after an OOM that already alerted does not fire",
                    [
                        server_series(catalog.series("target_up"), "1x5 0x30"),
                        server_series(catalog.series("engine_stage"), "1x30", stage="crashed"),
                        server_series(
                            catalog.series("oom_events"), "0x5 1x30", stage="kv_cache_alloc", phase="loading"
                        ),
                    ],
                    after(t.target_down_for, 7),
                    False,
                ),
                Case(
                    "up does not fire",
                    [server_series(catalog.series("target_up"), "1x30")],
                    after(t.target_down_for),
                    False,
                ),
            ],
            ready_runbook,
        )
    )
    out.append(
        AlertSpec(
            "VllmKVCacheSeriesMissing",
            "warning",
            "ticket",
            t.kv_series_missing_for,
            f"(max by ({by}) ({catalog.series('target_up')}{{{sel}}}) == 1)\nunless on ({by})\n"
            f"count by ({by}) ({catalog.series('kv_cache_usage_ratio')}{{{sel}}})",
            "{{ $labels.server }} answers but shows no KV-cache usage series: every KV signal is blind there",
            "The target is up and its KV-cache series are missing: a vLLM metric rename the exporter does not know "
            "yet, or --disable-log-stats.",
            SERVER_BY,
            [
                Case(
                    "up with no KV series fires",
                    [server_series(catalog.series("target_up"), "1x40")],
                    after(t.kv_series_missing_for),
                    True,
                ),
                Case(
                    "up with KV series does not fire",
                    [
                        server_series(catalog.series("target_up"), "1x40"),
                        engine_series(catalog.series("kv_cache_usage_ratio"), "0.5x40"),
                    ],
                    after(t.kv_series_missing_for),
                    False,
                ),
            ],
            {
                "meaning": f"vllm-headroom scrapes the server but finds neither `{names.KV_USAGE}` nor "
                f"`{KV_USAGE_BEFORE}`: the weekly verdict would read `insufficient_data`.",
                "confirm": "`curl <server>/metrics | grep -i cache_usage`; the vLLM version; whether the server runs "
                "with `--disable-log-stats` (no `vllm:` metrics at all).",
                "first": "If vLLM renamed the gauge, add the new name to `exporter/vllm/names.py` (RENAMES) and upgrade "
                "vllm-headroom; if stats are disabled, enable them.",
                "scale": "Not a capacity matter.",
                "evidence": "The vLLM version and the cache-related names its /metrics shows.",
            },
        )
    )
    out.append(
        AlertSpec(
            "VllmEnvironmentCheckFailed",
            "warning",
            "ticket",
            "5m",
            f"min by (job, cluster, instance, check) ({catalog.series('environment_check')}{{{sel}}}) == 0",
            "Environment check {{ $labels.check }} fails on {{ $labels.instance }}",
            "A prerequisite of the deployment guide does not hold (driver, CUDA driver, GPU model or count, vLLM "
            "version).",
            ("job", "instance", "check"),
            [
                Case(
                    "a failing check fires",
                    [series(catalog.series("environment_check"), "0x20", check="driver_min_version")],
                    "10m",
                    True,
                    {"check": "driver_min_version"},
                ),
                Case(
                    "a passing check does not fire",
                    [series(catalog.series("environment_check"), "1x20", check="driver_min_version")],
                    "10m",
                    False,
                ),
            ],
            {
                "meaning": "The node does not meet a prerequisite the deployment guide states.",
                "confirm": f"`{catalog.series('environment_info')}` shows the driver, CUDA driver, GPU model and count; "
                f"`{catalog.series('vllm_info')}` the vLLM version.",
                "first": "Fix the environment before any tuning: driver R580+ for CUDA 13 images, the supported GPU "
                "model and count, vLLM at or above the guide's minimum.",
                "scale": "Hardware that is not on the supported list is a migrate decision.",
                "evidence": "The environment info series and the failing check.",
            },
        )
    )
    return out
