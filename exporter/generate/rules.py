"""Recording rules, alert rules and each alert's promtool cases, all computed from one Thresholds.

Recording rules follow `level:metric:operation` and aggregate numerators and denominators before they
divide. Every alert carries `severity` (critical / warning / info, the ecosystem's routing key), our
`routing` (page / ticket), a `for:`, a summary that says what is short and by how much, and a runbook.
Each alert comes with cases that must fire and cases that must not, at the boundary of its threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from exporter.generate.thresholds import Thresholds

SERVER_BY = ("job", "instance", "server")
GPU_BY = ("job", "instance", "gpu")
BASE_LABELS = {"job": "vllm-headroom", "instance": "node-1:9478", "server": "prefill-0", "gpu": "3",
               "model_name": "kimi-k3", "engine": "0", "uuid": "GPU-3", "gpu_model": "NVIDIA GB300",
               "vendor": "nvidia"}
LOADING = "weight_loading|graph_capture|kv_cache_alloc|warmup|loading_unknown"


@dataclass
class Case:
    """A promtool case: input series, an evaluation time, and whether the alert must be firing then."""

    name: str
    series: list[tuple[str, str]]
    eval_time: str
    fires: bool
    labels: dict[str, str] = field(default_factory=dict)  # labels the firing alert carries beyond `by`
    interval: str = "1m"


@dataclass
class AlertSpec:
    name: str
    severity: str
    routing: str
    for_: str
    expr: str
    summary: str
    description: str
    by: tuple[str, ...]
    cases: list[Case]
    runbook: dict[str, str]


def series(metric: str, values: str, keys: tuple[str, ...] = (), **labels: str) -> tuple[str, str]:
    """An input series with the base labels named in `keys` plus `labels`."""
    lab = {k: BASE_LABELS[k] for k in ("job", "instance") + tuple(keys)}
    lab.update(labels)
    text = ",".join(f'{k}="{v}"' for k, v in lab.items())
    return f"{metric}{{{text}}}", values


def _srv(metric: str, values: str, **labels: str) -> tuple[str, str]:
    return series(metric, values, ("server",), **labels)


def _eng(metric: str, values: str, **labels: str) -> tuple[str, str]:
    return series(metric, values, ("server", "model_name", "engine"), **labels)


def _gpu(metric: str, values: str, **labels: str) -> tuple[str, str]:
    return series(metric, values, ("gpu", "uuid", "gpu_model", "vendor"), **labels)


def _f(v: float) -> str:
    return f"{v:g}"


def _minutes(duration: str) -> float:
    n, unit = int(duration[:-1]), duration[-1]
    return n * {"s": 1 / 60, "m": 1, "h": 60, "d": 1440, "w": 10080}[unit]


def _after(duration: str, extra: int = 5) -> str:
    return f"{int(_minutes(duration)) + extra}m"


def recording_rules(t: Thresholds) -> list[dict[str, Any]]:
    sel = t.selector
    by = "job, instance, server"
    fw, bw = t.prefix_fast_window, t.prefix_baseline_window
    fast = [
        ("server:vllm_headroom_kv_cache_headroom_ratio:min",
         f"min by ({by}) (vllm_headroom_kv_cache_headroom_ratio{{{sel}}})"),
        ("server:vllm_headroom_kv_cache_usage_ratio:max",
         f"max by ({by}) (vllm_headroom_kv_cache_usage_ratio{{{sel}}})"),
        ("gpu:vllm_headroom_gpu_memory_headroom_ratio:min",
         f"min by (job, instance, gpu) (vllm_headroom_gpu_memory_headroom_ratio{{{sel}}})"),
        (f"server:vllm_headroom_prefix_cache_hits:rate{fw}",
         f"sum by ({by}) (rate(vllm_headroom_prefix_cache_hits_tokens_total{{{sel}}}[{fw}]))"),
        (f"server:vllm_headroom_prefix_cache_queries:rate{fw}",
         f"sum by ({by}) (rate(vllm_headroom_prefix_cache_queries_tokens_total{{{sel}}}[{fw}]))"),
        (t.hit_ratio_fast,
         f"server:vllm_headroom_prefix_cache_hits:rate{fw} / (server:vllm_headroom_prefix_cache_queries:rate{fw} > 0)"),
        (t.hit_ratio_baseline,
         f"sum by ({by}) (increase(vllm_headroom_prefix_cache_hits_tokens_total{{{sel}}}[{bw}]))\n"
         f"/\n(sum by ({by}) (increase(vllm_headroom_prefix_cache_queries_tokens_total{{{sel}}}[{bw}])) > 0)"),
        ("server:vllm_headroom_preemptions:rate5m",
         f"sum by ({by}) (rate(vllm_headroom_preemptions_total{{{sel}}}[5m]))"),
        ("server:vllm_headroom_oom_events:increase1h",
         f"sum by ({by}, stage, phase) (increase(vllm_headroom_oom_events_total{{{sel}}}[1h]))"),
        ("server:vllm_headroom_requests_waiting:sum", f"sum by ({by}) (vllm_headroom_requests_waiting{{{sel}}})"),
        ("server:vllm_headroom_requests_running:sum", f"sum by ({by}) (vllm_headroom_requests_running{{{sel}}})"),
    ]
    return [{"name": "vllm-headroom.recording", "interval": t.recording_interval,
             "rules": [{"record": r, "expr": e} for r, e in fast]}]


def weekly_rules(t: Thresholds) -> list[dict[str, Any]]:
    """The capacity review's 7-day rules: a file of their own, evaluated every 5 minutes."""
    q = _f(t.capacity_floor_quantile)
    by = "job, instance, server"
    weekly = [
        ("server:vllm_headroom_kv_cache_headroom_ratio:min_over_time7d",
         "min_over_time(server:vllm_headroom_kv_cache_headroom_ratio:min[7d])"),
        ("server:vllm_headroom_kv_cache_headroom_ratio:floor_quantile7d",
         f"quantile_over_time({q}, server:vllm_headroom_kv_cache_headroom_ratio:min[7d])"),
        ("gpu:vllm_headroom_gpu_memory_headroom_ratio:min_over_time7d",
         "min_over_time(gpu:vllm_headroom_gpu_memory_headroom_ratio:min[7d])"),
        ("server:vllm_headroom_oom_events:increase7d",
         f"sum by ({by}, phase) (increase(vllm_headroom_oom_events_total{{{t.selector}}}[7d]))"),
        ("server:vllm_headroom_requests_running:max_over_time7d",
         "max_over_time(server:vllm_headroom_requests_running:sum[7d])"),
    ]
    return [{"name": "vllm-headroom.weekly", "interval": t.weekly_interval,
             "rules": [{"record": r, "expr": e} for r, e in weekly] + verdict_rules(t)}]


