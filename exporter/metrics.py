"""The exported series: one custom collector that builds fresh families from the daemon's state per scrape.

Fresh families on every collect mean no stale label set lingers after a DP engine or a GPU goes away.
Every name carries the `vllm_headroom_` prefix and base units; counters end in `_total`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.samples import Sample as PCSample

from exporter import __version__, derive
from exporter.encode import Rendered, sample_line
from exporter.environment import CHECKS, evaluate, safe_version
from exporter.logs.patterns import ENGINE_STAGES, EVENT_KINDS, LOADING_STAGES, RUNTIME_STAGES
from exporter.vllm import names
from exporter.vllm.scrape import ERROR_REASONS

if TYPE_CHECKING:
    from exporter.daemon import Daemon, ServerState

P = "vllm_headroom_"
# part label -> the log fact it comes from (GiB as vLLM prints it)
MEMORY_PARTS = {"weights": ("weights_memory_gib", "model_loading_gib"), "activation_peak": ("activation_peak_gib",),
                "non_torch": ("non_torch_memory_gib",), "kv_cache": ("kv_cache_memory_gib",),
                "cuda_graphs": ("graph_memory_gib",)}
CONFIG_FACTS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_model_len",
                "max_num_seqs", "gpu_memory_utilization", "enable_prefix_caching")


def _number_label(value: object) -> str:
    """A log fact as a label value only when it is a number or a boolean: never free text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return ""


STARTUP_STAGES = ("weight_loading", "torch_compile", "memory_profiling", "graph_capture", "engine_init",
                  "time_to_ready")


