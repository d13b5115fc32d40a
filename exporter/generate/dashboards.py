"""Three Grafana dashboards, built with grafanalib, with threshold lines from the same Thresholds as the alerts.

(a) on-call live headroom, (b) the weekly capacity review, (c) incident triage for one server. Every
target selects on `job` and `instance`, rates use `$__rate_interval`, and the datasource is a variable.
"""

from __future__ import annotations

import json
from typing import Any

from grafanalib._gen import DashboardEncoder
from grafanalib.core import (
    BarGauge,
    Dashboard,
    GridPos,
    RowPanel,
    Stat,
    StateTimeline,
    Table,
    Target,
    Template,
    Templating,
    Threshold,
    Time,
    TimeSeries,
)

from exporter import catalog
from exporter.generate.thresholds import Thresholds

DS = "${datasource}"
SEL = 'job=~"$job", cluster=~"$cluster", role=~"$role", instance=~"$instance", server=~"$server"'
NODE = 'job=~"$job", cluster=~"$cluster", instance=~"$instance"'
ONE = 'job=~"$job", cluster=~"$cluster", instance=~"$instance", server="$server"'


def _templates(multi_server: bool = True) -> Templating:
    return Templating(
        list=[
            Template(name="datasource", query="prometheus", type="datasource", label="Data source", default=None),
            Template(
                name="job",
                query=f"label_values({catalog.series('build_info')}, job)",
                dataSource=DS,
                label="Job",
                includeAll=True,
                multi=True,
                default="vllm-headroom",
            ),
            # `cluster` and `role` may be absent (one cluster; servers not split into prefill and decode): "All" is
            # `.*`, which also matches a series without the label
            Template(
                name="cluster",
                query=f'label_values({catalog.series("target_up")}{{job=~"$job"}}, cluster)',
                dataSource=DS,
                label="Cluster",
                includeAll=True,
                multi=True,
                allValue=".*",
            ),
            Template(
                name="role",
                query=f'label_values({catalog.series("target_up")}{{job=~"$job", cluster=~"$cluster"}}, role)',
                dataSource=DS,
                label="Role",
                includeAll=True,
                multi=True,
                allValue=".*",
            ),
            Template(
                name="instance",
                query=f'label_values({catalog.series("build_info")}{{job=~"$job"}}, instance)',
                dataSource=DS,
                label="Node",
                includeAll=True,
                multi=True,
            ),
            Template(
                name="server",
                query=f'label_values({catalog.series("target_up")}{{job=~"$job", cluster=~"$cluster", '
                'role=~"$role", instance=~"$instance"}, server)',
                dataSource=DS,
                label="vLLM server",
                includeAll=multi_server,
                multi=multi_server,
            ),
            Template(
                name="model",
                query=f'label_values({catalog.series("kv_cache_usage_ratio")}{{job=~"$job", server=~"$server"}}, model_name)',
                dataSource=DS,
                label="Model",
                includeAll=True,
                multi=True,
            ),
        ]
    )


def target(expr: str, legend: str = "", ref: str = "A", instant: bool = False, fmt: str = "time_series") -> Target:
    return Target(expr=expr, legendFormat=legend, refId=ref, instant=instant, format=fmt, datasource=DS)


def _steps(*pairs: tuple[str, float | None]) -> list[Threshold]:
    return [Threshold(color, i, value if value is not None else 0.0) for i, (color, value) in enumerate(pairs)]


def timeseries(
    title: str,
    targets: list[Target],
    pos: tuple[int, int, int, int],
    unit: str = "",
    description: str = "",
    thresholds: list[Threshold] | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    style: str = "bars",
) -> TimeSeries:
    kwargs: dict[str, Any] = {}
    if thresholds:
        kwargs = {"thresholds": thresholds, "thresholdsStyleMode": "line+area"}
    return TimeSeries(
        title=title,
        dataSource=DS,
        targets=targets,
        unit=unit,
        description=description,
        gridPos=GridPos(*pos),
        valueMin=vmin,
        valueMax=vmax,
        drawStyle="bars" if style == "bars" and not thresholds else "line",
        **kwargs,
    )


def _headroom_steps(critical: float, warning: float) -> list[Threshold]:
    return _steps(("red", None), ("orange", critical), ("green", warning))