# The weekly verdict, in the guide's terms: each rule holds where the ones above it do not.
VERDICTS = (
    ("migrate_or_scale", "loading_oom"),
    ("migrate_or_scale", "environment_check_failed"),
    ("migrate_or_scale", "runtime_oom"),
    ("migrate_or_scale", "headroom_below_floor"),
    ("monitor_and_operate", "headroom_tight"),
    ("tune_and_keep", "stable_headroom"),
)


def verdict_conditions(t: Thresholds) -> list[str]:
    sel = t.selector
    by = "job, instance, server"
    return [
        f'group by ({by}) (server:vllm_headroom_oom_events:increase7d{{phase="loading"}} > 0)',
        f"group by ({by}) (vllm_headroom_target_up{{{sel}}} * on (job, instance) group_left () "
        f"(min by (job, instance) (vllm_headroom_environment_check{{{sel}}}) == 0))",
        f'group by ({by}) (server:vllm_headroom_oom_events:increase7d{{phase="runtime"}} > 0)',
        f"group by ({by}) (server:vllm_headroom_kv_cache_headroom_ratio:floor_quantile7d < "
        f"{_f(t.capacity_floor_ratio)})",
        f"group by ({by}) (server:vllm_headroom_kv_cache_headroom_ratio:min_over_time7d < "
        f"{_f(t.kv_headroom_warning_ratio)})",
        f"group by ({by}) (vllm_headroom_target_up{{{sel}}})",
    ]


def verdict_rules(t: Thresholds) -> list[dict[str, Any]]:
    conds = verdict_conditions(t)
    rules = []
    for i, (verdict, reason) in enumerate(VERDICTS):
        expr = conds[i]
        if i:
            expr = f"{expr}\nunless on (job, instance, server) (\n  " + "\nor\n  ".join(conds[:i]) + "\n)"
        rules.append({"record": "server:vllm_headroom_capacity_verdict:7d", "expr": expr,
                      "labels": {"verdict": verdict, "reason": reason}})
    return rules