def _g(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(P + name, doc, labels=labels)


def _c(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(P + name, doc, labels=labels)


def reexport_families() -> dict[str, tuple[str, str]]:
    """wire family -> (our family name without prefix and `_total`, type)."""
    out = {}
    for wire, (ours, typ) in names.REEXPORT.items():
        out[wire] = (ours[: -len("_total")] if typ == "counter" else ours, typ)
    for wire, ours in names.REEXPORT_HISTOGRAMS.items():
        out[wire] = (ours, "histogram")
    return out


def render_reexport(server: str, series: dict) -> dict[str, tuple[list, str]]:
    """One server's re-exported samples and their text lines, per wire family."""
    out = {}
    for wire, (base, typ) in reexport_families().items():
        name = P + base
        parts = names.HISTOGRAM_PARTS if typ == "histogram" else ("_total" if typ == "counter" else "",)
        samples = []
        for part in parts:
            source = series.get(wire + part if typ == "histogram" else wire, ())
            for s in source:
                labels = {"server": server, **{k: v for k, v in s.labels if k in names.PASS_LABELS}}
                samples.append(PCSample(name + part, labels, s.value, None, None))
        if typ == "histogram":  # OpenMetrics wants each series' buckets, sum and count together
            order: dict[tuple, int] = {}
            for x in samples:
                order.setdefault(tuple(sorted((k, v) for k, v in x.labels.items() if k != "le")), len(order))
            samples.sort(key=lambda x: order[tuple(sorted((k, v) for k, v in x.labels.items() if k != "le"))])
        lines = [sample_line(x.name, x.labels, x.value, None) for x in samples]
        out[wire] = (samples, "".join(lines))
    return out


class HeadroomCollector:
    def __init__(self, daemon: "Daemon") -> None:
        self.d = daemon

    def describe(self) -> list:
        return []  # families vary with the state: no registration-time describe

    def collect(self) -> Iterator[Metric]:
        start = time.monotonic()
        states = list(self.d.servers.values())
        yield from self._targets(states)
        yield from self._logs(states)
        facts = {st.name: st.log_facts() for st in states}  # one copy per scrape, under the tailer's lock
        yield from self._kv(states, facts)
        yield from self._reexport(states)
        yield from self._gpus()
        yield from self._environment(states, facts)
        info = _g("build_info", "vllm-headroom's version; always 1.", ["version"])
        info.add_metric([__version__], 1)
        yield info
        dur = _g("collect_duration_seconds", "Time this /metrics answer took to build.", [])
        dur.add_metric([], time.monotonic() - start)
        yield dur

    # -- scraping ------------------------------------------------------------------------------

    def _targets(self, states: list["ServerState"]) -> Iterator[Metric]:
        up = _g("target_up", "1 if the last scrape of this vLLM server's /metrics succeeded.", ["server"])
        dur = _g("scrape_duration_seconds", "How long the last scrape of this vLLM server took.", ["server"])
        last = _g("last_scrape_success_timestamp_seconds", "Unix time of the last successful scrape.", ["server"])
        errs = _c("scrape_errors", "Failed scrapes of a vLLM server, by reason (a fixed set).", ["server", "reason"])
        size = _g("scrape_response_bytes", "Size of the last /metrics answer of this vLLM server.", ["server"])
        dropped = _c("series_dropped", "vLLM samples dropped: repeated label sets, (model_name, engine) pairs "
                     "beyond the cap of 64, re-exported samples beyond 20000 per server.", ["server"])
        for st in states:
            up.add_metric([st.name], 1 if st.up else 0)
            if st.scrapes:
                dur.add_metric([st.name], st.last_duration)
                size.add_metric([st.name], st.last_size)
            if st.last_success is not None:
                last.add_metric([st.name], st.last_success)
            for reason in ERROR_REASONS:
                errs.add_metric([st.name, reason], st.errors.get(reason, 0))
            dropped.add_metric([st.name], st.dropped_series)
        yield from (up, dur, last, errs, size, dropped)

    # -- logs ----------------------------------------------------------------------------------

    def _logs(self, states: list["ServerState"]) -> Iterator[Metric]:
        ready = _g("engine_ready", "1 once the log or the server says the engine serves; 0 while loading or after "
                   "a crash.", ["server"])
        stage = _g("engine_stage", "1 for the stage the engine is in now (from its log; ready/unknown from the "
                   "scrape when no log is followed).", ["server", "stage"])
        ooms = _c("oom_events", "Memory failures found in the vLLM log, tagged with the stage they hit. One "
                  "failure printed by many ranks counts once.", ["server", "stage", "phase"])
        events = _c("log_events", "Other events found in the vLLM log.", ["server", "event"])
        startup = _g("startup_stage_duration_seconds", "Startup step durations as the vLLM log states them.",
                     ["server", "stage"])
        memory = _g("startup_memory_bytes", "Per-GPU memory split vLLM's startup log states: weights, activation "
                    "peak, non-torch memory, KV cache, CUDA graphs.", ["server", "part"])
        health = {
            "log_bytes_read": _c("log_bytes_read", "Bytes read from the vLLM log.", ["server"]),
            "log_lines_read": _c("log_lines_read", "Lines read from the vLLM log.", ["server"]),
            "log_rotations": _c("log_rotations", "Times the log was rotated (renamed away) and followed.", ["server"]),
            "log_truncations": _c("log_truncations", "Times the log was truncated in place (copytruncate).",
                                  ["server"]),
            "log_bytes_skipped": _c("log_bytes_skipped", "Bytes not analysed: the rest of over-long lines, and "
                                    "bytes truncated away before they were read.", ["server"]),
            "log_lines_cut": _c("log_lines_cut", "Lines over the length cap, cut to it.", ["server"]),
            "log_read_errors": _c("log_read_errors", "Errors opening or reading the log.", ["server"]),
        }
        present = _g("log_file_present", "1 if the configured log file exists.", ["server"])
        last_read = _g("log_last_read_timestamp_seconds", "Unix time new bytes were last read from the log.",
                       ["server"])
        for st in states:
            t = st.tailer
            if t is None:
                ready.add_metric([st.name], 1 if st.up else 0)
                for s in ENGINE_STAGES:
                    stage.add_metric([st.name, s], 1 if s == ("ready" if st.up else "unknown") else 0)
                continue
            with t.lock:
                a = t.analyzer
                ep = a.epoch
                current = ep.engine_stage
                if current == "unknown" and st.up:
                    current = "ready"  # the port refuses until the engine is initialised
                counts = dict(a.counts)
                oom = dict(a.oom_counts)
                durations = dict(ep.startup)
                facts = dict(ep.facts)
                h = t.health
                snap = (h.bytes_read, h.lines_read, h.rotations, h.truncations, h.bytes_skipped, h.lines_cut,
                        h.read_errors, h.file_present, h.last_read)
            # the log's word, unless the server stopped answering (a kill the log never saw, e.g. the kernel's)
            ready.add_metric([st.name], 1 if current == "ready" and (st.up or not st.scrapes) else 0)
            for s in ENGINE_STAGES:
                stage.add_metric([st.name, s], 1 if s == current else 0)
            for s in LOADING_STAGES:
                ooms.add_metric([st.name, s, "loading"], oom.get((s, "loading"), 0))
            for s in RUNTIME_STAGES:
                ooms.add_metric([st.name, s, "runtime"], oom.get((s, "runtime"), 0))
            for kind in EVENT_KINDS:
                if kind != "oom":
                    events.add_metric([st.name, kind], counts.get(kind, 0))
            for s in STARTUP_STAGES:
                if s + "_s" in durations:
                    startup.add_metric([st.name, s], durations[s + "_s"])
            for part, keys in MEMORY_PARTS.items():
                value = next((facts[k] for k in keys if isinstance(facts.get(k), (int, float))), None)
                if value is not None:
                    memory.add_metric([st.name, part], value * 1024**3)
            for fam, value in zip(health.values(), snap[:7]):
                fam.add_metric([st.name], value)
            present.add_metric([st.name], 1 if snap[7] else 0)
            if snap[8] is not None:
                last_read.add_metric([st.name], snap[8])
        yield from (ready, stage, ooms, events, startup, memory, *health.values(), present, last_read)

    # -- KV cache and prefix cache -------------------------------------------------------------------

    def _kv(self, states: list["ServerState"], all_facts: dict[str, dict]) -> Iterator[Metric]:
        usage = _g("kv_cache_usage_ratio", "KV-cache usage 0..1 per DP engine, from vllm:kv_cache_usage_perc "
                   "(vllm:gpu_cache_usage_perc before 0.10).", ["server", "model_name", "engine"])
        headroom = _g("kv_cache_headroom_ratio", "1 - KV-cache usage, per DP engine.", ["server", "model_name", "engine"])
        cap = _g("kv_cache_capacity_tokens", "KV-cache capacity in tokens per engine: vllm:cache_config_info where "
                 "it has it, else the startup log's 'GPU KV cache size'.", ["server"])
        cap_log = _g("kv_cache_capacity_log_tokens", "KV-cache capacity the startup log states.", ["server"])
        mismatch = _g("kv_cache_capacity_mismatch", "1 when the metric and the log disagree on KV capacity by more "
                      "than 10% (seen on hybrid models).", ["server"])
        conc = _g("max_concurrency", "vLLM's own maximum concurrency for max_model_len-token requests.", ["server"])
        hit = _g("prefix_cache_hit_ratio", "Prefix-cache hits / queries (tokens) over the configured window, summed "
                 "over engines, reset-safe; absent with no queries.", ["server", "model_name"])
        enabled = _g("prefix_cache_enabled", "1 if prefix caching is on (cache_config_info or the log).", ["server"])
        budget = _g("gpu_memory_utilization_ratio", "The gpu_memory_utilization vLLM was started with: the share of "
                    "each GPU it claims and fills with weights, activations and KV cache (vllm:cache_config_info, "
                    "else the startup log).", ["server"])
        window = _g("prefix_cache_window_seconds", "The window of prefix_cache_hit_ratio.", [])
        window.add_metric([], self.d.cfg.prefix_cache_window_s)
        for st in states:
            for (model, engine), u in sorted(st.kv_usage.items()):
                usage.add_metric([st.name, model, engine], u)
                headroom.add_metric([st.name, model, engine], 1.0 - u)
            facts = all_facts[st.name]
            log_tokens = facts.get("kv_cache_tokens")
            metric_tokens = derive.capacity_from_config(st.cache_config)
            best = metric_tokens or log_tokens
            if best:
                cap.add_metric([st.name], best)
            if log_tokens:
                cap_log.add_metric([st.name], log_tokens)
            mm = derive.capacity_mismatch(metric_tokens, log_tokens)
            if mm is not None:
                mismatch.add_metric([st.name], 1 if mm else 0)
            c = st.cache_config.get("kv_cache_max_concurrency")
            try:
                c = float(c) if c not in (None, "", "None") else facts.get("max_concurrency")
            except ValueError:
                c = facts.get("max_concurrency")
            if c is not None:
                conc.add_metric([st.name], float(c))
            for model, ratio in sorted(st.hit_ratios().items()):
                hit.add_metric([st.name, model], ratio)
            en = derive.prefix_enabled(st.cache_config)
            if en is None and isinstance(facts.get("enable_prefix_caching"), bool):
                en = facts["enable_prefix_caching"]
            if en is not None:
                enabled.add_metric([st.name], 1 if en else 0)
            util = derive.memory_utilization(st.cache_config, facts)
            if util is not None:
                budget.add_metric([st.name], util)
        yield from (usage, headroom, cap, cap_log, mismatch, conc, hit, enabled, window, budget)

    def _reexport(self, states: list["ServerState"]) -> Iterator[Metric]:
        """vLLM's own series with a `server` label: rendered once per scrape, reused by every /metrics answer."""
        fams = {wire: Rendered(P + base, f"Re-exported {wire} with a server label.", typ)
                for wire, (base, typ) in reexport_families().items()}
        for st in states:
            if st.up:
                for wire, (samples, text) in st.reexported().items():
                    fams[wire].add_rendered(samples, text)
        yield from fams.values()

    # -- GPUs and environment ---------------------------------------------------------------------

    def _gpus(self) -> Iterator[Metric]:
        sampler = self.d.gpu
        labels = ["gpu", "uuid", "gpu_model", "vendor"]
        window = f"sampled every {sampler.interval_s:g}s" if sampler else "not sampled"
        used = _g("gpu_memory_used_bytes", f"GPU memory in use at the last sample ({window}).", labels)
        total = _g("gpu_memory_total_bytes", "GPU memory in total.", labels)
        reserved = _g("gpu_memory_reserved_bytes", "Driver-reserved GPU memory (NVML memory v2).", labels)
        span = f"the last {sampler.peak_window_s:g}s" if sampler else "a trailing window"
        peak = _g("gpu_memory_peak_used_bytes", f"Highest GPU memory in use over the samples of {span} ({window}): "
                  "a prefill spike between two scrapes still shows, and reading this resets nothing.", labels)
        head = _g("gpu_memory_headroom_ratio", f"(total - peak) / total, peak over {span}. Judge it against the "
                  "budget vLLM was given (gpu_memory_utilization_ratio), not against 0.", labels)
        up = _g("gpu_up", "1 if the last read of this GPU succeeded.", labels)
        errs = _c("gpu_read_errors", "Failed reads of this GPU's memory.", labels)
        lost = _c("gpu_lost", "Reads that found the GPU lost (fallen off the bus).", labels)
        procs = _g("gpu_process_memory_used_bytes", "GPU memory per process (host PID, read at most once a second).",
                   ["gpu", "uuid", "pid"])
        interval = _g("gpu_sample_interval_seconds", "How often GPU memory is sampled.", [])
        if sampler is not None:
            interval.add_metric([], sampler.interval_s)
            for st in sampler.collect():
                lv = [st.info.index, st.info.uuid, st.info.model, st.info.vendor]
                up.add_metric(lv, 1 if st.up else 0)
                errs.add_metric(lv, st.errors)
                lost.add_metric(lv, st.lost)
                if not st.up or st.total is None:
                    continue
                used.add_metric(lv, st.used)
                total.add_metric(lv, st.total)
                if st.reserved is not None:
                    reserved.add_metric(lv, st.reserved)
                pk = st.peak if st.peak is not None else st.used
                peak.add_metric(lv, pk)
                if st.total:
                    head.add_metric(lv, max(0.0, (st.total - pk) / st.total))
                for pid, b in st.processes:
                    procs.add_metric([st.info.index, st.info.uuid, str(pid)], b)
        yield from (used, total, reserved, peak, head, up, errs, lost, procs, interval)

    def _environment(self, states: list["ServerState"], all_facts: dict[str, dict]) -> Iterator[Metric]:
        sampler = self.d.gpu
        driver = sampler.driver if sampler else {}
        models = [st.info.model for st in sampler.states.values()] if sampler else []
        vendor = next(iter(sampler.states.values())).info.vendor if sampler and sampler.states else None
        versions = [v for v in (safe_version(all_facts[st.name].get("vllm_version")) for st in states) if v]
        info = _g("environment_info", "The node's GPU environment; always 1.",
                  ["driver_version", "cuda_driver_version", "gpu_model", "gpu_count", "vendor"])
        if sampler is not None:
            info.add_metric([driver.get("driver_version", ""), driver.get("cuda_driver_version", ""),
                             models[0] if models else "", str(len(models)), vendor or ""], 1)
        vinfo = _g("vllm_info", "vLLM version per server, from its startup log; always 1.", ["server", "version"])
        for st in states:
            v = safe_version(all_facts[st.name].get("vllm_version"))
            if v:
                vinfo.add_metric([st.name, v], 1)
        cfg = _g("vllm_config_info", "What each server's startup log states of its parallel layout and limits "
                 "(numbers only); always 1.", ["server"] + list(CONFIG_FACTS))
        for st in states:
            facts = all_facts[st.name]
            values = [_number_label(facts.get(k)) for k in CONFIG_FACTS]
            if any(values):
                cfg.add_metric([st.name] + values, 1)
        check = _g("environment_check", "1 if the guide's prerequisite holds, 0 if not; absent when unknown.",
                   ["check"])
        results = evaluate(self.d.cfg.environment, vendor, driver, models, versions)
        for name in CHECKS:
            if name in results:
                check.add_metric([name], 1 if results[name] else 0)
        yield from (info, vinfo, cfg, check)
