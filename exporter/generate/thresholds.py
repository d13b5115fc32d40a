"""One thresholds file feeds the alert rules, their tests, the dashboards' threshold lines and the runbooks.

Defaults are embedded here; `--thresholds FILE` overrides any of them. Unknown keys are errors, as in
the daemon's config, so a misspelt threshold never silently keeps its default.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, fields
from typing import Any

from exporter.config import ConfigError, load_yaml
from exporter.duration import is_prometheus


@dataclass(frozen=True)
class Thresholds:
    # which series the rules select: the exporter's scrape job
    selector: str = 'job="vllm-headroom"'
    # where the on-call opens the runbooks: an absolute URL (the alert travels to a pager, not to this checkout)
    runbook_base_url: str = "https://vllm-headroom.invalid/docs/runbooks"  # .invalid: set it to yours
    # how often the rule groups are evaluated, and the prefix-cache hit ratio's fast and baseline windows
    recording_interval: str = "1m"
    weekly_interval: str = "5m"
    prefix_fast_window: str = "5m"
    prefix_baseline_window: str = "1d"
    # KV cache: a full cache is vLLM working as designed (it fills its budget with KV blocks). The symptom
    # is requests waiting for capacity, per DP engine, averaged over `kv_queue_window`: at least
    # `kv_queue_page_requests` of them for `kv_queue_for` pages. Where vLLM has no
    # num_requests_waiting_by_reason, waiting requests count as capacity-bound while the engine's cache is
    # at least `kv_full_ratio` full.
    kv_queue_window: str = "10m"
    kv_queue_page_requests: float = 1.0
    kv_queue_for: str = "10m"
    kv_full_ratio: float = 0.95
    # the capacity review's "headroom tight" line: KV headroom p05 of the week under this, with runtime OOMs
    # recurring, is the scale side
    kv_headroom_warning_ratio: float = 0.15
    # GPU memory, judged against the budget vLLM was given (gpu_memory_utilization x total): peak use beyond
    # it by more than `gpu_over_budget_warning_ratio` of the card opens a ticket; beyond it with less than
    # `gpu_headroom_critical_ratio` of the card left pages
    gpu_over_budget_warning_ratio: float = 0.02
    gpu_over_budget_for: str = "15m"
    gpu_headroom_critical_ratio: float = 0.02
    gpu_headroom_critical_for: str = "2m"
    # preemptions per second per DP engine, averaged over `preemption_window`: short bursts stay under it
    preemption_rate_warning: float = 0.1
    preemption_window: str = "15m"
    preemption_for: str = "15m"
    # prefix-cache hit ratio below this fraction of its own 1-day average (which must be above the floor)
    prefix_collapse_fraction: float = 0.5
    prefix_baseline_min_ratio: float = 0.2
    prefix_collapse_for: str = "30m"
    # servers whose traffic repeats prefixes, so prefix caching should be on (a regex on `server`)
    prefix_reuse_servers: str = ".+"
    # a 2.8T-parameter model takes ~10 minutes to load: loading longer than this opens a ticket
    engine_not_ready_for: str = "20m"
    target_down_for: str = "5m"
    # a target that answers but shows no KV-cache series (a vLLM metric rename, --disable-log-stats)
    kv_series_missing_for: str = "15m"
    tool_call_errors_per_hour: float = 5
    # the log is stalled when nothing was written for this long while the server generates tokens
    log_stalled_after_seconds: float = 1800
    exporter_down_for: str = "5m"
    # the weekly capacity verdict: requests waiting for KV capacity more than `capacity_floor_quantile` of
    # the week is the scale side; under `weekly_min_data_hours` of KV data is insufficient_data
    capacity_floor_quantile: float = 0.05
    weekly_min_data_hours: float = 24

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
    data = load_yaml(path, "thresholds file") or {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: <top>: expected a mapping of threshold names to values"])
    defaults = Thresholds()
    known = {f.name: f for f in fields(Thresholds)}
    problems, values = [], {}
    for key, value in data.items():
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"
            problems.append(f"{path}: {key}: unknown threshold ({hint})")
            continue
        want = type(getattr(defaults, key))
        if want is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, want):
            problems.append(f"{path}: {key}: expected a {want.__name__}, got {value!r}")
            continue
        if want is str and key.endswith(("_for", "_lookback", "_interval", "_window")) and not is_prometheus(value):
            problems.append(f"{path}: {key}: expected a Prometheus duration such as 5m or 1h, got {value!r}")
            continue
        if (
            want is float
            and (key.endswith("_ratio") or key.endswith("_fraction") or key.endswith("_quantile"))
            and not 0 <= value <= 1
        ):
            problems.append(f"{path}: {key}: expected a ratio between 0 and 1, got {value!r}")
            continue
        values[key] = value
    if problems:
        raise ConfigError(problems)
    t = Thresholds(**values)
    if not re.match(r"^https?://", t.runbook_base_url):
        problems.append(
            f"{path}: runbook_base_url: expected an absolute http(s) URL (alerts are read away from "
            f"this checkout), got {t.runbook_base_url!r}"
        )
    if problems:
        raise ConfigError(problems)
    return t
