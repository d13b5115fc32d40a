"""One thresholds file feeds the alert rules, their tests, the dashboards' threshold lines and the runbooks.

Defaults are embedded here; `--thresholds FILE` overrides any of them. Unknown keys are errors, as in
the daemon's config, so a misspelt threshold never silently keeps its default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

import yaml

from exporter.config import ConfigError


@dataclass(frozen=True)
class Thresholds:
    # which series the rules select: the exporter's scrape job
    selector: str = 'job="vllm-headroom"'
    runbook_base_url: str = "docs/runbooks"  # set to where your on-call opens them, e.g. your repository URL
    # how often the rule groups are evaluated, and the prefix-cache hit ratio's fast and baseline windows
    recording_interval: str = "1m"
    weekly_interval: str = "5m"
    prefix_fast_window: str = "5m"
    prefix_baseline_window: str = "1d"
    # KV-cache headroom (1 - usage), per server: low warns, critical pages
    kv_headroom_warning_ratio: float = 0.15
    kv_headroom_warning_for: str = "15m"
    kv_headroom_critical_ratio: float = 0.05
    kv_headroom_critical_for: str = "5m"
    # GPU memory headroom on peaks, per GPU
    gpu_headroom_warning_ratio: float = 0.08
    gpu_headroom_warning_for: str = "10m"
    gpu_headroom_critical_ratio: float = 0.03
    gpu_headroom_critical_for: str = "2m"
    # exhaustion predicted by predict_linear over `exhaustion_lookback`, while headroom is under `..._below`
    exhaustion_horizon_hours: float = 4.0
    exhaustion_lookback: str = "1h"
    exhaustion_below_ratio: float = 0.30
    exhaustion_for: str = "30m"
    # preemptions per second, per server
    preemption_rate_warning: float = 0.1
    preemption_for: str = "10m"
    # requests waiting while the KV cache is this full
    kv_full_ratio: float = 0.95
    queue_for: str = "5m"
    # prefix-cache hit ratio below this fraction of its own 1-day average (which must be above the floor)
    prefix_collapse_fraction: float = 0.5
    prefix_baseline_min_ratio: float = 0.2
    prefix_collapse_for: str = "30m"
    # servers whose traffic repeats prefixes, so prefix caching should be on (a regex on `server`)
    prefix_reuse_servers: str = ".+"
    # a 2.8T-parameter model takes ~10 minutes to load: longer than this not ready pages
    engine_not_ready_for: str = "20m"
    target_down_for: str = "5m"
    tool_call_errors_per_hour: float = 5
    log_stalled_after_seconds: float = 1800
    exporter_down_for: str = "5m"
    # the weekly capacity verdict: headroom under the floor more than `floor_quantile` of the week -> scale side
    capacity_floor_ratio: float = 0.10
    capacity_floor_quantile: float = 0.05

    @property
    def hit_ratio_fast(self) -> str:
        """The recorded name of the prefix-cache hit ratio over the fast window."""
        return f"server:vllm_headroom_prefix_cache_hit:ratio_rate{self.prefix_fast_window}"

    @property
    def hit_ratio_baseline(self) -> str:
        return f"server:vllm_headroom_prefix_cache_hit:ratio_increase{self.prefix_baseline_window}"

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def load_thresholds(path: str | None) -> Thresholds:
    if path is None:
        return Thresholds()
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the thresholds file: {exc.strerror or exc}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: invalid YAML: {getattr(exc, 'problem', exc)}"]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: <top>: expected a mapping of threshold names to values"])
    defaults = Thresholds()
    known = {f.name: f for f in fields(Thresholds)}
    problems, values = [], {}
    for key, value in data.items():
        if key not in known:
            problems.append(f"{path}: {key}: unknown threshold (known: {', '.join(known)})")
            continue
        want = type(getattr(defaults, key))
        if want is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, want):
            problems.append(f"{path}: {key}: expected a {want.__name__}, got {value!r}")
            continue
        if want is str and key.endswith(("_for", "_lookback", "_interval", "_window")) and \
                not re.match(r"^\d+(s|m|h|d|w)$", value):
            problems.append(f"{path}: {key}: expected a Prometheus duration such as 5m or 1h, got {value!r}")
            continue
        if want is float and (key.endswith("_ratio") or key.endswith("_fraction") or key.endswith("_quantile")) \
                and not 0 <= value <= 1:
            problems.append(f"{path}: {key}: expected a ratio between 0 and 1, got {value!r}")
            continue
        values[key] = value
    if problems:
        raise ConfigError(problems)
    t = Thresholds(**values)
    if t.kv_headroom_critical_ratio >= t.kv_headroom_warning_ratio:
        problems.append(f"{path}: kv_headroom_critical_ratio: expected below kv_headroom_warning_ratio")
    if t.gpu_headroom_critical_ratio >= t.gpu_headroom_warning_ratio:
        problems.append(f"{path}: gpu_headroom_critical_ratio: expected below gpu_headroom_warning_ratio")
    if problems:
        raise ConfigError(problems)
    return t
