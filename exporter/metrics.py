"""The exported series: one custom collector that builds fresh families from the daemon's state per scrape.

Fresh families on every collect mean no stale label set lingers after a DP engine or a GPU goes away.
Every name carries the `vllm_headroom_` prefix and base units; counters end in `_total`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, Iterator

from prometheus_client.core import Metric

from exporter import __version__, derive
from exporter.catalog import CONFIG_FACTS, family
from exporter.environment import CHECKS, evaluate, safe_version
from exporter.exposition_writer import Rendered
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
        info = family("build_info")
        info.add_metric([__version__], 1)
        yield from _decorated([info], extra, owners, cluster)
        dur = family("collect_duration_seconds")
        dur.add_metric([], time.monotonic() - start)
        yield from _decorated([dur], extra, owners, cluster)

    # -- scraping ------------------------------------------------------------------------------

    def _targets(self, states: list["ServerState"]) -> Iterator[Metric]:
        up = family("target_up")
        dur = family("scrape_duration_seconds")
        last = family("last_scrape_success_timestamp_seconds")
        errs = family("scrape_errors")
        size = family("scrape_response_bytes")
        dropped = family("series_dropped")
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
        ready = family("engine_ready")
        stage = family("engine_stage")
        ooms = family("oom_events")
        events = family("log_events")
        startup = family("startup_stage_duration_seconds")
        memory = family("startup_memory_bytes")
        health = {
            "log_bytes_read": family("log_bytes_read"),
            "log_lines_read": family("log_lines_read"),
            "log_rotations": family("log_rotations"),
            "log_truncations": family("log_truncations"),
            "log_bytes_skipped": family("log_bytes_skipped"),
            "log_lines_cut": family("log_lines_cut"),
            "log_read_errors": family("log_read_errors"),
        }
        present = family("log_file_present")
        last_read = family("log_last_read_timestamp_seconds")
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
        usage = family("kv_cache_usage_ratio")
        headroom = family("kv_cache_headroom_ratio")
        cap = family("kv_cache_capacity_tokens")
        cap_log = family("kv_cache_capacity_log_tokens")
        mismatch = family("kv_cache_capacity_mismatch")
        conc = family("max_concurrency")
        hit = family("prefix_cache_hit_ratio")
        enabled = family("prefix_cache_enabled")
        budget = family("gpu_memory_utilization_ratio")
        window = family("prefix_cache_window_seconds")
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
        window = f"sampled every {sampler.interval_s:g}s" if sampler else "not sampled"
        used = family("gpu_memory_used_bytes", window=window)
        total = family("gpu_memory_total_bytes")
        reserved = family("gpu_memory_reserved_bytes")
        span = f"the last {sampler.peak_window_s:g}s" if sampler else "a trailing window"
        peak = family("gpu_memory_peak_used_bytes", span=span, window=window)
        head = family("gpu_memory_headroom_ratio", span=span)
        up = family("gpu_up")
        errs = family("gpu_read_errors")
        lost = family("gpu_lost")
        procs = family("gpu_process_memory_used_bytes")
        interval = family("gpu_sample_interval_seconds")
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
        info = family("environment_info")
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
        vinfo = family("vllm_info")
        for st in states:
            v = safe_version(all_facts[st.name].get("vllm_version"))
            if v:
                vinfo.add_metric([st.name, v], 1)
        cfg = family("vllm_config_info")
        for st in states:
            facts = all_facts[st.name]
            values = [_number_label(facts.get(k)) for k in CONFIG_FACTS]
            if any(values):
                cfg.add_metric([st.name] + values, 1)
        check = family("environment_check")
        results = evaluate(self.d.cfg.environment, vendor, driver, models, versions)
        for name in CHECKS:
            if name in results:
                check.add_metric([name], 1 if results[name] else 0)
        yield from (info, vinfo, cfg, check)
