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


def _minutes(duration: str) -> int:
    n, unit = int(duration[:-1]), duration[-1]
    return n * {"s": 1 / 60, "m": 1, "h": 60, "d": 1440, "w": 10080}[unit]


def _after(duration: str, extra: int = 5) -> str:
    return f"{int(_minutes(duration)) + extra}m"


def _seconds(duration: str) -> float:
    return _minutes(duration) * 60


ENGINE_BY = "job, instance, server, model_name, engine"
WEEK_BY = "job, cluster, server"  # stable across rollouts: `instance` is a pod IP in Kubernetes
CONFIG_STAGES = "graph_capture|kv_cache_alloc|warmup|loading_unknown"  # a configuration to fix, not hardware


def recording_rules(t: Thresholds) -> list[dict[str, Any]]:
    sel = t.selector
    by = "job, instance, server"
    fw, bw = t.prefix_fast_window, t.prefix_baseline_window
    E = ENGINE_BY
    fast = [
        ("server:vllm_headroom_kv_cache_headroom_ratio:min",
         f"min by ({by}) (vllm_headroom_kv_cache_headroom_ratio{{{sel}}})"),
        ("server:vllm_headroom_kv_cache_usage_ratio:max",
         f"max by ({by}) (vllm_headroom_kv_cache_usage_ratio{{{sel}}})"),
        # each evaluation with KV data stands for one recording interval: summed over 7 days, the hours of data
        ("server:vllm_headroom_kv_cache_usage:hours",
         f"count by ({by}) (vllm_headroom_kv_cache_usage_ratio{{{sel}}}) * 0 + {_f(_seconds(t.recording_interval) / 3600)}"),
        # Requests waiting for KV capacity, per DP engine. vLLM's num_requests_waiting_by_reason{reason=
        # "capacity"} where it exports it; otherwise the engine's waiting requests while that same engine's
        # cache is full (joined per engine: one full engine says nothing of another's queue).
        ("engine:vllm_headroom_requests_waiting_capacity:sum",
         f'sum by ({E}) (vllm_headroom_requests_waiting_by_reason{{{sel},reason="capacity"}})\nor\n(\n'
         f"  sum by ({E}) (vllm_headroom_requests_waiting{{{sel}}})\n  * on ({E})\n"
         f"  (max by ({E}) (vllm_headroom_kv_cache_usage_ratio{{{sel}}}) >= bool {_f(t.kv_full_ratio)})\n"
         f"  unless on ({E}) vllm_headroom_requests_waiting_by_reason{{{sel}}}\n)"),
        ("server:vllm_headroom_requests_waiting_capacity:queueing",
         f"max by ({by}) (avg_over_time(engine:vllm_headroom_requests_waiting_capacity:sum[{t.kv_queue_window}]))"
         f" >= bool {_f(t.kv_queue_page_requests)}"),
        (f"engine:vllm_headroom_preemptions:rate{t.preemption_window}",
         f"sum by ({E}) (rate(vllm_headroom_preemptions_total{{{sel}}}[{t.preemption_window}]))"),
        ("gpu:vllm_headroom_gpu_memory_headroom_ratio:min",
         f"min by (job, instance, gpu) (vllm_headroom_gpu_memory_headroom_ratio{{{sel}}})"),
        # GPU memory against the budget vLLM was given: it claims gpu_memory_utilization x total at start and
        # fills it with KV cache, so used/total sits at the budget on a healthy server.
        ("gpu:vllm_headroom_gpu_memory_peak_used:ratio",
         f"max by (job, instance, gpu) (vllm_headroom_gpu_memory_peak_used_bytes{{{sel}}}\n"
         f"  / vllm_headroom_gpu_memory_total_bytes{{{sel}}})"),
        ("instance:vllm_headroom_gpu_memory_budget:ratio",
         f"max by (job, instance) (vllm_headroom_gpu_memory_utilization_ratio{{{sel}}})"),
        ("gpu:vllm_headroom_gpu_memory_over_budget:ratio",
         "gpu:vllm_headroom_gpu_memory_peak_used:ratio\n"
         "- on (job, instance) group_left ()\ninstance:vllm_headroom_gpu_memory_budget:ratio"),
        (f"server:vllm_headroom_prefix_cache_hits:rate{fw}",
         f"sum by ({by}) (rate(vllm_headroom_prefix_cache_hits_tokens_total{{{sel}}}[{fw}]))"),
        (f"server:vllm_headroom_prefix_cache_queries:rate{fw}",
         f"sum by ({by}) (rate(vllm_headroom_prefix_cache_queries_tokens_total{{{sel}}}[{fw}]))"),
        (t.hit_ratio_fast,
         f"server:vllm_headroom_prefix_cache_hits:rate{fw} / (server:vllm_headroom_prefix_cache_queries:rate{fw} > 0)"),
        # the long window from the recorded per-server rates (one series a server), not a day of raw
        # per-engine counters re-read every minute
        (t.hit_ratio_baseline,
         f"avg_over_time(server:vllm_headroom_prefix_cache_hits:rate{fw}[{bw}])\n"
         f"/\n(avg_over_time(server:vllm_headroom_prefix_cache_queries:rate{fw}[{bw}]) > 0)"),
        ("server:vllm_headroom_preemptions:rate5m",
         f"sum by ({by}) (rate(vllm_headroom_preemptions_total{{{sel}}}[5m]))"),
        ("server:vllm_headroom_oom_events:increase1h",
         f"sum by ({by}, stage, phase) (increase(vllm_headroom_oom_events_total{{{sel}}}[1h]))"),
        # when a loading-stage OOM was seen, and when the engine was last ready: a later successful start
        # clears a loading failure in the weekly verdict
        ("server:vllm_headroom_loading_oom:timestamp",
         f'timestamp(sum by ({by}, stage) (increase(vllm_headroom_oom_events_total{{{sel},phase="loading"}}[5m])) '
         "> 0)"),
        ("server:vllm_headroom_engine_ready:timestamp",
         f"timestamp(max by ({by}) (vllm_headroom_engine_ready{{{sel}}}) == 1)"),
        ("server:vllm_headroom_requests_waiting:sum", f"sum by ({by}) (vllm_headroom_requests_waiting{{{sel}}})"),
        ("server:vllm_headroom_requests_running:sum", f"sum by ({by}) (vllm_headroom_requests_running{{{sel}}})"),
    ]
    return [{"name": "vllm-headroom.recording", "interval": t.recording_interval,
             "rules": [{"record": r, "expr": e} for r, e in fast]}]