def oncall(t: Thresholds) -> Dashboard:
    over = _steps(("green", None), ("orange", 0.0), ("red", t.gpu_over_budget_warning_ratio))
    panels = [
        RowPanel(title="Headroom", gridPos=GridPos(1, 24, 0, 0)),
        timeseries(
            "KV-cache headroom per DP engine",
            [
                target(
                    f'{catalog.series("kv_cache_headroom_ratio")}{{{SEL}, model_name=~"$model"}}',
                    "{{server}} engine {{engine}}",
                )
            ],
            (8, 12, 0, 1),
            "percentunit",
            "1 - KV-cache usage. Near 0 at peak hours is vLLM working as designed "
            "(it fills its budget with KV blocks): the page is on requests waiting for capacity, per engine.",
            None,
            0,
            1,
            "line",
        ),
        timeseries(
            "GPU memory beyond vLLM's budget",
            [target(f"gpu:vllm_headroom_gpu_memory_over_budget:ratio{{{NODE}}}", "{{instance}} GPU {{gpu}}")],
            (8, 12, 12, 1),
            "percentunit",
            "Peak use (max of 10 Hz samples over a trailing window) / total, minus "
            "the gpu_memory_utilization vLLM was given. At or under 0 is healthy; the line is the "
            "VllmGPUMemoryOverBudget threshold.",
            over,
            None,
            None,
            "line",
        ),
        timeseries(
            "Memory failures by stage",
            [
                target(
                    f"sum by (server, stage, phase) (increase({catalog.series('oom_events')}{{{SEL}}}[$__rate_interval]))",
                    "{{server}} {{phase}}: {{stage}}",
                )
            ],
            (8, 12, 0, 9),
            "short",
            "Stage-tagged OOMs from the vLLM logs. Loading-stage: check image, driver, hardware, topology. Runtime: "
            "reduce context, concurrency or cache retention.",
        ),
        timeseries(
            "Engine ready",
            [target(f"{catalog.series('engine_ready')}{{{SEL}}}", "{{server}}")],
            (8, 12, 12, 9),
            "short",
            "1 serving, 0 loading, crashed or not answering.",
            style="line",
        ),
        RowPanel(title="Load", gridPos=GridPos(1, 24, 0, 17)),
        timeseries(
            "Prefix-cache hit ratio",
            [
                target(f"{t.hit_ratio_fast}{{{SEL}}}", f"{{{{server}}}} ({t.prefix_fast_window})"),
                target(
                    f"{t.hit_ratio_baseline}{{{SEL}}}", f"{{{{server}}}} ({t.prefix_baseline_window} baseline)", "B"
                ),
            ],
            (8, 8, 0, 18),
            "percentunit",
            "Hits / queries in tokens, summed over engines before dividing.",
            vmin=0,
            vmax=1,
            style="line",
        ),
        timeseries(
            "Requests running and waiting",
            [
                target(f"server:vllm_headroom_requests_running:sum{{{SEL}}}", "{{server}} running"),
                target(f"server:vllm_headroom_requests_waiting:sum{{{SEL}}}", "{{server}} waiting", "B"),
            ],
            (8, 8, 8, 18),
            "short",
            style="line",
        ),
        timeseries(
            "Preemptions per second",
            [
                target(
                    f"sum by (server) (rate({catalog.series('preemptions')}{{{SEL}}}[$__rate_interval]))", "{{server}}"
                )
            ],
            (8, 8, 16, 18),
            "short",
            "Line: the VllmPreemptionsRising threshold.",
            _steps(("green", None), ("red", t.preemption_rate_warning)),
            0,
            None,
            "line",
        ),
        timeseries(
            "Time to first token (p50, p99)",
            [
                target(
                    f"histogram_quantile(0.5, sum by (server, le) (rate({catalog.series('time_to_first_token_seconds')}_bucket"
                    f"{{{SEL}}}[$__rate_interval])))",
                    "{{server}} p50",
                ),
                target(
                    f"histogram_quantile(0.99, sum by (server, le) (rate({catalog.series('time_to_first_token_seconds')}_bucket"
                    f"{{{SEL}}}[$__rate_interval])))",
                    "{{server}} p99",
                    "B",
                ),
            ],
            (8, 12, 0, 26),
            "s",
            style="line",
        ),
        timeseries(
            "Queue time (p99)",
            [
                target(
                    f"histogram_quantile(0.99, sum by (server, le) (rate({catalog.series('request_queue_time_seconds')}_bucket"
                    f"{{{SEL}}}[$__rate_interval])))",
                    "{{server}} p99",
                )
            ],
            (8, 12, 12, 26),
            "s",
            style="line",
        ),
    ]
    return Dashboard(
        title="vLLM Headroom / On-call",
        uid="vllm-headroom-oncall",
        tags=["vllm", "headroom"],
        templating=_templates(),
        panels=panels,
        refresh="30s",
        time=Time("now-6h", "now"),
        timezone="browser",
        schemaVersion=37,
        annotations=_oom_annotations(),
    )