def alert_specs(t: Thresholds) -> list[AlertSpec]:
    sel = t.selector
    by = "job, instance, server"
    kvw, kvc = t.kv_headroom_warning_ratio, t.kv_headroom_critical_ratio
    gw, gc = t.gpu_headroom_warning_ratio, t.gpu_headroom_critical_ratio
    horizon_s = int(t.exhaustion_horizon_hours * 3600)
    pr = t.preemption_rate_warning
    specs: list[AlertSpec] = []

    def oom_alert(name: str, phase: str, severity: str, routing: str, summary: str, description: str,
                  runbook: dict[str, str], stage: str, other_phase_stage: str) -> AlertSpec:
        expr = (f'sum by ({by}, stage) (increase(vllm_headroom_oom_events_total{{{sel},phase="{phase}"}}[10m])) '
                "> 0")
        other = "loading" if phase == "runtime" else "runtime"
        return AlertSpec(name, severity, routing, "0m", expr, summary, description, SERVER_BY + ("stage",), [
            Case("an OOM in this phase fires", [
                _srv("vllm_headroom_oom_events_total", "0 0 0 1 1 1 1 1", stage=stage, phase=phase)],
                "5m", True, {"stage": stage}),
            Case(f"a {other}-stage OOM does not fire it", [
                _srv("vllm_headroom_oom_events_total", "0 0 0 1 1 1 1 1", stage=other_phase_stage, phase=other)],
                "5m", False),
            Case("a flat counter does not fire", [
                _srv("vllm_headroom_oom_events_total", "2x20", stage=stage, phase=phase)], "15m", False),
            Case("an OOM ages out after 10 minutes", [
                _srv("vllm_headroom_oom_events_total", "0 1x30", stage=stage, phase=phase)], "25m", False),
        ], runbook)

    specs.append(oom_alert(
        "VllmRuntimeOOM", "runtime", "critical", "page",
        "Runtime OOM on {{ $labels.server }} during {{ $labels.stage }} ({{ $value | humanize }} in 10m)",
        "The engine ran out of GPU memory while serving, after readiness. Reduce context, concurrency or cache "
        "retention, replay the same request set, and scale only if the target load still leaves no stable headroom.",
        {"meaning": "vLLM's engine hit an out-of-memory error during a prefill or decode step after it was ready; "
                    "in V1 the engine process dies and in-flight requests fail.",
         "confirm": "`vllm-headroom triage <log>` on the server's log: stage prefill or decode, `ready before: yes`. "
                    "Check `vllm_headroom_gpu_memory_peak_used_bytes` and `vllm_headroom_kv_cache_usage_ratio` just "
                    "before the failure.",
         "first": "Reduce one at a time: the context (`--max-model-len`, prompt caps), the concurrency "
                  "(`--max-num-seqs`, `--max-num-batched-tokens` for long prefills), or the cache retention "
                  "(prefix caching, `VLLM_PREFIX_CACHE_RETENTION_INTERVAL`). Replay the same request set after "
                  "each change and watch the headroom.",
         "scale": "If the target load still leaves no stable headroom after those changes, scale out (more "
                  "replicas or GPUs); new hardware is not the first move for a runtime OOM.",
         "evidence": "The triage report, the scheduler dump's step kind, peak GPU memory, KV usage, running and "
                     "waiting requests at the time, and the settings you changed."}, "prefill", "weight_loading"))
    specs.append(oom_alert(
        "VllmLoadingStageOOM", "loading", "warning", "ticket",
        "Loading-stage OOM on {{ $labels.server }} during {{ $labels.stage }}: check image, driver, hardware and "
        "topology",
        "The engine ran out of memory before it was ready. Lowering concurrency does not help: check the image, the "
        "driver, the hardware and the parallel topology first.",
        {"meaning": "vLLM failed while loading weights, compiling or capturing CUDA graphs, sizing or allocating "
                    "the KV cache, or warming up: the engine never served.",
         "confirm": "`vllm-headroom triage <log>`: the stage and the memory facts the log states (weights per GPU, "
                    "available KV cache memory, vLLM's own estimate of the max model length that would fit).",
         "first": "Lowering concurrency does not help here. Check the image (vLLM version, a CUDA 13 build for "
                  "GB300), the driver (R580+), the hardware (GPU model, count, memory) and the parallel topology "
                  "(TP/PP/DP/EP sizes); make sure no other process holds GPU memory; for KV-cache failures compare "
                  "`--max-model-len` with the capacity the log states and revisit `--gpu-memory-utilization`.",
         "scale": "If the model's weights and one max-length request cannot fit on this topology at any setting, "
                  "this is a migrate-or-scale decision: more or larger GPUs, or a different parallel layout.",
         "evidence": "The triage report (stage, startup timeline, memory split), `vllm_headroom_environment_check`, "
                     "the image tag, driver and CUDA versions, GPU model and count, and the parallel sizes."},
        "kv_cache_alloc", "decode"))

    def headroom_case_set(metric_fn, metric: str, warn: float, for_: str, fire_labels: dict[str, str]) -> list[Case]:
        below = round(warn - 0.01, 6)
        return [
            Case("below the threshold for long enough fires", [metric_fn(metric, f"{_f(below)}x60")],
                 _after(for_), True, fire_labels),
            Case("exactly at the threshold does not fire", [metric_fn(metric, f"{_f(warn)}x60")], _after(for_),
                 False),
            Case("below for less than `for` does not fire", [metric_fn(metric, f"0.5x{max(int(_minutes(for_)) - 3, 0)} "
                                                                       f"{_f(below)}x60")],
                 f"{int(_minutes(for_))}m", False),
        ]

    kv_runbook = {
        "meaning": "The KV cache is nearly full on at least one DP engine: new requests queue and running ones get "
                   "preempted (recomputed) as it fills.",
        "confirm": "`vllm_headroom_kv_cache_usage_ratio` per engine, `vllm_headroom_requests_waiting`, "
                   "`rate(vllm_headroom_preemptions_total[5m])`; compare with `vllm_headroom_kv_cache_capacity_tokens`.",
        "first": "Tune: cap context per request, lower `--max-num-seqs`, enable prefix caching where prompts repeat, "
                 "or use an fp8 KV cache; replay the same request set to confirm the headroom comes back.",
        "scale": "If the target load keeps headroom under the floor after tuning, add replicas or GPUs (scale side of "
                 "the weekly verdict).",
        "evidence": "KV usage and headroom minima, preemption rate, queue length, request mix (prompt lengths) and "
                    "the capacity figures from the startup log.",
    }
    specs.append(AlertSpec(
        "VllmKVCacheHeadroomLow", "warning", "ticket", t.kv_headroom_warning_for,
        f"min by ({by}) (vllm_headroom_kv_cache_headroom_ratio{{{sel}}}) < {_f(kvw)}",
        "KV-cache headroom on {{ $labels.server }} is {{ $value | humanizePercentage }}, under "
        f"{_f(kvw * 100)}%",
        "The KV cache has stayed nearly full: queueing and preemptions follow.", SERVER_BY,
        headroom_case_set(_eng, "vllm_headroom_kv_cache_headroom_ratio", kvw, t.kv_headroom_warning_for, {}),
        kv_runbook))
    specs.append(AlertSpec(
        "VllmKVCacheHeadroomCritical", "critical", "page", t.kv_headroom_critical_for,
        f"min by ({by}) (vllm_headroom_kv_cache_headroom_ratio{{{sel}}}) < {_f(kvc)}",
        "KV-cache headroom on {{ $labels.server }} is {{ $value | humanizePercentage }}, under "
        f"{_f(kvc * 100)}%: requests queue and preempt",
        "The KV cache is all but full.", SERVER_BY,
        headroom_case_set(_eng, "vllm_headroom_kv_cache_headroom_ratio", kvc, t.kv_headroom_critical_for, {}),
        kv_runbook))

    start = 0.5
    fall = 0.005  # per minute
    specs.append(AlertSpec(
        "VllmHeadroomExhaustionPredicted", "warning", "ticket", t.exhaustion_for,
        f"(server:vllm_headroom_kv_cache_headroom_ratio:min < {_f(t.exhaustion_below_ratio)})\nand\n"
        f"(predict_linear(server:vllm_headroom_kv_cache_headroom_ratio:min[{t.exhaustion_lookback}], {horizon_s}) < 0)",
        "KV-cache headroom on {{ $labels.server }} is {{ $value | humanizePercentage }} and falling: exhausted within "
        f"{_f(t.exhaustion_horizon_hours)}h at this trend",
        "Headroom is low and still falling: the linear trend of the last "
        f"{t.exhaustion_lookback} reaches zero within {_f(t.exhaustion_horizon_hours)} hours.", SERVER_BY, [
            Case("low and falling fires", [_eng("vllm_headroom_kv_cache_headroom_ratio",
                                                f"{_f(start)}-{_f(fall)}x90")], "75m", True),
            Case("low but flat does not fire", [_eng("vllm_headroom_kv_cache_headroom_ratio", "0.25x120")], "90m",
                 False),
            Case("falling but still above the level does not fire",
                 [_eng("vllm_headroom_kv_cache_headroom_ratio", "0.9-0.002x120")], "90m", False),
        ], kv_runbook))

    gpu_runbook = {
        "meaning": "A GPU's memory peaked close to its total between two scrapes (the exporter samples at 10 Hz, so "
                   "a prefill spike counts).",
        "confirm": "`vllm_headroom_gpu_memory_peak_used_bytes` and `..._used_bytes` per GPU, "
                   "`vllm_headroom_gpu_process_memory_used_bytes` for other processes on the GPU, and vLLM's "
                   "`--gpu-memory-utilization`.",
        "first": "Make sure nothing else runs on the GPU; lower `--gpu-memory-utilization` a step or cap "
                 "`--max-num-batched-tokens` so prefill spikes stay under the total; replay the same load.",
        "scale": "If peaks still leave no margin at the target load, this GPU count cannot hold the load: scale out.",
        "evidence": "Peak and steady GPU memory per GPU, the processes on it, and the vLLM memory settings.",
    }
    for name, sev, rt, ratio, for_ in (("VllmGPUMemoryHeadroomLow", "warning", "ticket", gw, t.gpu_headroom_warning_for),
                                      ("VllmGPUMemoryHeadroomCritical", "critical", "page", gc,
                                       t.gpu_headroom_critical_for)):
        specs.append(AlertSpec(
            name, sev, rt, for_,
            f"min by (job, instance, gpu) (vllm_headroom_gpu_memory_headroom_ratio{{{sel}}}) < {_f(ratio)}",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} peaked with {{ $value | humanizePercentage }} memory "
            f"free, under {_f(ratio * 100)}%",
            "GPU memory headroom on peaks between scrapes is short.", GPU_BY,
            headroom_case_set(_gpu, "vllm_headroom_gpu_memory_headroom_ratio", ratio, for_, {}), gpu_runbook))

    per_min = pr * 60
    specs.append(AlertSpec(
        "VllmPreemptionsRising", "warning", "ticket", t.preemption_for,
        f"sum by ({by}) (rate(vllm_headroom_preemptions_total{{{sel}}}[5m])) > {_f(pr)}",
        "{{ $labels.server }} preempts {{ $value | humanize }} requests/s (threshold " + _f(pr) + "/s)",
        "The scheduler is evicting running requests to free KV cache: latency grows and work is recomputed.",
        SERVER_BY, [
            Case("a sustained preemption rate fires",
                 [_eng("vllm_headroom_preemptions_total", f"0+{_f(per_min * 2)}x60")], _after(t.preemption_for), True),
            Case("just under the rate does not fire",
                 [_eng("vllm_headroom_preemptions_total", f"0+{_f(per_min * 0.9)}x60")], _after(t.preemption_for),
                 False),
            Case("no preemptions do not fire", [_eng("vllm_headroom_preemptions_total", "7x60")],
                 _after(t.preemption_for), False),
        ], kv_runbook))

    specs.append(AlertSpec(
        "VllmRequestsQueueingKVCacheFull", "warning", "ticket", t.queue_for,
        f"(sum by ({by}) (vllm_headroom_requests_waiting{{{sel}}}) > 0)\nand on ({by})\n"
        f"(max by ({by}) (vllm_headroom_kv_cache_usage_ratio{{{sel}}}) >= {_f(t.kv_full_ratio)})",
        "{{ $value }} requests wait on {{ $labels.server }} while its KV cache is at least "
        f"{_f(t.kv_full_ratio * 100)}% full",
        "Requests queue because the KV cache has no room: capacity, not compute, is the limit.", SERVER_BY, [
            Case("waiting with a full cache fires", [_eng("vllm_headroom_requests_waiting", "4x30"),
                                                     _eng("vllm_headroom_kv_cache_usage_ratio",
                                                          f"{_f(t.kv_full_ratio)}x30")], _after(t.queue_for), True),
            Case("waiting with room in the cache does not fire",
                 [_eng("vllm_headroom_requests_waiting", "4x30"),
                  _eng("vllm_headroom_kv_cache_usage_ratio", f"{_f(round(t.kv_full_ratio - 0.01, 6))}x30")],
                 _after(t.queue_for), False),
            Case("a full cache with no queue does not fire",
                 [_eng("vllm_headroom_requests_waiting", "0x30"), _eng("vllm_headroom_kv_cache_usage_ratio", "1x30")],
                 _after(t.queue_for), False),
        ], kv_runbook))

    prefix_runbook = {
        "meaning": "The share of prompt tokens served from the prefix cache fell far below its own 1-day level.",
        "confirm": f"`{t.hit_ratio_fast}` against `{t.hit_ratio_baseline}`; check "
                   "`vllm_headroom_prefix_cache_enabled`, recent restarts (the cache starts empty), routing changes "
                   "that split repeat traffic across replicas, and `VLLM_PREFIX_CACHE_RETENTION_INTERVAL`.",
        "first": "Restore prefix-aware routing or the retention setting that changed; on hybrid models make sure "
                 "`--enable-prefix-caching` is given (it is off by default there).",
        "scale": "A lower hit ratio means more prefill work per request: if headroom and TTFT no longer hold at the "
                 "target load, it feeds the weekly scale decision.",
        "evidence": "Hit ratio before and after, the deploy or routing change at that time, TTFT and prefill tokens.",
    }
    frac, floor = t.prefix_collapse_fraction, t.prefix_baseline_min_ratio
    specs.append(AlertSpec(
        "VllmPrefixCacheHitRatioCollapsed", "warning", "ticket", t.prefix_collapse_for,
        f"({t.hit_ratio_fast} < {_f(frac)} * {t.hit_ratio_baseline})\nand\n({t.hit_ratio_baseline} > {_f(floor)})",
        "Prefix-cache hit ratio on {{ $labels.server }} fell to {{ $value | humanizePercentage }}, under "
        f"{_f(frac * 100)}% of its 1-day level",
        "Repeat prompts stopped hitting the prefix cache.", SERVER_BY, [
            # 2-minute steps: 1 day of 60% hits, then 2 hours of 10%
            Case("a collapse against a healthy baseline fires", [
                _eng("vllm_headroom_prefix_cache_queries_tokens_total", "0+2000x800"),
                _eng("vllm_headroom_prefix_cache_hits_tokens_total", "0+1200x720 864200+200x80")],
                "26h", True, interval="2m"),
            Case("a steady ratio does not fire", [
                _eng("vllm_headroom_prefix_cache_queries_tokens_total", "0+2000x800"),
                _eng("vllm_headroom_prefix_cache_hits_tokens_total", "0+1200x800")], "26h", False, interval="2m"),
            Case("a low baseline does not count as a collapse", [
                _eng("vllm_headroom_prefix_cache_queries_tokens_total", "0+2000x800"),
                _eng("vllm_headroom_prefix_cache_hits_tokens_total", "0+200x720 144020+20x80")], "26h", False,
                interval="2m"),
        ], prefix_runbook))
    specs.append(AlertSpec(
        "VllmPrefixCachingDisabled", "info", "ticket", "15m",
        f'vllm_headroom_prefix_cache_enabled{{{sel},server=~"{t.prefix_reuse_servers}"}} == 0',
        "Prefix caching is off on {{ $labels.server }}, whose traffic is expected to repeat prefixes",
        "Repeated prefixes are recomputed on every request.", SERVER_BY, [
            Case("caching off fires", [_srv("vllm_headroom_prefix_cache_enabled", "0x30")], "20m", True),
            Case("caching on does not fire", [_srv("vllm_headroom_prefix_cache_enabled", "1x30")], "20m", False),
        ], prefix_runbook))

    ready_runbook = {
        "meaning": "The engine is not serving: it is still loading, crashed, or stopped answering.",
        "confirm": "`vllm_headroom_engine_stage` shows where it is; `vllm-headroom triage <log>` tells a loading-stage "
                   "failure from a runtime crash; `vllm_headroom_target_up` says whether /metrics answers.",
        "first": "If it crashed on memory, follow VllmLoadingStageOOM or VllmRuntimeOOM; if it is still loading, "
                 "compare `vllm_headroom_startup_stage_duration_seconds` with earlier starts.",
        "scale": "Repeated failures to start on this hardware are a migrate-or-scale decision (see the loading-stage "
                 "runbook).",
        "evidence": "Engine stage timeline, triage report, restart count of the pod or unit.",
    }
    specs.append(AlertSpec(
        "VllmEngineNotReady", "critical", "page", t.engine_not_ready_for,
        f"max by ({by}) (vllm_headroom_engine_ready{{{sel}}}) == 0",
        "vLLM engine on {{ $labels.server }} has not been ready for " + t.engine_not_ready_for,
        "The engine is loading for longer than a normal start, crashed, or stopped answering.", SERVER_BY, [
            Case("not ready past the startup budget fires", [_srv("vllm_headroom_engine_ready", "0x40")],
                 _after(t.engine_not_ready_for), True),
            Case("a normal start does not fire",
                 [_srv("vllm_headroom_engine_ready", f"0x{int(_minutes(t.engine_not_ready_for)) - 5} 1x30")],
                 _after(t.engine_not_ready_for), False),
        ], ready_runbook))
    specs.append(AlertSpec(
        "VllmTargetDown", "warning", "ticket", t.target_down_for,
        f"(max by ({by}) (vllm_headroom_target_up{{{sel}}}) == 0)\nunless on ({by})\n"
        f'(max by ({by}) (vllm_headroom_engine_stage{{{sel},stage=~"{LOADING}"}}) == 1)',
        "vLLM /metrics on {{ $labels.server }} does not answer, and its log does not say it is loading",
        "The exporter cannot scrape this vLLM server.", SERVER_BY, [
            Case("down and not loading fires", [_srv("vllm_headroom_target_up", "0x30"),
                                                _srv("vllm_headroom_engine_stage", "1x30", stage="ready")],
                 _after(t.target_down_for), True),
            Case("down while loading weights does not fire", [
                _srv("vllm_headroom_target_up", "0x30"),
                _srv("vllm_headroom_engine_stage", "1x30", stage="weight_loading")], _after(t.target_down_for), False),
            Case("up does not fire", [_srv("vllm_headroom_target_up", "1x30")], _after(t.target_down_for), False),
        ], ready_runbook))
    specs.append(AlertSpec(
        "VllmEnvironmentCheckFailed", "warning", "ticket", "5m",
        f"min by (job, instance, check) (vllm_headroom_environment_check{{{sel}}}) == 0",
        "Environment check {{ $labels.check }} fails on {{ $labels.instance }}",
        "A prerequisite of the deployment guide does not hold (driver, CUDA driver, GPU model or count, vLLM "
        "version).", ("job", "instance", "check"), [
            Case("a failing check fires", [series("vllm_headroom_environment_check", "0x20",
                                                  check="driver_min_version")], "10m", True,
                 {"check": "driver_min_version"}),
            Case("a passing check does not fire", [series("vllm_headroom_environment_check", "1x20",
                                                          check="driver_min_version")], "10m", False),
        ], {"meaning": "The node does not meet a prerequisite the deployment guide states.",
            "confirm": "`vllm_headroom_environment_info` shows the driver, CUDA driver, GPU model and count; "
                       "`vllm_headroom_vllm_info` the vLLM version.",
            "first": "Fix the environment before any tuning: driver R580+ for CUDA 13 images, the supported GPU "
                     "model and count, vLLM at or above the guide's minimum.",
            "scale": "Hardware that is not on the supported list is a migrate decision.",
            "evidence": "The environment info series and the failing check."}))
    specs.append(AlertSpec(
        "VllmToolCallParseErrors", "info", "ticket", "0m",
        f'sum by ({by}) (increase(vllm_headroom_log_events_total{{{sel},event="tool_call_parse_error"}}[1h])) > '
        f"{_f(t.tool_call_errors_per_hour)}",
        "{{ $value | humanize }} tool-call parse errors in the last hour on {{ $labels.server }}",
        "The tool-call parser failed on model output: clients get plain text instead of tool calls.", SERVER_BY, [
            Case("many parse errors fire", [_srv("vllm_headroom_log_events_total",
                                                 f"0+{_f(t.tool_call_errors_per_hour / 30)}x60",
                                                 event="tool_call_parse_error")], "50m", True),
            Case("a few parse errors do not fire", [_srv("vllm_headroom_log_events_total", "0 1 2 2 2 2 2 2",
                                                         event="tool_call_parse_error")], "7m", False),
        ], {"meaning": "vLLM logged `Error in extracting tool call from response` repeatedly.",
            "confirm": "The server's log around those lines; newer vLLM counts "
                       "`vllm:tool_call_parser_invocations_total{outcome=...}`.",
            "first": "Check the `--tool-call-parser` matches the model and its chat template.",
            "scale": "Not a capacity matter.",
            "evidence": "Parser name, model, template, and a sample of failing outputs (without users' data)."}))
    specs.append(AlertSpec(
        "VllmCommunicationErrors", "warning", "ticket", "0m",
        f'sum by ({by}) (increase(vllm_headroom_log_events_total{{{sel},event="comm_error"}}[15m])) > 0',
        "NCCL / collective communication errors on {{ $labels.server }}",
        "Collective operations failed or timed out: the engine usually dies with them.", SERVER_BY, [
            Case("a communication error fires", [_srv("vllm_headroom_log_events_total", "0 0 1x20",
                                                      event="comm_error")], "5m", True),
            Case("no communication error does not fire", [_srv("vllm_headroom_log_events_total", "0x20",
                                                               event="comm_error")], "5m", False),
        ], {"meaning": "The log shows NCCL errors or watchdog timeouts on collectives.",
            "confirm": "The log lines around the error; NVLink / RDMA health; the all-to-all backend in use.",
            "first": "Not a memory problem: check interconnect health and the parallel topology before tuning memory.",
            "scale": "Only if the topology itself is unsupported.",
            "evidence": "The error lines, the ranks involved, the interconnect and backend."}))
    exporter_runbook = {
        "meaning": "vllm-headroom itself cannot see part of what it watches.",
        "confirm": "The exporter's own log (it says what failed and why) and its health series.",
        "first": "Fix the source: the GPU driver or device, the log path or its mount, the exporter's deployment.",
        "scale": "Not a capacity matter.",
        "evidence": "The exporter's log lines and health series.",
    }
    specs.append(AlertSpec(
        "VllmHeadroomGPUReadFailing", "warning", "ticket", "5m",
        f"max by (job, instance, gpu) (vllm_headroom_gpu_up{{{sel}}}) == 0",
        "vllm-headroom cannot read GPU {{ $labels.gpu }} on {{ $labels.instance }}",
        "GPU memory reads fail (lost GPU or library error): GPU headroom is blind for this GPU.", GPU_BY, [
            Case("failing reads fire", [_gpu("vllm_headroom_gpu_up", "0x20")], "10m", True),
            Case("good reads do not fire", [_gpu("vllm_headroom_gpu_up", "1x20")], "10m", False),
        ], exporter_runbook))
    stalled = int(t.log_stalled_after_seconds)
    specs.append(AlertSpec(
        "VllmHeadroomLogStalled", "warning", "ticket", "5m",
        f"(time() - max by ({by}) (vllm_headroom_log_last_read_timestamp_seconds{{{sel}}}) > {stalled})\n"
        f"and on ({by})\n(max by ({by}) (vllm_headroom_target_up{{{sel}}}) == 1)",
        "No new log lines from {{ $labels.server }} for {{ $value | humanizeDuration }} while it serves",
        "The log tail is stalled (wrong path, rotated away, unmounted) while the server is up: OOM events would be "
        "missed.", SERVER_BY, [
            Case("a silent log of a serving server fires", [
                _srv("vllm_headroom_log_last_read_timestamp_seconds", "0x60"), _srv("vllm_headroom_target_up", "1x60")],
                f"{stalled // 60 + 10}m", True),
            Case("a log read every minute does not fire", [
                _srv("vllm_headroom_log_last_read_timestamp_seconds", "0+60x60"),
                _srv("vllm_headroom_target_up", "1x60")], f"{stalled // 60 + 10}m", False),
        ], exporter_runbook))
    specs.append(AlertSpec(
        "VllmHeadroomLogMissing", "warning", "ticket", "10m",
        f"max by ({by}) (vllm_headroom_log_file_present{{{sel}}}) == 0",
        "The configured log of {{ $labels.server }} does not exist",
        "Stage-tagged OOM events cannot be seen without the log.", SERVER_BY, [
            Case("a missing log fires", [_srv("vllm_headroom_log_file_present", "0x30")], "15m", True),
            Case("a present log does not fire", [_srv("vllm_headroom_log_file_present", "1x30")], "15m", False),
        ], exporter_runbook))
    specs.append(AlertSpec(
        "VllmHeadroomExporterDown", "warning", "ticket", t.exporter_down_for,
        f"up{{{sel}}} == 0",
        "vllm-headroom on {{ $labels.instance }} is down: headroom is not monitored there",
        "Prometheus cannot scrape the exporter.", ("job", "instance"), [
            Case("a down exporter fires", [series("up", "0x20")], _after(t.exporter_down_for), True),
            Case("an up exporter does not fire", [series("up", "1x20")], _after(t.exporter_down_for), False),
        ], exporter_runbook))
    specs.append(AlertSpec(
        "VllmKVCacheCapacityMismatch", "info", "ticket", "0m",
        f"max by ({by}) (vllm_headroom_kv_cache_capacity_mismatch{{{sel}}}) == 1",
        "KV-cache capacity from vLLM's metric and its startup log disagree on {{ $labels.server }}",
        "The two capacity figures differ by more than 10% (seen on hybrid models); trust the metric and record both.",
        SERVER_BY, [
            Case("a mismatch fires", [_srv("vllm_headroom_kv_cache_capacity_mismatch", "1x10")], "5m", True),
            Case("agreement does not fire", [_srv("vllm_headroom_kv_cache_capacity_mismatch", "0x10")], "5m", False),
        ], {"meaning": "vLLM's `cache_config_info` and its `GPU KV cache size` line give different capacities.",
            "confirm": "`vllm_headroom_kv_cache_capacity_tokens` and `..._capacity_log_tokens`.",
            "first": "Plan with the metric's figure; note the difference in the capacity review.",
            "scale": "Not by itself.",
            "evidence": "Both figures and the vLLM version."}))
    return specs