def weekly_rules(t: Thresholds) -> list[dict[str, Any]]:
    """The capacity review's 7-day rules: a file of their own, evaluated every 5 minutes, grouped by stable
    labels (job, cluster, server) so a rollout that changes `instance` does not split a server's week."""
    q = _f(t.capacity_floor_quantile)
    W = WEEK_BY
    weekly = [
        ("server:vllm_headroom_target:seen7d", f"max by ({W}) (max_over_time(vllm_headroom_target_up{{{t.selector}}}[7d]))"),
        ("server:vllm_headroom_kv_cache_usage:hours7d",
         f"sum by ({W}) (sum_over_time(server:vllm_headroom_kv_cache_usage:hours[7d]))"),
        ("server:vllm_headroom_kv_cache_headroom_ratio:min_over_time7d",
         f"min by ({W}) (min_over_time(server:vllm_headroom_kv_cache_headroom_ratio:min[7d]))"),
        ("server:vllm_headroom_kv_cache_headroom_ratio:floor_quantile7d",
         f"min by ({W}) (quantile_over_time({q}, server:vllm_headroom_kv_cache_headroom_ratio:min[7d]))"),
        ("server:vllm_headroom_requests_waiting_capacity:ratio7d",
         f"max by ({W}) (avg_over_time(server:vllm_headroom_requests_waiting_capacity:queueing[7d]))"),
        ("gpu:vllm_headroom_gpu_memory_headroom_ratio:min_over_time7d",
         "min_over_time(gpu:vllm_headroom_gpu_memory_headroom_ratio:min[7d])"),
        ("server:vllm_headroom_oom_events:increase7d",
         f"sum by ({W}, stage, phase) (increase(vllm_headroom_oom_events_total{{{t.selector}}}[7d]))"),
        ("server:vllm_headroom_loading_oom:last_timestamp7d",
         f"max by ({W}, stage) (max_over_time(server:vllm_headroom_loading_oom:timestamp[7d]))"),
        ("server:vllm_headroom_engine_ready:last_timestamp7d",
         f"max by ({W}) (max_over_time(server:vllm_headroom_engine_ready:timestamp[7d]))"),
        ("server:vllm_headroom_requests_running:max_over_time7d",
         f"max by ({W}) (max_over_time(server:vllm_headroom_requests_running:sum[7d]))"),
    ]
    return [{"name": "vllm-headroom.weekly", "interval": t.weekly_interval,
             "rules": [{"record": r, "expr": e} for r, e in weekly] + verdict_rules(t)}]


# The weekly verdict, in the guide's terms: each rule holds where the ones above it do not.
VERDICTS = (
    ("migrate_or_scale", "weights_cannot_load"),
    ("migrate_or_scale", "environment_check_failed"),
    ("tune_and_keep", "loading_config_failure"),
    ("insufficient_data", "no_kv_data"),
    ("migrate_or_scale", "runtime_oom_recurring"),
    ("migrate_or_scale", "capacity_queueing"),
    ("monitor_and_operate", "runtime_oom"),
    ("monitor_and_operate", "capacity_queueing_seen"),
    ("tune_and_keep", "stable_headroom"),
)


def _uncleared(stages: str) -> str:
    """Loading OOMs at these stages with no successful start after the last of them."""
    W = WEEK_BY
    last = f'server:vllm_headroom_loading_oom:last_timestamp7d{{stage=~"{stages}"}}'
    return (f"group by ({W}) (\n  ({last} > on ({W}) group_left () server:vllm_headroom_engine_ready:last_timestamp7d)"
            f"\n  or ({last} unless on ({W}) server:vllm_headroom_engine_ready:last_timestamp7d)\n)")