def _oom_annotations() -> Any:
    from grafanalib.core import Annotations

    return Annotations(
        list=[
            {
                "datasource": DS,
                "enable": True,
                "name": "OOM events",
                "iconColor": "red",
                "expr": f"increase({catalog.series('oom_events')}{{{SEL}}}[2m]) > 0",
                "step": "60s",
                "titleFormat": "OOM: {{phase}} / {{stage}}",
                "textFormat": "{{server}}",
                "tagKeys": "server,stage,phase",
                "useValueForTime": False,
            }
        ]
    )


def capacity(t: Thresholds) -> Dashboard:
    queue = _steps(("green", None), ("orange", 0.0001), ("red", t.capacity_floor_quantile))
    panels = [
        Table(
            title="Capacity verdict (7 days)",
            dataSource=DS,
            gridPos=GridPos(8, 24, 0, 0),
            targets=[target(f"server:vllm_headroom_capacity_verdict:7d{{{SEL}}}", "", instant=True, fmt="table")],
            description="tune_and_keep / monitor_and_operate / migrate_or_scale per server, with the reason: "
            "weights that cannot load or a failed environment check -> migrate; a configuration "
            "failure at start -> fix it; requests waiting for KV capacity much of the week, or runtime "
            "OOMs recurring while headroom is short -> scale; a runtime OOM -> monitor and operate; "
            "no KV data -> insufficient_data.",
            transformations=[
                {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}}}
            ],
        ),
        BarGauge(
            title="KV-cache headroom, 7-day minimum",
            dataSource=DS,
            gridPos=GridPos(8, 8, 0, 8),
            targets=[
                target(
                    f"server:vllm_headroom_kv_cache_headroom_ratio:min_over_time7d{{{SEL}}}",
                    "{{server}} {{role}}",
                    instant=True,
                )
            ],
            format="percentunit",
            min=0,
            max=1,
            description="Near 0 is normal for a busy server: vLLM fills its budget with KV cache.",
        ),
        BarGauge(
            title="Share of the week with requests waiting for KV capacity",
            dataSource=DS,
            gridPos=GridPos(8, 8, 8, 8),
            targets=[
                target(
                    f"server:vllm_headroom_requests_waiting_capacity:ratio7d{{{SEL}}}",
                    "{{server}} {{role}}",
                    instant=True,
                )
            ],
            format="percentunit",
            min=0,
            max=1,
            thresholds=queue,
            description="Over the red line puts the server on the scale side of the verdict.",
        ),
        BarGauge(
            title="GPU memory headroom on peaks, 7-day minimum",
            dataSource=DS,
            gridPos=GridPos(8, 8, 16, 8),
            targets=[
                target(
                    f"gpu:vllm_headroom_gpu_memory_headroom_ratio:min_over_time7d{{{NODE}}}",
                    "{{instance}} GPU {{gpu}}",
                    instant=True,
                )
            ],
            format="percentunit",
            min=0,
            max=1,
            description="(total - peak) / total: compare with 1 - gpu_memory_utilization, the share vLLM "
            "leaves free by design.",
        ),
        BarGauge(
            title="Memory failures by stage, 7 days",
            dataSource=DS,
            gridPos=GridPos(8, 12, 0, 16),
            targets=[
                target(
                    f"sum by (server, role, stage, phase) (increase({catalog.series('oom_events')}{{{SEL}}}[7d])) > 0",
                    "{{server}} {{role}} {{phase}}: {{stage}}",
                    instant=True,
                )
            ],
            format="short",
            min=0,
            max=10,
        ),
        timeseries(
            "Prefix-cache hit ratio, daily",
            [target(f"{t.hit_ratio_baseline}{{{SEL}}}", "{{server}} {{role}}")],
            (8, 12, 12, 16),
            "percentunit",
            vmin=0,
            vmax=1,
            style="line",
        ),
        timeseries(
            "Concurrency against KV-cache headroom",
            [
                target(f"server:vllm_headroom_requests_running:sum{{{SEL}}}", "{{server}} running requests"),
                target(f"server:vllm_headroom_kv_cache_headroom_ratio:min{{{SEL}}}", "{{server}} KV headroom", "B"),
            ],
            (9, 24, 0, 24),
            "short",
            "Where headroom stays above the warning line at the peak concurrency is the "
            "stable boundary the capacity review asks for.",
            style="line",
        ),
        Stat(
            title="Peak running requests, 7 days",
            dataSource=DS,
            gridPos=GridPos(4, 24, 0, 33),
            targets=[
                target(
                    f"server:vllm_headroom_requests_running:max_over_time7d{{{SEL}}}",
                    "{{server}} {{role}}",
                    instant=True,
                )
            ],
            reduceCalc="lastNotNull",
        ),
    ]
    return Dashboard(
        title="vLLM Headroom / Weekly capacity review",
        uid="vllm-headroom-capacity",
        tags=["vllm", "headroom", "capacity"],
        templating=_templates(),
        panels=panels,
        refresh="5m",
        time=Time("now-7d", "now"),
        timezone="browser",
        schemaVersion=37,
    )