def alert_groups(t: Thresholds, strip_annotations: bool = False) -> list[dict[str, Any]]:
    rules = []
    for a in alert_specs(t):
        rule: dict[str, Any] = {"alert": a.name, "expr": a.expr, "for": a.for_,
                                "labels": {"severity": a.severity, "routing": a.routing}}
        if not strip_annotations:
            rule["annotations"] = {"summary": a.summary, "description": a.description,
                                   "runbook_url": f"{t.runbook_base_url}/{a.name}.md"}
        rules.append(rule)
    return [{"name": "vllm-headroom.alerts", "rules": rules}]


def promtool_tests(t: Thresholds, rule_files: list[str]) -> dict[str, Any]:
    """One promtool test per case; a must-not-fire case expects an empty alert list."""
    tests = []
    for a in alert_specs(t):
        for c in a.cases:
            exp = []
            if c.fires:
                labels = {k: BASE_LABELS[k] for k in a.by if k in BASE_LABELS}
                labels.update(c.labels)
                labels.update({"severity": a.severity, "routing": a.routing})
                exp = [{"exp_labels": labels}]
            tests.append({
                "name": f"{a.name}: {c.name}",
                "interval": c.interval,
                "input_series": [{"series": s, "values": v} for s, v in c.series],
                "alert_rule_test": [{"eval_time": c.eval_time, "alertname": a.name, "exp_alerts": exp}],
            })
    return {"rule_files": rule_files, "evaluation_interval": "1m", "tests": tests}