def verdict_conditions(t: Thresholds) -> list[str]:
    sel = t.selector
    W = WEEK_BY
    runtime = f'sum by ({W}) (server:vllm_headroom_oom_events:increase7d{{phase="runtime"}})'
    return [
        _uncleared("weight_loading"),
        f"group by ({W}) (vllm_headroom_target_up{{{sel}}} * on (job, instance) group_left () "
        f"(min by (job, instance) (vllm_headroom_environment_check{{{sel}}}) == 0))",
        _uncleared(CONFIG_STAGES),
        f"group by ({W}) (server:vllm_headroom_target:seen7d unless on ({W}) "
        f"(server:vllm_headroom_kv_cache_usage:hours7d >= {_f(t.weekly_min_data_hours)}))",
        # runtime OOMs recurring (increase() extrapolates: > 1.5 is two or more) while the week's KV
        # headroom p05 stays under the warning line
        f"group by ({W}) (({runtime} > 1.5) and on ({W}) "
        f"(server:vllm_headroom_kv_cache_headroom_ratio:floor_quantile7d < {_f(t.kv_headroom_warning_ratio)}))",
        f"group by ({W}) (server:vllm_headroom_requests_waiting_capacity:ratio7d > {_f(t.capacity_floor_quantile)})",
        f"group by ({W}) ({runtime} > 0.5)",
        f"group by ({W}) (server:vllm_headroom_requests_waiting_capacity:ratio7d > 0)",
        f"group by ({W}) (server:vllm_headroom_target:seen7d)",
    ]


def verdict_rules(t: Thresholds) -> list[dict[str, Any]]:
    conds = verdict_conditions(t)
    rules = []
    for i, (verdict, reason) in enumerate(VERDICTS):
        expr = conds[i]
        if i:
            expr = f"{expr}\nunless on ({WEEK_BY}) (\n  " + "\nor\n  ".join(conds[:i]) + "\n)"
        rules.append({"record": "server:vllm_headroom_capacity_verdict:7d", "expr": expr,
                      "labels": {"verdict": verdict, "reason": reason}})
    return rules


