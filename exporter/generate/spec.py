"""What an alert is made of (expression, severity, routing, runbook) and the promtool cases that pin it, with the
helpers that write those cases' input series. The alerts themselves live per domain in exporter/generate/alerts/.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.duration import prometheus_seconds

# `cluster` (the exporter's `cluster:` or an external label) and `role` (prefill / decode / both) travel with every
# server-level result: absent labels group as empty, so single-cluster setups lose nothing
SERVER_BY = ("job", "cluster", "instance", "server", "role")
SERVER_BY_PROMQL = ", ".join(SERVER_BY)
GPU_BY = ("job", "cluster", "instance", "gpu")
BASE_LABELS = {
    "job": "vllm-headroom",
    "instance": "node-1:9478",
    "server": "prefill-0",
    "gpu": "3",
    "model_name": "kimi-k3",
    "engine": "0",
    "uuid": "GPU-3",
    "gpu_model": "NVIDIA GB300",
    "vendor": "nvidia",
}
LOADING = "weight_loading|graph_capture|kv_cache_alloc|warmup|loading_unknown"
ENGINE_BY = "job, cluster, instance, server, role, model_name, engine"
WEEK_BY = "job, cluster, server, role"  # stable across rollouts: `instance` is a pod IP in Kubernetes
CONFIG_STAGES = "graph_capture|kv_cache_alloc|warmup|loading_unknown"  # a configuration to fix, not hardware


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


def server_series(metric: str, values: str, **labels: str) -> tuple[str, str]:
    return series(metric, values, ("server",), **labels)


def engine_series(metric: str, values: str, **labels: str) -> tuple[str, str]:
    return series(metric, values, ("server", "model_name", "engine"), **labels)


def gpu_series(metric: str, values: str, **labels: str) -> tuple[str, str]:
    return series(metric, values, ("gpu", "uuid", "gpu_model", "vendor"), **labels)


def num(v: float) -> str:
    return f"{v:g}"


def minutes(duration: str) -> float:
    """Minutes in a Prometheus duration ("30s" is half a minute)."""
    return prometheus_seconds(duration) / 60


def after(duration: str, extra: int = 5) -> str:
    return f"{int(minutes(duration)) + extra}m"


def seconds(duration: str) -> float:
    return minutes(duration) * 60