@dataclass
class VerdictCase:
    name: str
    headroom: str  # values of vllm_headroom_kv_cache_headroom_ratio, 1-hour steps
    loading_ooms: str = "0x170"
    runtime_ooms: str = "0x170"
    check: str = "1x170"
    verdict: tuple[str, str] = ("tune_and_keep", "stable_headroom")


def verdict_cases(t: Thresholds) -> list[VerdictCase]:
    ok = 0.5
    tight = round(t.kv_headroom_warning_ratio - 0.03, 6)
    low = round(t.capacity_floor_ratio / 2, 6)
    hours_low = int(168 * t.capacity_floor_quantile) + 12  # well over the quantile of the week
    return [
        VerdictCase("stable headroom, no OOM: tune and keep", f"{_f(ok)}x170"),
        VerdictCase("brief dips under the warning line: monitor and operate",
                    f"{_f(ok)}x100 {_f(tight)}x2 {_f(ok)}x68", verdict=("monitor_and_operate", "headroom_tight")),
        VerdictCase("headroom under the floor for much of the week: scale side",
                    f"{_f(ok)}x100 {_f(low)}x{hours_low} {_f(ok)}x{69 - hours_low}",
                    verdict=("migrate_or_scale", "headroom_below_floor")),
        VerdictCase("a runtime OOM in the week: scale side", f"{_f(ok)}x170", runtime_ooms="0x100 1x70",
                    verdict=("migrate_or_scale", "runtime_oom")),
        VerdictCase("a loading-stage OOM outranks a runtime one: migrate", f"{_f(ok)}x170", loading_ooms="0x50 1x120",
                    runtime_ooms="0x100 1x70", verdict=("migrate_or_scale", "loading_oom")),
        VerdictCase("a failed environment check: migrate", f"{_f(ok)}x170", check="0x170",
                    verdict=("migrate_or_scale", "environment_check_failed")),
    ]