def alert_specs(t: Thresholds) -> list[AlertSpec]:
    sel = t.selector
    by = "job, instance, server"
    specs: list[AlertSpec] = []

    def oom_alert(name: str, phase: str, severity: str, routing: str, summary: str, description: str,
                  runbook: dict[str, str], stage: str, other_phase_stage: str, window: str) -> AlertSpec:
        expr = (f'sum by ({by}, stage) (increase(vllm_headroom_oom_events_total{{{sel},phase="{phase}"}}[{window}])) '
                "> 0")
        other = "loading" if phase == "runtime" else "runtime"
        w = int(_minutes(window))
        return AlertSpec(name, severity, routing, "0m", expr, summary, description, SERVER_BY + ("stage",), [
            Case("an OOM in this phase fires", [
                _srv("vllm_headroom_oom_events_total", "0 0 0 1 1 1 1 1", stage=stage, phase=phase)],
                "5m", True, {"stage": stage}),
            Case(f"a {other}-stage OOM does not fire it", [
                _srv("vllm_headroom_oom_events_total", "0 0 0 1 1 1 1 1", stage=other_phase_stage, phase=other)],
                "5m", False),
            Case("a flat counter does not fire", [
                _srv("vllm_headroom_oom_events_total", "2x20", stage=stage, phase=phase)], "15m", False),
            Case(f"an OOM ages out after {window}", [
                _srv("vllm_headroom_oom_events_total", f"0 1x{w + 30}", stage=stage, phase=phase)], f"{w + 15}m",
                False),
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
                  "(prefix caching, `--prefix-cache-retention-interval` (vLLM's CacheConfig.prefix_cache_retention_interval in vllm/config/cache.py, for sliding-window and Mamba-style cache groups; recent releases only, so check `vllm serve --help`; vLLM has no environment variable of that name)). Replay the same request set after "
                  "each change and watch the headroom.",
         "scale": "If the target load still leaves no stable headroom after those changes, scale out (more "
                  "replicas or GPUs); new hardware is not the first move for a runtime OOM.",
         "evidence": "The triage report, the scheduler dump's step kind, peak GPU memory, KV usage, running and "
                     "waiting requests at the time, and the settings you changed."}, "prefill", "weight_loading", "10m"))
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
        "kv_cache_alloc", "decode", "1h"))  # 1h: a crash loop restarting every few minutes stays one alert

    kv_runbook = {
        "meaning": "Requests wait because a DP engine's KV cache has no room for them: capacity, not compute, is "
                   "the limit. A full cache alone is vLLM working as designed (it fills its memory budget with KV "
                   "blocks); the symptom is the queue and the preemptions.",
        "confirm": "`engine:vllm_headroom_requests_waiting_capacity:sum` per engine (vLLM's "
                   "`num_requests_waiting_by_reason{reason=\"capacity\"}` where it has it), "
                   "`vllm_headroom_kv_cache_usage_ratio` of the same engine, "
                   f"`engine:vllm_headroom_preemptions:rate{t.preemption_window}`, the request mix (prompt "
                   "lengths) and `vllm_headroom_kv_cache_capacity_tokens`. One engine queueing while the others "
                   "have room points at DP routing, not capacity.",
        "first": "Tune: cap context per request, lower `--max-num-seqs`, enable prefix caching where prompts repeat, "
                 "or use an fp8 KV cache; balance load across DP engines; replay the same request set to confirm "
                 "the queue is gone.",
        "scale": "If requests still wait for capacity at the target load after tuning, add replicas or GPUs (the "
                 "scale side of the weekly verdict).",
        "evidence": "Capacity queue and preemption rate per engine, KV usage, request mix, and the capacity figures "
                    "from the startup log.",
    }
    E = ENGINE_BY.split(", ")
    qw, qn = t.kv_queue_window, t.kv_queue_page_requests
    specs.append(AlertSpec(
        "VllmRequestsQueueingKVCacheFull", "critical", "page", t.kv_queue_for,
        f"avg_over_time(engine:vllm_headroom_requests_waiting_capacity:sum[{qw}]) >= {_f(qn)}",
        "{{ $value | humanize }} requests on average wait for KV-cache capacity on {{ $labels.server }} engine "
        "{{ $labels.engine }} (" + qw + " mean)",
        "Requests queue because this DP engine's KV cache has no room: the symptom of too little capacity, "
        "smoothed and per engine.", tuple(E), [
            Case("capacity waiting on one engine fires", [
                _eng("vllm_headroom_requests_waiting_by_reason", "3x40", reason="capacity"),
                _eng("vllm_headroom_requests_waiting_by_reason", "0x40", reason="deferred"),
                _eng("vllm_headroom_kv_cache_usage_ratio", "0.99x40")], _after(t.kv_queue_for, 10), True),
            Case("exactly the page level on average fires", [
                _eng("vllm_headroom_requests_waiting_by_reason", f"{_f(qn)}x40", reason="capacity"),
                _eng("vllm_headroom_kv_cache_usage_ratio", "0.99x40")], _after(t.kv_queue_for, 10), True),
            Case("a full cache with no queue does not fire (vLLM by design)", [
                _eng("vllm_headroom_requests_waiting_by_reason", "0x40", reason="capacity"),
                _eng("vllm_headroom_requests_waiting", "0x40"),
                _eng("vllm_headroom_kv_cache_usage_ratio", "1x40")], _after(t.kv_queue_for, 10), False),
            Case("deferred waiting is not capacity", [
                _eng("vllm_headroom_requests_waiting_by_reason", "0x40", reason="capacity"),
                _eng("vllm_headroom_requests_waiting_by_reason", "6x40", reason="deferred"),
                _eng("vllm_headroom_requests_waiting", "6x40"),
                _eng("vllm_headroom_kv_cache_usage_ratio", "1x40")], _after(t.kv_queue_for, 10), False),
            Case("without by_reason: engine 1 queueing at half KV while engine 0 is full does not fire", [
                _eng("vllm_headroom_requests_waiting", "0x40", engine="0"),
                _eng("vllm_headroom_kv_cache_usage_ratio", "1x40", engine="0"),
                _eng("vllm_headroom_requests_waiting", "5x40", engine="1"),
                _eng("vllm_headroom_kv_cache_usage_ratio", "0.5x40", engine="1")], _after(t.kv_queue_for, 10), False),
            Case("without by_reason: waiting on the engine whose cache is full fires", [
                _eng("vllm_headroom_requests_waiting", "0x40", engine="0"),
                _eng("vllm_headroom_kv_cache_usage_ratio", "0.5x40", engine="0"),
                _eng("vllm_headroom_requests_waiting", "5x40", engine="1"),
                _eng("vllm_headroom_kv_cache_usage_ratio", "0.99x40", engine="1")], _after(t.kv_queue_for, 10), True,
                {"engine": "1"}),
            Case("a 3-minute queue burst that clears does not fire", [
                _eng("vllm_headroom_requests_waiting_by_reason", "0x10 4x3 0x30", reason="capacity"),
                _eng("vllm_headroom_kv_cache_usage_ratio", "1x45")], "25m", False),
        ], kv_runbook))

    pr, pw = t.preemption_rate_warning, t.preemption_window
    per_min = pr * 60
    specs.append(AlertSpec(
        "VllmPreemptionsRising", "warning", "ticket", t.preemption_for,
        f"engine:vllm_headroom_preemptions:rate{pw} > {_f(pr)}",
        "{{ $labels.server }} engine {{ $labels.engine }} preempts {{ $value | humanize }} requests/s over " + pw +
        " (threshold " + _f(pr) + "/s)",
        "The scheduler keeps evicting running requests to free KV cache: latency grows and work is recomputed.",
        tuple(E), [
            Case("a sustained preemption rate fires",
                 [_eng("vllm_headroom_preemptions_total", f"0+{_f(per_min * 2)}x80")],
                 _after(t.preemption_for, 20), True),
            Case("just under the rate does not fire",
                 [_eng("vllm_headroom_preemptions_total", f"0+{_f(per_min * 0.9)}x80")],
                 _after(t.preemption_for, 20), False),
            Case("a 2-minute burst that recovers does not fire", [
                _eng("vllm_headroom_preemptions_total", f"0x20 0+{_f(per_min * 5)}x2 {_f(per_min * 10)}x60")],
                "40m", False),
        ], kv_runbook))

    gpu_runbook = {
        "meaning": "A GPU's memory peaked beyond the budget vLLM was given (`--gpu-memory-utilization` x total). vLLM "
                   "claims that budget at start and fills what weights and activations leave with KV cache, so use "
                   "at the budget is normal; use beyond it is memory vLLM did not plan for: another process on the "
                   "GPU, an activation spike the profile missed, fragmentation, or a leak.",
        "confirm": "`gpu:vllm_headroom_gpu_memory_over_budget:ratio` and `vllm_headroom_gpu_memory_peak_used_bytes` "
                   "(max over a trailing window of 10 Hz samples) per GPU; "
                   "`vllm_headroom_gpu_process_memory_used_bytes` for other processes on the GPU; "
                   "`vllm_headroom_gpu_memory_utilization_ratio` for the budget; whether the excess grows under the "
                   "same load.",
        "first": "Find what uses memory beyond the budget: stop other processes on the GPU; cap "
                 "`--max-num-batched-tokens` if prefill spikes overshoot; restart to clear fragmentation and record "
                 "whether it returns. Lowering `--gpu-memory-utilization` shrinks the KV cache and is not the fix "
                 "for memory someone else takes.",
        "scale": "If vLLM itself keeps overshooting its budget at the target load after that, the GPU count cannot "
                 "hold the load with margin: scale out.",
        "evidence": "Peak and steady GPU memory per GPU, the budget, the processes on the GPU, and the vLLM memory "
                    "settings.",
    }
    ob, hc = t.gpu_over_budget_warning_ratio, t.gpu_headroom_critical_ratio

    def gpu_series(peak: float, util: float | None, total: float = 100.0) -> list[tuple[str, str]]:
        out = [_gpu("vllm_headroom_gpu_memory_peak_used_bytes", f"{_f(peak * total)}x40"),
               _gpu("vllm_headroom_gpu_memory_total_bytes", f"{_f(total)}x40"),
               _gpu("vllm_headroom_gpu_memory_headroom_ratio", f"{_f(round(1 - peak, 6))}x40")]
        if util is not None:
            out.append(_srv("vllm_headroom_gpu_memory_utilization_ratio", f"{_f(util)}x40"))
        return out

    specs.append(AlertSpec(
        "VllmGPUMemoryOverBudget", "warning", "ticket", t.gpu_over_budget_for,
        f"gpu:vllm_headroom_gpu_memory_over_budget:ratio > {_f(ob)}",
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} peaked {{ $value | humanizePercentage }} of its memory "
        f"beyond the budget vLLM was given (threshold {_f(ob * 100)}%)",
        "Memory beyond vLLM's gpu_memory_utilization budget: another process, spikes past the profile, or a leak.",
        GPU_BY, [
            Case("a healthy server at utilization 0.97 with its CUDA graphs on top does not fire",
                 gpu_series(0.974, 0.97),
                 _after(t.gpu_over_budget_for), False),
            Case("a healthy server at 0.92 with prefill spikes inside the budget does not fire",
                 gpu_series(0.93, 0.92), _after(t.gpu_over_budget_for), False),
            Case("use beyond the budget fires", gpu_series(round(0.9 + ob + 0.01, 6), 0.9),
                 _after(t.gpu_over_budget_for), True),
        ], gpu_runbook))
    specs.append(AlertSpec(
        "VllmGPUMemoryHeadroomCritical", "critical", "page", t.gpu_headroom_critical_for,
        f"(gpu:vllm_headroom_gpu_memory_headroom_ratio:min < {_f(hc)})\nand on (job, instance, gpu)\n"
        f"(gpu:vllm_headroom_gpu_memory_over_budget:ratio > {_f(ob)})",
        "GPU {{ $labels.gpu }} on {{ $labels.instance }} peaked beyond vLLM's budget with {{ $value | "
        "humanizePercentage }} of its memory left (under " + _f(hc * 100) + "%)",
        "Memory beyond vLLM's budget has all but filled the GPU: the next spike is an OOM. (CUDA graphs, captured "
        "after the KV cache, sit a little over the budget on a healthy server: the page needs more than "
        f"{_f(ob * 100)}% of the card beyond it.)", GPU_BY, [
            Case("a healthy server at utilization 0.99 with its CUDA graphs on top does not page",
                 gpu_series(0.995, 0.99),
                 _after(t.gpu_headroom_critical_for), False),
            Case("beyond the budget with almost nothing left pages", gpu_series(round(1 - hc / 2, 6), 0.92),
                 _after(t.gpu_headroom_critical_for), True),
        ], gpu_runbook))

    prefix_runbook = {
        "meaning": "The share of prompt tokens served from the prefix cache fell far below its own 1-day level.",
        "confirm": f"`{t.hit_ratio_fast}` against `{t.hit_ratio_baseline}`; check "
                   "`vllm_headroom_prefix_cache_enabled`, recent restarts (the cache starts empty), routing changes "
                   "that split repeat traffic across replicas, and `--prefix-cache-retention-interval` (vLLM's CacheConfig.prefix_cache_retention_interval in vllm/config/cache.py, for sliding-window and Mamba-style cache groups; recent releases only, so check `vllm serve --help`; vLLM has no environment variable of that name).",
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
    recent_oom = f"(sum by ({by}) (increase(vllm_headroom_oom_events_total{{{sel}}}[30m])) > 0)"
    specs.append(AlertSpec(
        "VllmEngineNotReady", "warning", "ticket", t.engine_not_ready_for,
        f'(max by ({by}) (vllm_headroom_engine_stage{{{sel},stage=~"{LOADING}"}}) == 1)\nunless on ({by})\n'
        f'{recent_oom}',
        "vLLM engine on {{ $labels.server }} has been loading for more than " + t.engine_not_ready_for,
        "The engine is loading for longer than a normal start, with no memory failure to explain it (those have "
        "their own alerts).", SERVER_BY, [
            Case("loading past the startup budget fires",
                 [_srv("vllm_headroom_engine_stage", "1x40", stage="weight_loading")],
                 _after(t.engine_not_ready_for), True),
            Case("a normal start does not fire", [
                _srv("vllm_headroom_engine_stage", f"1x{int(_minutes(t.engine_not_ready_for)) - 5} 0x30",
                     stage="weight_loading")], _after(t.engine_not_ready_for), False),
            Case("a crash loop on a loading-stage OOM is the OOM alert's, not this one's", [
                _srv("vllm_headroom_engine_stage", "1x40", stage="weight_loading"),
                _srv("vllm_headroom_oom_events_total", "0+1x40", stage="weight_loading", phase="loading")],
                _after(t.engine_not_ready_for), False),
        ], ready_runbook))
    specs.append(AlertSpec(
        "VllmTargetDown", "critical", "page", t.target_down_for,
        f"(max by ({by}) (vllm_headroom_target_up{{{sel}}}) == 0)\nunless on ({by})\n"
        f'(max by ({by}) (vllm_headroom_engine_stage{{{sel},stage=~"{LOADING}"}}) == 1)\nunless on ({by})\n'
        f"{recent_oom}",
        "vLLM on {{ $labels.server }} does not answer, is not loading, and no memory failure explains it",
        "The vLLM server is down: its /metrics does not answer and its log does not say it is starting.",
        SERVER_BY, [
            Case("down and not loading fires", [_srv("vllm_headroom_target_up", "0x30"),
                                                _srv("vllm_headroom_engine_stage", "1x30", stage="crashed")],
                 _after(t.target_down_for), True),
            Case("down while loading weights does not fire", [
                _srv("vllm_headroom_target_up", "0x30"),
                _srv("vllm_headroom_engine_stage", "1x30", stage="weight_loading")], _after(t.target_down_for), False),
            Case("down after an OOM that already alerted does not fire", [
                _srv("vllm_headroom_target_up", "1x5 0x30"),
                _srv("vllm_headroom_engine_stage", "1x30", stage="crashed"),
                _srv("vllm_headroom_oom_events_total", "0x5 1x30", stage="kv_cache_alloc", phase="loading")],
                _after(t.target_down_for, 7), False),
            Case("up does not fire", [_srv("vllm_headroom_target_up", "1x30")], _after(t.target_down_for), False),
        ], ready_runbook))
    specs.append(AlertSpec(
        "VllmKVCacheSeriesMissing", "warning", "ticket", t.kv_series_missing_for,
        f"(max by ({by}) (vllm_headroom_target_up{{{sel}}}) == 1)\nunless on ({by})\n"
        f"count by ({by}) (vllm_headroom_kv_cache_usage_ratio{{{sel}}})",
        "{{ $labels.server }} answers but shows no KV-cache usage series: every KV signal is blind there",
        "The target is up and its KV-cache series are missing: a vLLM metric rename the exporter does not know "
        "yet, or --disable-log-stats.", SERVER_BY, [
            Case("up with no KV series fires", [_srv("vllm_headroom_target_up", "1x40")],
                 _after(t.kv_series_missing_for), True),
            Case("up with KV series does not fire", [_srv("vllm_headroom_target_up", "1x40"),
                                                     _eng("vllm_headroom_kv_cache_usage_ratio", "0.5x40")],
                 _after(t.kv_series_missing_for), False),
        ], {"meaning": "vllm-headroom scrapes the server but finds neither `vllm:kv_cache_usage_perc` nor "
                       "`vllm:gpu_cache_usage_perc`: the weekly verdict would read `insufficient_data`.",
            "confirm": "`curl <server>/metrics | grep -i cache_usage`; the vLLM version; whether the server runs "
                       "with `--disable-log-stats` (no `vllm:` metrics at all).",
            "first": "If vLLM renamed the gauge, add the new name to `exporter/vllm/names.py` (RENAMES) and upgrade "
                     "vllm-headroom; if stats are disabled, enable them.",
            "scale": "Not a capacity matter.",
            "evidence": "The vLLM version and the cache-related names its /metrics shows."}))
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
        f"and on ({by})\n(sum by ({by}) (rate(vllm_headroom_generation_tokens_total{{{sel}}}[5m])) > 0)",
        "No new log lines from {{ $labels.server }} for {{ $value | humanizeDuration }} while it generates tokens",
        "The server generates tokens (vLLM then logs its stats at INFO every few seconds) but nothing reaches the "
        "log tail: wrong path, rotated away, unmounted. An idle vLLM logs its stats at DEBUG and may have access "
        "logs off, so silence alone is not a stall.", SERVER_BY, [
            Case("a silent log of a server generating tokens fires", [
                _srv("vllm_headroom_log_last_read_timestamp_seconds", "0x60"),
                _eng("vllm_headroom_generation_tokens_total", "0+600x60")], f"{stalled // 60 + 10}m", True),
            Case("a silent log of an idle server does not fire", [
                _srv("vllm_headroom_log_last_read_timestamp_seconds", "0x60"),
                _srv("vllm_headroom_target_up", "1x60"),
                _eng("vllm_headroom_generation_tokens_total", "500x60")], f"{stalled // 60 + 10}m", False),
            Case("a log read every minute does not fire", [
                _srv("vllm_headroom_log_last_read_timestamp_seconds", "0+60x60"),
                _eng("vllm_headroom_generation_tokens_total", "0+600x60")], f"{stalled // 60 + 10}m", False),
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
        "VllmHeadroomExporterDown", "critical", "page", t.exporter_down_for,
        f"up{{{sel}}} == 0",
        "vllm-headroom on {{ $labels.instance }} is down: no alert about that node's vLLM servers can fire",
        "Prometheus cannot scrape the exporter, and every page about the servers it watches depends on it.",
        ("job", "instance"), [
            Case("a down exporter fires", [series("up", "0x20")], _after(t.exporter_down_for), True),
            Case("an up exporter does not fire", [series("up", "1x20")], _after(t.exporter_down_for), False),
        ], exporter_runbook))
    specs.append(AlertSpec(
        "VllmHeadroomExporterAbsent", "critical", "page", "10m",
        f"absent(up{{{sel}}})",
        "No vllm-headroom target is known to Prometheus: headroom is not monitored anywhere",
        "Prometheus has no scrape target for the exporter at all (service discovery, ServiceMonitor or job "
        "misconfigured), so `up == 0` can never fire.", ("job",), [
            Case("no exporter target at all fires", [('up{job="other"}', "1x20")], "15m", True),
            Case("a known exporter target does not fire", [series("up", "1x20")], "15m", False),
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
    """A week in 1-hour steps of what the fast rules record, and the verdict the guide gives for it."""

    name: str
    verdict: tuple[str, str]
    headroom: str = "0.5x168"  # server:...kv_cache_headroom_ratio:min; "" for no KV data
    queueing: str = "0x168"  # server:...requests_waiting_capacity:queueing (0/1)
    runtime_ooms: str = "0x168"
    loading_ooms: str = "0x168"
    loading_stage: str = "weight_loading"
    loading_oom_at: str = ""  # server:...loading_oom:timestamp values ("" for none)
    ready_at: str = "0+3600x168"  # server:...engine_ready:timestamp values ("" for never ready)
    check: str = "1x168"
    rollout: bool = False  # the second half of the week on a new instance (pod IP)


def verdict_cases(t: Thresholds) -> list[VerdictCase]:
    ok = 0.5
    full = 0.01  # KV saturated at peak hours: vLLM by design
    hours_queue = int(168 * t.capacity_floor_quantile) + 6
    tight = round(t.kv_headroom_warning_ratio / 3, 6)
    min_h = int(t.weekly_min_data_hours)
    return [
        VerdictCase("stable headroom, no OOM: tune and keep", ("tune_and_keep", "stable_headroom")),
        VerdictCase("KV saturating at peak hours every day with no capacity queue: tune and keep",
                    ("tune_and_keep", "stable_headroom"), headroom=" ".join([f"{_f(ok)}x19 {_f(full)}x3"] * 7) +
                    f" {_f(ok)}x13"),
        VerdictCase("no KV data all week: insufficient data", ("insufficient_data", "no_kv_data"), headroom=""),
        VerdictCase(f"KV data for less than {min_h} hours: insufficient data", ("insufficient_data", "no_kv_data"),
                    headroom=f"_x{168 - min_h // 2} {_f(ok)}x{min_h // 2 - 1}"),
        VerdictCase("one runtime OOM: monitor and operate", ("monitor_and_operate", "runtime_oom"),
                    runtime_ooms="0x100 1x68"),
        VerdictCase("runtime OOMs recurring while headroom p05 stays under the warning line: scale side",
                    ("migrate_or_scale", "runtime_oom_recurring"), runtime_ooms="0x50 1x50 2x68",
                    headroom=f"{_f(tight)}x40 {_f(ok)}x128"),
        VerdictCase("runtime OOMs recurring with headroom to spare: monitor and operate",
                    ("monitor_and_operate", "runtime_oom"), runtime_ooms="0x50 1x50 2x68"),
        VerdictCase("requests waiting for KV capacity much of the week: scale side",
                    ("migrate_or_scale", "capacity_queueing"),
                    queueing=f"0x100 1x{hours_queue} 0x{168 - 100 - hours_queue}"),
        VerdictCase("a short capacity queue: monitor and operate", ("monitor_and_operate", "capacity_queueing_seen"),
                    queueing="0x100 1x2 0x66"),
        VerdictCase("weights that cannot load, never started: migrate or scale",
                    ("migrate_or_scale", "weights_cannot_load"), headroom="", loading_ooms="0x50 1+1x118",
                    loading_oom_at="_x50 180000+3600x117", ready_at=""),
        VerdictCase("a KV-allocation failure fixed by the next start: tune and keep",
                    ("tune_and_keep", "stable_headroom"), loading_ooms="0x50 1x118", loading_stage="kv_cache_alloc",
                    loading_oom_at="_x50 180000", ready_at="0+3600x49 _x2 187200+3600x115"),
        VerdictCase("a KV-allocation failure not fixed: fix the configuration",
                    ("tune_and_keep", "loading_config_failure"), headroom="0.5x50", loading_ooms="0x50 1+1x118",
                    loading_stage="kv_cache_alloc", loading_oom_at="_x50 180000+3600x117", ready_at="0+3600x49"),
        VerdictCase("a failed environment check: migrate", ("migrate_or_scale", "environment_check_failed"),
                    check="0x168"),
        VerdictCase("a rollout that changes the instance keeps one verdict per server",
                    ("monitor_and_operate", "runtime_oom"), runtime_ooms="0x40 1x128", rollout=True),
    ]


def weekly_tests(t: Thresholds, rule_files: list[str]) -> dict[str, Any]:
    """The weekly verdict, given what the fast group records (fed in directly, one sample an hour).

    All cases run in one promtool test, each as its own server on its own instance: promtool evaluates the
    weekly group every 5 minutes over the whole week, and that cost is per test, not per series."""
    rows: list[tuple[str, str]] = []
    expected = []
    for i, c in enumerate(verdict_cases(t)):
        verdict, reason = c.verdict
        who = {"server": f"case-{i}", "instance": f"node-{i}:9478"}
        case: list[tuple[str, str]] = [
            _srv("vllm_headroom_oom_events_total", c.runtime_ooms, stage="decode", phase="runtime", **who),
            _srv("vllm_headroom_oom_events_total", c.loading_ooms, stage=c.loading_stage, phase="loading", **who),
            series("vllm_headroom_environment_check", c.check, check="gpu_count", instance=who["instance"]),
            _srv("server:vllm_headroom_requests_waiting_capacity:queueing", c.queueing, **who),
        ]
        if c.headroom:
            case += [_srv("server:vllm_headroom_kv_cache_headroom_ratio:min", c.headroom, **who),
                     _srv("server:vllm_headroom_kv_cache_usage:hours", " ".join(
                         "_" if v == "_" else "1" for v in _expand(c.headroom)), **who)]
        if c.loading_oom_at:
            case.append(_srv("server:vllm_headroom_loading_oom:timestamp", c.loading_oom_at, stage=c.loading_stage,
                             **who))
        if c.ready_at:
            case.append(_srv("server:vllm_headroom_engine_ready:timestamp", c.ready_at, **who))
        case.append(_srv("vllm_headroom_target_up", "1x168", **who))
        if c.rollout:  # the same rows, split: the first half on the old pod, the second on the new one
            split = []
            for s, v in case:
                split.append((s, _first_half(v)))
                split.append((s.replace(f'instance="{who["instance"]}"', f'instance="10.0.1.{i}:9478"'),
                              _second_half(v)))
            case = split
        rows += case
        labels = f'job="{BASE_LABELS["job"]}",server="{who["server"]}"'
        expected.append({"labels": f'server:vllm_headroom_capacity_verdict:7d{{{labels},'
                                   f'reason="{reason}",verdict="{verdict}"}}', "value": 1})
    return {"rule_files": rule_files, "evaluation_interval": "5m", "tests": [{
        "name": "capacity verdicts: " + "; ".join(f"case-{i}: {c.name}" for i, c in enumerate(verdict_cases(t))),
        "interval": "1h",
        "input_series": [{"series": s, "values": v} for s, v in rows],
        "promql_expr_test": [{"expr": "server:vllm_headroom_capacity_verdict:7d", "eval_time": "167h",
                              "exp_samples": expected}],
    }]}


def _expand(values: str) -> list[str]:
    """promtool's `a+bxn` / `axn` / `_xn` notation, expanded (for splitting a week at a rollout)."""
    out: list[str] = []
    for tok in values.split():
        if "x" not in tok:
            out.append(tok)
            continue
        head, n = tok.split("x")
        if head == "_":
            out += ["_"] * int(n)
            continue
        start, _, step = head.partition("+")
        out += [_f(float(start) + float(step or 0) * i) for i in range(int(n) + 1)]
    return out


def _first_half(values: str) -> str:
    v = _expand(values)
    return " ".join(v[:84] + ["_"] * (len(v) - 84))


def _second_half(values: str) -> str:
    v = _expand(values)
    return " ".join(["_"] * 84 + v[84:])


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
