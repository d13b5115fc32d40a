"""The catalog of what vllm-headroom exports of its own: every family with its type, help and labels.

The collector (exporter/metrics.py) builds each family from here and `generate` writes docs/metrics.md from it
(checked in CI), so a family is described in one place. Help texts may name the GPU sampler's settings
({window}, {span}), filled in at collection. vLLM's own series, passed on with a `server` label, are listed in
exporter/vllm/names.py (REEXPORT, REEXPORT_HISTOGRAMS); fleet labels (`role`, `cluster`) are added to every family
that has `server` (exporter/metrics.py `_decorated`).

Rules, dashboards, the report and the simulators take series names from here too (`series`, `family_name`),
so renaming a family renames it everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from exporter.vllm import names

PREFIX = "vllm_headroom_"
# the startup-log facts vllm_config_info carries as labels (numbers only)
CONFIG_FACTS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "max_model_len",
    "max_num_seqs",
    "gpu_memory_utilization",
    "enable_prefix_caching",
)


@dataclass(frozen=True)
class Family:
    name: str  # without the prefix and, for a counter, without `_total`
    type: str  # gauge | counter
    help: str
    labels: tuple[str, ...]

    @property
    def exported(self) -> str:
        """The name on /metrics."""
        return PREFIX + self.name + ("_total" if self.type == "counter" else "")


FAMILIES = (
    Family("build_info", "gauge", "vllm-headroom's version; always 1.", ("version",)),
    Family("collect_duration_seconds", "gauge", "Time this /metrics answer took to build.", ()),
    Family("target_up", "gauge", "1 if the last scrape of this vLLM server's /metrics succeeded.", ("server",)),
    Family("scrape_duration_seconds", "gauge", "How long the last scrape of this vLLM server took.", ("server",)),
    Family("last_scrape_success_timestamp_seconds", "gauge", "Unix time of the last successful scrape.", ("server",)),
    Family(
        "scrape_errors", "counter", "Failed scrapes of a vLLM server, by reason (a fixed set).", ("server", "reason")
    ),
    Family("scrape_response_bytes", "gauge", "Size of the last /metrics answer of this vLLM server.", ("server",)),
    Family(
        "series_dropped",
        "counter",
        "vLLM samples dropped: repeated label sets, (model_name, engine) pairs beyond the cap of 64, re-exported samples beyond 20000 per server.",
        ("server",),
    ),
    Family(
        "engine_ready",
        "gauge",
        "1 once the log or the server says the engine serves; 0 while loading or after a crash.",
        ("server",),
    ),
    Family(
        "engine_stage",
        "gauge",
        "1 for the stage the engine is in now (from its log; ready/unknown from the scrape when no log is followed).",
        ("server", "stage"),
    ),
    Family(
        "oom_events",
        "counter",
        "Memory failures found in the vLLM log, tagged with the stage they hit. One failure printed by many ranks counts once.",
        ("server", "stage", "phase"),
    ),
    Family("log_events", "counter", "Other events found in the vLLM log.", ("server", "event")),
    Family(
        "startup_stage_duration_seconds",
        "gauge",
        "Startup step durations as the vLLM log states them.",
        ("server", "stage"),
    ),
    Family(
        "startup_memory_bytes",
        "gauge",
        "Per-GPU memory split vLLM's startup log states: weights, activation peak, non-torch memory, KV cache, CUDA graphs.",
        ("server", "part"),
    ),
    Family("log_bytes_read", "counter", "Bytes read from the vLLM log.", ("server",)),
    Family("log_lines_read", "counter", "Lines read from the vLLM log.", ("server",)),
    Family("log_rotations", "counter", "Times the log was rotated (renamed away) and followed.", ("server",)),
    Family("log_truncations", "counter", "Times the log was truncated in place (copytruncate).", ("server",)),
    Family(
        "log_bytes_skipped",
        "counter",
        "Bytes not analysed: the rest of over-long lines, and bytes truncated away before they were read.",
        ("server",),
    ),
    Family("log_lines_cut", "counter", "Lines over the length cap, cut to it.", ("server",)),
    Family("log_read_errors", "counter", "Errors opening or reading the log.", ("server",)),
    Family("log_file_present", "gauge", "1 if the configured log file exists.", ("server",)),
    Family("log_last_read_timestamp_seconds", "gauge", "Unix time new bytes were last read from the log.", ("server",)),
    Family(
        "kv_cache_usage_ratio",
        "gauge",
        "KV-cache usage 0..1 per DP engine, from vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc before 0.10).",
        ("server", "model_name", "engine"),
    ),
    Family(
        "kv_cache_headroom_ratio", "gauge", "1 - KV-cache usage, per DP engine.", ("server", "model_name", "engine")
    ),
    Family(
        "kv_cache_capacity_tokens",
        "gauge",
        "KV-cache capacity in tokens per engine: vllm:cache_config_info where it has it, else the startup log's 'GPU KV cache size'.",
        ("server",),
    ),
    Family("kv_cache_capacity_log_tokens", "gauge", "KV-cache capacity the startup log states.", ("server",)),
    Family(
        "kv_cache_capacity_mismatch",
        "gauge",
        "1 when the metric and the log disagree on KV capacity by more than 10% (seen on hybrid models).",
        ("server",),
    ),
    Family("max_concurrency", "gauge", "vLLM's own maximum concurrency for max_model_len-token requests.", ("server",)),
    Family(
        "prefix_cache_hit_ratio",
        "gauge",
        "Prefix-cache hits / queries (tokens) over the configured window, summed over engines, reset-safe; absent with no queries.",
        ("server", "model_name"),
    ),
    Family("prefix_cache_enabled", "gauge", "1 if prefix caching is on (cache_config_info or the log).", ("server",)),
    Family(
        "gpu_memory_utilization_ratio",
        "gauge",
        "The gpu_memory_utilization vLLM was started with: the share of each GPU it claims and fills with weights, activations and KV cache (vllm:cache_config_info, else the startup log).",
        ("server",),
    ),
    Family("prefix_cache_window_seconds", "gauge", "The window of prefix_cache_hit_ratio.", ()),
    Family(
        "gpu_memory_used_bytes",
        "gauge",
        "GPU memory in use at the last sample ({window}).",
        ("gpu", "uuid", "gpu_model", "vendor"),
    ),
    Family("gpu_memory_total_bytes", "gauge", "GPU memory in total.", ("gpu", "uuid", "gpu_model", "vendor")),
    Family(
        "gpu_memory_reserved_bytes",
        "gauge",
        "Driver-reserved GPU memory (NVML memory v2).",
        ("gpu", "uuid", "gpu_model", "vendor"),
    ),
    Family(
        "gpu_memory_peak_used_bytes",
        "gauge",
        "Highest GPU memory in use over the samples of {span} ({window}): a prefill spike between two scrapes still shows, and reading this resets nothing.",
        ("gpu", "uuid", "gpu_model", "vendor"),
    ),
    Family(
        "gpu_memory_headroom_ratio",
        "gauge",
        "(total - peak) / total, peak over {span}. Judge it against the budget vLLM was given (gpu_memory_utilization_ratio), not against 0.",
        ("gpu", "uuid", "gpu_model", "vendor"),
    ),
    Family("gpu_up", "gauge", "1 if the last read of this GPU succeeded.", ("gpu", "uuid", "gpu_model", "vendor")),
    Family("gpu_read_errors", "counter", "Failed reads of this GPU's memory.", ("gpu", "uuid", "gpu_model", "vendor")),
    Family(
        "gpu_lost",
        "counter",
        "Reads that found the GPU lost (fallen off the bus).",
        ("gpu", "uuid", "gpu_model", "vendor"),
    ),
    Family(
        "gpu_process_memory_used_bytes",
        "gauge",
        "GPU memory per process (host PID, read at most once a second).",
        ("gpu", "uuid", "pid"),
    ),
    Family("gpu_sample_interval_seconds", "gauge", "How often GPU memory is sampled.", ()),
    Family(
        "environment_info",
        "gauge",
        "The node's GPU environment; always 1.",
        ("driver_version", "cuda_driver_version", "gpu_model", "gpu_count", "vendor"),
    ),
    Family("vllm_info", "gauge", "vLLM version per server, from its startup log; always 1.", ("server", "version")),
    Family(
        "vllm_config_info",
        "gauge",
        "What each server's startup log states of its parallel layout and limits (numbers only); always 1.",
        ("server", *CONFIG_FACTS),
    ),
    Family(
        "environment_check", "gauge", "1 if the guide's prerequisite holds, 0 if not; absent when unknown.", ("check",)
    ),
)
BY_NAME = {f.name: f for f in FAMILIES}


def family(name: str, **settings: object) -> GaugeMetricFamily | CounterMetricFamily:
    """A new, empty family for one collection; `settings` fill the help text's placeholders."""
    f = BY_NAME[name]
    text = f.help.format(**settings) if settings else f.help
    cls = GaugeMetricFamily if f.type == "gauge" else CounterMetricFamily
    return cls(PREFIX + f.name, text, labels=list(f.labels))


