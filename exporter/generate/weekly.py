"""The capacity review's 7-day rules and the weekly verdict in the guide's terms, with their promtool tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporter import catalog
from exporter.generate.spec import (
    BASE_LABELS,
    CONFIG_STAGES,
    WEEK_BY,
    num,
    series,
    server_series,
)
from exporter.generate.thresholds import Thresholds


def weekly_rules(t: Thresholds) -> list[dict[str, Any]]:
    """The capacity review's 7-day rules: a file of their own, evaluated every 5 minutes, grouped by stable
    labels (job, cluster, server) so a rollout that changes `instance` does not split a server's week."""
    q = num(t.capacity_floor_quantile)
    week_by = WEEK_BY
    weekly = [
        (
            "server:vllm_headroom_target:seen7d",
            f"max by ({week_by}) (max_over_time({catalog.series('target_up')}{{{t.selector}}}[7d]))",
        ),
        (
            "server:vllm_headroom_kv_cache_usage:hours7d",
            f"sum by ({week_by}) (sum_over_time(server:vllm_headroom_kv_cache_usage:hours[7d]))",
        ),
        (
            "server:vllm_headroom_kv_cache_headroom_ratio:min_over_time7d",
            f"min by ({week_by}) (min_over_time(server:vllm_headroom_kv_cache_headroom_ratio:min[7d]))",
        ),
        (
            "server:vllm_headroom_kv_cache_headroom_ratio:floor_quantile7d",
            f"min by ({week_by}) (quantile_over_time({q}, server:vllm_headroom_kv_cache_headroom_ratio:min[7d]))",
        ),
        (
            "server:vllm_headroom_requests_waiting_capacity:ratio7d",
            f"max by ({week_by}) (avg_over_time(server:vllm_headroom_requests_waiting_capacity:queueing[7d]))",
        ),
        (
            "gpu:vllm_headroom_gpu_memory_headroom_ratio:min_over_time7d",
            "min_over_time(gpu:vllm_headroom_gpu_memory_headroom_ratio:min[7d])",
        ),
        (
            "server:vllm_headroom_oom_events:increase7d",
            f"sum by ({week_by}, stage, phase) (increase({catalog.series('oom_events')}{{{t.selector}}}[7d]))",
        ),
        (
            "server:vllm_headroom_loading_oom:last_timestamp7d",
            f"max by ({week_by}, stage) (max_over_time(server:vllm_headroom_loading_oom:timestamp[7d]))",
        ),
        (
            "server:vllm_headroom_engine_ready:last_timestamp7d",
            f"max by ({week_by}) (max_over_time(server:vllm_headroom_engine_ready:timestamp[7d]))",
        ),
        (
            "server:vllm_headroom_requests_running:max_over_time7d",
            f"max by ({week_by}) (max_over_time(server:vllm_headroom_requests_running:sum[7d]))",
        ),
    ]
    return [
        {
            "name": "vllm-headroom.weekly",
            "interval": t.weekly_interval,
            "rules": [{"record": r, "expr": e} for r, e in weekly] + verdict_rules(t),
        }
    ]


# The weekly verdict, in the guide's terms: each rule holds where the ones above it do not.
VERDICTS = (  # (verdict, reason, what the capacity review says)
    (
        "migrate_or_scale",
        "weights_cannot_load",
        "the weights could not load and no later start succeeded: image, driver, hardware or parallel topology",
    ),
    ("migrate_or_scale", "environment_check_failed", "an environment check of the deployment guide fails"),
    (
        "tune_and_keep",
        "loading_config_failure",
        "a start failed at graph capture, KV-cache allocation or warm-up and no later start succeeded: a configuration "
        "to fix",
    ),
    (
        "insufficient_data",
        "no_kv_data",
        "too little KV-cache data this week to judge: check the KV series and the exporter",
    ),
    (
        "migrate_or_scale",
        "runtime_oom_recurring",
        "runtime OOMs recur while KV headroom p05 stays under the warning line: scale",
    ),
    ("migrate_or_scale", "capacity_queueing", "requests waited for KV capacity much of the week at this load: scale"),
    (
        "monitor_and_operate",
        "runtime_oom",
        "runtime OOMs this week: reduce context, concurrency or retention, replay, and watch",
    ),
    ("monitor_and_operate", "capacity_queueing_seen", "requests waited for KV capacity for a while: keep the alerts"),
    ("tune_and_keep", "stable_headroom", "no capacity queue and no memory failures"),
)
VERDICT_WORDS = (
    ("tune_and_keep", "Tune and keep"),
    ("monitor_and_operate", "Monitor and operate"),
    ("migrate_or_scale", "Migrate or scale"),
    ("insufficient_data", "Insufficient data"),
)