def weekly_tests(t: Thresholds, rule_files: list[str]) -> dict[str, Any]:
    """The weekly verdict, given the per-server minimum the fast group records (fed in directly)."""
    tests = []
    for c in verdict_cases(t):
        verdict, reason = c.verdict
        labels = ",".join(f'{k}="{BASE_LABELS[k]}"' for k in SERVER_BY)
        tests.append({
            "name": f"capacity verdict: {c.name}",
            "interval": "1h",
            "input_series": [{"series": s, "values": v} for s, v in (
                _srv("vllm_headroom_target_up", "1x170"),
                _srv("server:vllm_headroom_kv_cache_headroom_ratio:min", c.headroom),
                _srv("vllm_headroom_oom_events_total", c.loading_ooms, stage="weight_loading", phase="loading"),
                _srv("vllm_headroom_oom_events_total", c.runtime_ooms, stage="decode", phase="runtime"),
                series("vllm_headroom_environment_check", c.check, check="gpu_count"),
            )],
            "promql_expr_test": [{
                "expr": "server:vllm_headroom_capacity_verdict:7d", "eval_time": "7d",
                "exp_samples": [{"labels": f'server:vllm_headroom_capacity_verdict:7d{{{labels},'
                                           f'reason="{reason}",verdict="{verdict}"}}', "value": 1}],
            }],
        })
    return {"rule_files": rule_files, "evaluation_interval": "5m", "tests": tests}


def recording_tests(t: Thresholds, rule_files: list[str]) -> dict[str, Any]:
    tests = [{
        "name": "prefix hit ratio sums hits and queries over engines before dividing",
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in (
            _eng("vllm_headroom_prefix_cache_hits_tokens_total", "0+90x20", engine="0"),
            _eng("vllm_headroom_prefix_cache_queries_tokens_total", "0+100x20", engine="0"),
            _eng("vllm_headroom_prefix_cache_hits_tokens_total", "0+10x20", engine="1"),
            _eng("vllm_headroom_prefix_cache_queries_tokens_total", "0+900x20", engine="1"),
        )],
        "promql_expr_test": [{
            "expr": f"round({t.hit_ratio_fast} * 1000)", "eval_time": "15m",
            "exp_samples": [{"labels": "{" + ",".join(f'{k}="{BASE_LABELS[k]}"' for k in SERVER_BY) + "}",
                             "value": 100}],  # 100 / 1000, not the mean of 0.9 and 0.011
        }, {
            "expr": t.hit_ratio_fast, "eval_time": "40m", "exp_samples": [],
        }],  # no queries in the window: absent, not 0 and not NaN
    }]
    return {"rule_files": rule_files, "evaluation_interval": "1m", "tests": tests}