def triage(t: Thresholds) -> Dashboard:
    panels = [
        StateTimeline(
            title="Engine stage",
            dataSource=DS,
            gridPos=GridPos(6, 24, 0, 0),
            targets=[target(f"{catalog.series('engine_stage')}{{{ONE}}} == 1", "{{stage}}")],
            description="weight_loading, graph_capture, kv_cache_alloc, warmup, ready, crashed, from the vLLM log.",
        ),
        BarGauge(
            title="Startup durations (from the log)",
            dataSource=DS,
            gridPos=GridPos(8, 12, 0, 6),
            targets=[target(f"{catalog.series('startup_stage_duration_seconds')}{{{ONE}}}", "{{stage}}", instant=True)],
            format="s",
            min=0,
            max=900,
        ),
        BarGauge(
            title="Memory per GPU at startup (from the log)",
            dataSource=DS,
            gridPos=GridPos(8, 12, 12, 6),
            targets=[target(f"{catalog.series('startup_memory_bytes')}{{{ONE}}}", "{{part}}", instant=True)],
            format="bytes",
            min=0,
            max=300 * 1024**3,
        ),
        Table(
            title="Memory failures so far",
            dataSource=DS,
            gridPos=GridPos(7, 12, 0, 14),
            targets=[target(f"{catalog.series('oom_events')}{{{ONE}}} > 0", "", instant=True, fmt="table")],
        ),
        timeseries(
            "Log events",
            [
                target(
                    f"sum by (event) (increase({catalog.series('log_events')}{{{ONE}}}[$__rate_interval]))", "{{event}}"
                )
            ],
            (7, 12, 12, 14),
            "short",
        ),
        Table(
            title="Environment checks",
            dataSource=DS,
            gridPos=GridPos(7, 12, 0, 21),
            targets=[
                target(f"{catalog.series('environment_check')}{{{NODE}}}", "", instant=True, fmt="table"),
                target(f"{catalog.series('environment_info')}{{{NODE}}}", "", "B", instant=True, fmt="table"),
            ],
        ),
        Stat(
            title="KV-cache capacity: metric, log, max concurrency",
            dataSource=DS,
            gridPos=GridPos(7, 12, 12, 21),
            targets=[
                target(f"{catalog.series('kv_cache_capacity_tokens')}{{{ONE}}}", "metric (tokens)", instant=True),
                target(f"{catalog.series('kv_cache_capacity_log_tokens')}{{{ONE}}}", "log (tokens)", "B", instant=True),
                target(f"{catalog.series('max_concurrency')}{{{ONE}}}", "max concurrency", "C", instant=True),
            ],
            reduceCalc="lastNotNull",
        ),
        timeseries(
            "GPU memory used and peak",
            [
                target(f"{catalog.series('gpu_memory_peak_used_bytes')}{{{NODE}}}", "GPU {{gpu}} peak"),
                target(f"{catalog.series('gpu_memory_total_bytes')}{{{NODE}}}", "GPU {{gpu}} total", "B"),
            ],
            (8, 24, 0, 28),
            "bytes",
            style="line",
        ),
    ]
    return Dashboard(
        title="vLLM Headroom / Incident triage",
        uid="vllm-headroom-triage",
        tags=["vllm", "headroom", "triage"],
        templating=_templates(multi_server=False),
        panels=panels,
        refresh="30s",
        time=Time("now-3h", "now"),
        timezone="browser",
        schemaVersion=37,
        annotations=_oom_annotations(),
    )


def dashboards(t: Thresholds) -> dict[str, dict[str, Any]]:
    out = {}
    for name, build in (
        ("vllm-headroom-oncall", oncall),
        ("vllm-headroom-capacity", capacity),
        ("vllm-headroom-triage", triage),
    ):
        out[name] = json.loads(json.dumps(build(t).auto_panel_ids().to_json_data(), cls=DashboardEncoder))
    return out


def panel_queries(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of a generated dashboard, annotations included."""
    out = []
    for panel in board.get("panels", []):
        for panel_target in panel.get("targets", []) or []:
            if panel_target.get("expr"):
                out.append((panel.get("title", ""), panel_target["expr"]))
    for ann in board.get("annotations", {}).get("list", []):
        if ann.get("expr"):
            out.append((f"annotation {ann.get('name')}", ann["expr"]))
    return out