def _uncleared(stages: str) -> str:
    """Loading OOMs at these stages with no successful start after the last of them."""
    week_by = WEEK_BY
    last = f'server:vllm_headroom_loading_oom:last_timestamp7d{{stage=~"{stages}"}}'
    return (
        f"group by ({week_by}) (\n  ({last} > on ({week_by}) group_left () server:vllm_headroom_engine_ready:last_timestamp7d)"
        f"\n  or ({last} unless on ({week_by}) server:vllm_headroom_engine_ready:last_timestamp7d)\n)"
    )


def verdict_conditions(t: Thresholds) -> list[str]:
    sel = t.selector
    week_by = WEEK_BY
    runtime = f'sum by ({week_by}) (server:vllm_headroom_oom_events:increase7d{{phase="runtime"}})'
    return [
        _uncleared("weight_loading"),
        f"group by ({week_by}) ({catalog.series('target_up')}{{{sel}}} * on (job, cluster, instance) group_left () "
        f"(min by (job, cluster, instance) ({catalog.series('environment_check')}{{{sel}}}) == 0))",
        _uncleared(CONFIG_STAGES),
        f"group by ({week_by}) (server:vllm_headroom_target:seen7d unless on ({week_by}) "
        f"(server:vllm_headroom_kv_cache_usage:hours7d >= {num(t.weekly_min_data_hours)}))",
        # runtime OOMs recurring (increase() extrapolates: > 1.5 is two or more) while the week's KV
        # headroom p05 stays under the warning line
        f"group by ({week_by}) (({runtime} > 1.5) and on ({week_by}) "
        f"(server:vllm_headroom_kv_cache_headroom_ratio:floor_quantile7d < {num(t.kv_headroom_warning_ratio)}))",
        f"group by ({week_by}) (server:vllm_headroom_requests_waiting_capacity:ratio7d > {num(t.capacity_floor_quantile)})",
        f"group by ({week_by}) ({runtime} > 0.5)",
        f"group by ({week_by}) (server:vllm_headroom_requests_waiting_capacity:ratio7d > 0)",
        f"group by ({week_by}) (server:vllm_headroom_target:seen7d)",
    ]


