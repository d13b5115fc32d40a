"""The exported series: one custom collector that builds fresh families from the daemon's state per scrape.

Fresh families on every collect mean no stale label set lingers after a DP engine or a GPU goes away.
Every name carries the `vllm_headroom_` prefix and base units; counters end in `_total`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter import __version__, derive
from exporter.encode import Rendered
from exporter.environment import CHECKS, evaluate, safe_version
from exporter.logs.patterns import ENGINE_STAGES, EVENT_KINDS, LOADING_STAGES, RUNTIME_STAGES
from exporter.reexport import PREFIX, reexport_families
from exporter.vllm.scrape import ERROR_REASONS

if TYPE_CHECKING:
    from exporter.state import DaemonView, ServerState

# part label -> the log fact it comes from (GiB as vLLM prints it)
MEMORY_PARTS = {
    "weights": ("weights_memory_gib", "model_loading_gib"),
    "activation_peak": ("activation_peak_gib",),
    "non_torch": ("non_torch_memory_gib",),
    "kv_cache": ("kv_cache_memory_gib",),
    "cuda_graphs": ("graph_memory_gib",),
}
CONFIG_FACTS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "max_model_len",
    "max_num_seqs",
    "gpu_memory_utilization",
    "enable_prefix_caching",
)


def _number_label(value: object) -> str:
    """A log fact as a label value only when it is a number or a boolean: never free text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return ""


STARTUP_STAGES = (
    "weight_loading",
    "torch_compile",
    "memory_profiling",
    "graph_capture",
    "engine_init",
    "time_to_ready",
)


def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    """One of our gauge families: `vllm_headroom_` + name."""
    return GaugeMetricFamily(PREFIX + name, doc, labels=labels)


def counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    """One of our counter families (prometheus_client adds `_total`)."""
    return CounterMetricFamily(PREFIX + name, doc, labels=labels)


def _decorated(
    families: Iterable[Metric],
    extra: dict[str, dict[str, str]],
    owners: dict[str, tuple[str, str]],
    cluster: str | None,
) -> Iterator[Metric]:
    """Fleet labels added in one place: `role` (and `cluster` when configured) beside every `server`, and on a
    GPU's series the server that uses it (config `gpus`), so a server spanning nodes is one `server` on all of
    its GPUs and a prefill pool's GPUs are told from a decode pool's."""
    for fam in families:
        out = []
        for s in fam.samples:
            labels = s.labels
            server = labels.get("server")
            if server is not None:
                add = extra.get(server)
            elif "gpu" in labels and owners:
                owner = owners.get(labels["gpu"]) or owners.get("*")
                add = {"server": owner[0], "role": owner[1]} if owner else None
            else:
                add = None
            if add or cluster:
                labels = {**labels, **(add or {}), **({"cluster": cluster} if cluster else {})}
                s = s._replace(labels=labels)
            out.append(s)
        fam.samples = out
        yield fam