def _passed_on() -> dict[str, tuple[str, str]]:
    """vLLM's families we pass on, by our name without the prefix and `_total`: (family name, sample name).
    A histogram's sample name is its family name: add `_bucket`, `_sum` or `_count`."""
    out = {}
    for ours, typ in names.REEXPORT.values():
        base = ours.removesuffix("_total") if typ == "counter" else ours
        out[base] = (PREFIX + base, PREFIX + ours)
    for ours in names.REEXPORT_HISTOGRAMS.values():
        out[ours] = (PREFIX + ours, PREFIX + ours)
    return out


NAMES = {f.name: (PREFIX + f.name, f.exported) for f in FAMILIES} | _passed_on()


def _lookup(name: str) -> tuple[str, str]:
    try:
        return NAMES[name]
    except KeyError:
        raise KeyError(
            f"{name!r} is no family vllm-headroom exports (exporter/catalog.py, exporter/vllm/names.py)"
        ) from None


def series(name: str) -> str:
    """A family's sample name as PromQL selects it (`oom_events` -> vllm_headroom_oom_events_total); a KeyError
    for a name that is not exported, so a rule cannot go on selecting a series that was renamed away."""
    return _lookup(name)[1]


def family_name(name: str) -> str:
    """A family's name as prometheus_client and OpenMetrics write it: a counter without `_total`."""
    return _lookup(name)[0]