def verdict_rules(t: Thresholds) -> list[dict[str, Any]]:
    conds = verdict_conditions(t)
    rules = []
    for i, (verdict, reason, _text) in enumerate(VERDICTS):
        expr = conds[i]
        if i:
            expr = f"{expr}\nunless on ({WEEK_BY}) (\n  " + "\nor\n  ".join(conds[:i]) + "\n)"
        rules.append(
            {
                "record": "server:vllm_headroom_capacity_verdict:7d",
                "expr": expr,
                "labels": {"verdict": verdict, "reason": reason},
            }
        )
    return rules


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
        VerdictCase(
            "KV saturating at peak hours every day with no capacity queue: tune and keep",
            ("tune_and_keep", "stable_headroom"),
            headroom=" ".join([f"{num(ok)}x19 {num(full)}x3"] * 7) + f" {num(ok)}x13",
        ),
        VerdictCase("no KV data all week: insufficient data", ("insufficient_data", "no_kv_data"), headroom=""),
        VerdictCase(
            f"KV data for less than {min_h} hours: insufficient data",
            ("insufficient_data", "no_kv_data"),
            headroom=f"_x{168 - min_h // 2} {num(ok)}x{min_h // 2 - 1}",
        ),
        VerdictCase(
            "one runtime OOM: monitor and operate", ("monitor_and_operate", "runtime_oom"), runtime_ooms="0x100 1x68"
        ),
        VerdictCase(
            "runtime OOMs recurring while headroom p05 stays under the warning line: scale side",
            ("migrate_or_scale", "runtime_oom_recurring"),
            runtime_ooms="0x50 1x50 2x68",
            headroom=f"{num(tight)}x40 {num(ok)}x128",
        ),
        VerdictCase(
            "runtime OOMs recurring with headroom to spare: monitor and operate",
            ("monitor_and_operate", "runtime_oom"),
            runtime_ooms="0x50 1x50 2x68",
        ),
        VerdictCase(
            "requests waiting for KV capacity much of the week: scale side",
            ("migrate_or_scale", "capacity_queueing"),
            queueing=f"0x100 1x{hours_queue} 0x{168 - 100 - hours_queue}",
        ),
        VerdictCase(
            "a short capacity queue: monitor and operate",
            ("monitor_and_operate", "capacity_queueing_seen"),
            queueing="0x100 1x2 0x66",
        ),
        VerdictCase(
            "weights that cannot load, never started: migrate or scale",
            ("migrate_or_scale", "weights_cannot_load"),
            headroom="",
            loading_ooms="0x50 1+1x118",
            loading_oom_at="_x50 180000+3600x117",
            ready_at="",
        ),
        VerdictCase(
            "a KV-allocation failure fixed by the next start: tune and keep",
            ("tune_and_keep", "stable_headroom"),
            loading_ooms="0x50 1x118",
            loading_stage="kv_cache_alloc",
            loading_oom_at="_x50 180000",
            ready_at="0+3600x49 _x2 187200+3600x115",
        ),
        VerdictCase(
            "a KV-allocation failure not fixed: fix the configuration",
            ("tune_and_keep", "loading_config_failure"),
            headroom="0.5x50",
            loading_ooms="0x50 1+1x118",
            loading_stage="kv_cache_alloc",
            loading_oom_at="_x50 180000+3600x117",
            ready_at="0+3600x49",
        ),
        VerdictCase(
            "a failed environment check: migrate", ("migrate_or_scale", "environment_check_failed"), check="0x168"
        ),
        VerdictCase(
            "a rollout that changes the instance keeps one verdict per server",
            ("monitor_and_operate", "runtime_oom"),
            runtime_ooms="0x40 1x128",
            rollout=True,
        ),
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
            server_series(catalog.series("oom_events"), c.runtime_ooms, stage="decode", phase="runtime", **who),
            server_series(catalog.series("oom_events"), c.loading_ooms, stage=c.loading_stage, phase="loading", **who),
            series(catalog.series("environment_check"), c.check, check="gpu_count", instance=who["instance"]),
            server_series("server:vllm_headroom_requests_waiting_capacity:queueing", c.queueing, **who),
        ]
        if c.headroom:
            case += [
                server_series("server:vllm_headroom_kv_cache_headroom_ratio:min", c.headroom, **who),
                server_series(
                    "server:vllm_headroom_kv_cache_usage:hours",
                    " ".join("_" if v == "_" else "1" for v in _expand(c.headroom)),
                    **who,
                ),
            ]
        if c.loading_oom_at:
            case.append(
                server_series(
                    "server:vllm_headroom_loading_oom:timestamp", c.loading_oom_at, stage=c.loading_stage, **who
                )
            )
        if c.ready_at:
            case.append(server_series("server:vllm_headroom_engine_ready:timestamp", c.ready_at, **who))
        case.append(server_series(catalog.series("target_up"), "1x168", **who))
        if c.rollout:  # the same rows, split: the first half on the old pod, the second on the new one
            split = []
            for s, v in case:
                split.append((s, _first_half(v)))
                split.append(
                    (s.replace(f'instance="{who["instance"]}"', f'instance="10.0.1.{i}:9478"'), _second_half(v))
                )
            case = split
        rows += case
        labels = f'job="{BASE_LABELS["job"]}",server="{who["server"]}"'
        expected.append(
            {
                "labels": f'server:vllm_headroom_capacity_verdict:7d{{{labels},reason="{reason}",verdict="{verdict}"}}',
                "value": 1,
            }
        )
    return {
        "rule_files": rule_files,
        "evaluation_interval": "5m",
        "tests": [
            {
                "name": "capacity verdicts: "
                + "; ".join(f"case-{i}: {c.name}" for i, c in enumerate(verdict_cases(t))),
                "interval": "1h",
                "input_series": [{"series": s, "values": v} for s, v in rows],
                "promql_expr_test": [
                    {"expr": "server:vllm_headroom_capacity_verdict:7d", "eval_time": "167h", "exp_samples": expected}
                ],
            }
        ],
    }


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
        out += [num(float(start) + float(step or 0) * i) for i in range(int(n) + 1)]
    return out


def _first_half(values: str) -> str:
    v = _expand(values)
    return " ".join(v[:84] + ["_"] * (len(v) - 84))


def _second_half(values: str) -> str:
    v = _expand(values)
    return " ".join(["_"] * 84 + v[84:])