class HeadroomCollector:
    def __init__(self, daemon: "DaemonView") -> None:
        self.d = daemon

    def describe(self) -> list:
        return []  # families vary with the state: no registration-time describe

    def collect(self) -> Iterator[Metric]:
        start = time.monotonic()
        states = list(self.d.servers.values())
        extra = {st.name: st.extra_labels for st in states}
        owners = self.d.gpu_owners
        cluster = self.d.cfg.cluster
        yield from _decorated(self._targets(states), extra, owners, cluster)
        yield from _decorated(self._logs(states), extra, owners, cluster)
        facts = {st.name: st.log_facts() for st in states}  # one copy per scrape, under the tailer's lock
        yield from _decorated(self._kv(states, facts), extra, owners, cluster)
        yield from self._reexport(states)  # rendered with the labels already
        yield from _decorated(self._gpus(), extra, owners, cluster)
        yield from _decorated(self._environment(states, facts), extra, owners, cluster)
        info = gauge("build_info", "vllm-headroom's version; always 1.", ["version"])
        info.add_metric([__version__], 1)
        yield from _decorated([info], extra, owners, cluster)
        dur = gauge("collect_duration_seconds", "Time this /metrics answer took to build.", [])
        dur.add_metric([], time.monotonic() - start)
        yield from _decorated([dur], extra, owners, cluster)

    # -- scraping ------------------------------------------------------------------------------

    def _targets(self, states: list["ServerState"]) -> Iterator[Metric]:
        up = gauge("target_up", "1 if the last scrape of this vLLM server's /metrics succeeded.", ["server"])
        dur = gauge("scrape_duration_seconds", "How long the last scrape of this vLLM server took.", ["server"])
        last = gauge("last_scrape_success_timestamp_seconds", "Unix time of the last successful scrape.", ["server"])
        errs = counter(
            "scrape_errors", "Failed scrapes of a vLLM server, by reason (a fixed set).", ["server", "reason"]
        )
        size = gauge("scrape_response_bytes", "Size of the last /metrics answer of this vLLM server.", ["server"])
        dropped = counter(
            "series_dropped",
            "vLLM samples dropped: repeated label sets, (model_name, engine) pairs "
            "beyond the cap of 64, re-exported samples beyond 20000 per server.",
            ["server"],
        )
        for st in states:
            if st.config.url is None:  # a rank whose API server another node's exporter scrapes
                continue
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

    def _logs(self, states: list["ServerState"]) -> Iterator[Metric]:  # noqa: C901  goes with collectors per domain
        ready = gauge(
            "engine_ready",
            "1 once the log or the server says the engine serves; 0 while loading or after a crash.",
            ["server"],
        )
        stage = gauge(
            "engine_stage",
            "1 for the stage the engine is in now (from its log; ready/unknown from the "
            "scrape when no log is followed).",
            ["server", "stage"],
        )
        ooms = counter(
            "oom_events",
            "Memory failures found in the vLLM log, tagged with the stage they hit. One "
            "failure printed by many ranks counts once.",
            ["server", "stage", "phase"],
        )
        events = counter("log_events", "Other events found in the vLLM log.", ["server", "event"])
        startup = gauge(
            "startup_stage_duration_seconds", "Startup step durations as the vLLM log states them.", ["server", "stage"]
        )
        memory = gauge(
            "startup_memory_bytes",
            "Per-GPU memory split vLLM's startup log states: weights, activation "
            "peak, non-torch memory, KV cache, CUDA graphs.",
            ["server", "part"],
        )
        health = {
            "log_bytes_read": counter("log_bytes_read", "Bytes read from the vLLM log.", ["server"]),
            "log_lines_read": counter("log_lines_read", "Lines read from the vLLM log.", ["server"]),
            "log_rotations": counter(
                "log_rotations", "Times the log was rotated (renamed away) and followed.", ["server"]
            ),
            "log_truncations": counter(
                "log_truncations", "Times the log was truncated in place (copytruncate).", ["server"]
            ),
            "log_bytes_skipped": counter(
                "log_bytes_skipped",
                "Bytes not analysed: the rest of over-long lines, and bytes truncated away before they were read.",
                ["server"],
            ),
            "log_lines_cut": counter("log_lines_cut", "Lines over the length cap, cut to it.", ["server"]),
            "log_read_errors": counter("log_read_errors", "Errors opening or reading the log.", ["server"]),
        }
        present = gauge("log_file_present", "1 if the configured log file exists.", ["server"])
        last_read = gauge(
            "log_last_read_timestamp_seconds", "Unix time new bytes were last read from the log.", ["server"]
        )
        for st in states:
            t = st.tailer
            if t is None:
                ready.add_metric([st.name], 1 if st.up else 0)
                for s in ENGINE_STAGES:
                    stage.add_metric([st.name, s], 1 if s == ("ready" if st.up else "unknown") else 0)
                continue
            tail = t.snapshot()
            current = tail.engine_stage
            if current == "unknown" and st.up:
                current = "ready"  # the port refuses until the engine is initialised
            counts, oom, durations, facts, h = tail.counts, tail.oom_counts, tail.startup, tail.facts, tail.health
            snap = (
                h.bytes_read,
                h.lines_read,
                h.rotations,
                h.truncations,
                h.bytes_skipped,
                h.lines_cut,
                h.read_errors,
                h.file_present,
                h.last_read,
            )
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
            for fam, value in zip(health.values(), snap[:7], strict=True):
                fam.add_metric([st.name], value)
            present.add_metric([st.name], 1 if snap[7] else 0)
            if snap[8] is not None:
                last_read.add_metric([st.name], snap[8])
        yield from (ready, stage, ooms, events, startup, memory, *health.values(), present, last_read)

    # -- KV cache and prefix cache -------------------------------------------------------------------

    def _kv(self, states: list["ServerState"], all_facts: dict[str, dict]) -> Iterator[Metric]:
        usage = gauge(
            "kv_cache_usage_ratio",
            "KV-cache usage 0..1 per DP engine, from vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc before 0.10).",
            ["server", "model_name", "engine"],
        )
        headroom = gauge(
            "kv_cache_headroom_ratio", "1 - KV-cache usage, per DP engine.", ["server", "model_name", "engine"]
        )
        cap = gauge(
            "kv_cache_capacity_tokens",
            "KV-cache capacity in tokens per engine: vllm:cache_config_info where "
            "it has it, else the startup log's 'GPU KV cache size'.",
            ["server"],
        )
        cap_log = gauge("kv_cache_capacity_log_tokens", "KV-cache capacity the startup log states.", ["server"])
        mismatch = gauge(
            "kv_cache_capacity_mismatch",
            "1 when the metric and the log disagree on KV capacity by more than 10% (seen on hybrid models).",
            ["server"],
        )
        conc = gauge("max_concurrency", "vLLM's own maximum concurrency for max_model_len-token requests.", ["server"])
        hit = gauge(
            "prefix_cache_hit_ratio",
            "Prefix-cache hits / queries (tokens) over the configured window, summed "
            "over engines, reset-safe; absent with no queries.",
            ["server", "model_name"],
        )
        enabled = gauge("prefix_cache_enabled", "1 if prefix caching is on (cache_config_info or the log).", ["server"])
        budget = gauge(
            "gpu_memory_utilization_ratio",
            "The gpu_memory_utilization vLLM was started with: the share of "
            "each GPU it claims and fills with weights, activations and KV cache (vllm:cache_config_info, "
            "else the startup log).",
            ["server"],
        )
        window = gauge("prefix_cache_window_seconds", "The window of prefix_cache_hit_ratio.", [])
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
            raw = st.cache_config.get("kv_cache_max_concurrency")
            c: float | None
            try:
                c = float(raw) if raw not in (None, "", "None") else facts.get("max_concurrency")
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
        fams = {
            wire: Rendered(PREFIX + base, f"Re-exported {wire} with a server label.", typ)
            for wire, (base, typ) in reexport_families().items()
        }
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
        used = gauge("gpu_memory_used_bytes", f"GPU memory in use at the last sample ({window}).", labels)
        total = gauge("gpu_memory_total_bytes", "GPU memory in total.", labels)
        reserved = gauge("gpu_memory_reserved_bytes", "Driver-reserved GPU memory (NVML memory v2).", labels)
        span = f"the last {sampler.peak_window_s:g}s" if sampler else "a trailing window"
        peak = gauge(
            "gpu_memory_peak_used_bytes",
            f"Highest GPU memory in use over the samples of {span} ({window}): "
            "a prefill spike between two scrapes still shows, and reading this resets nothing.",
            labels,
        )
        head = gauge(
            "gpu_memory_headroom_ratio",
            f"(total - peak) / total, peak over {span}. Judge it against the "
            "budget vLLM was given (gpu_memory_utilization_ratio), not against 0.",
            labels,
        )
        up = gauge("gpu_up", "1 if the last read of this GPU succeeded.", labels)
        errs = counter("gpu_read_errors", "Failed reads of this GPU's memory.", labels)
        lost = counter("gpu_lost", "Reads that found the GPU lost (fallen off the bus).", labels)
        procs = gauge(
            "gpu_process_memory_used_bytes",
            "GPU memory per process (host PID, read at most once a second).",
            ["gpu", "uuid", "pid"],
        )
        interval = gauge("gpu_sample_interval_seconds", "How often GPU memory is sampled.", [])
        if sampler is not None:
            interval.add_metric([], sampler.interval_s)
            for st in sampler.collect():
                lv = [st.info.index, st.info.uuid, st.info.model, st.info.vendor]
                up.add_metric(lv, 1 if st.up else 0)
                errs.add_metric(lv, st.errors)
                lost.add_metric(lv, st.lost)
                if not st.up or st.total is None or st.used is None:
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
        info = gauge(
            "environment_info",
            "The node's GPU environment; always 1.",
            ["driver_version", "cuda_driver_version", "gpu_model", "gpu_count", "vendor"],
        )
        if sampler is not None:
            info.add_metric(
                [
                    driver.get("driver_version", ""),
                    driver.get("cuda_driver_version", ""),
                    models[0] if models else "",
                    str(len(models)),
                    vendor or "",
                ],
                1,
            )
        vinfo = gauge("vllm_info", "vLLM version per server, from its startup log; always 1.", ["server", "version"])
        for st in states:
            v = safe_version(all_facts[st.name].get("vllm_version"))
            if v:
                vinfo.add_metric([st.name, v], 1)
        cfg = gauge(
            "vllm_config_info",
            "What each server's startup log states of its parallel layout and limits (numbers only); always 1.",
            ["server"] + list(CONFIG_FACTS),
        )
        for st in states:
            facts = all_facts[st.name]
            values = [_number_label(facts.get(k)) for k in CONFIG_FACTS]
            if any(values):
                cfg.add_metric([st.name] + values, 1)
        check = gauge(
            "environment_check", "1 if the guide's prerequisite holds, 0 if not; absent when unknown.", ["check"]
        )
        results = evaluate(self.d.cfg.environment, vendor, driver, models, versions)
        for name in CHECKS:
            if name in results:
                check.add_metric([name], 1 if results[name] else 0)
        yield from (info, vinfo, cfg, check)
