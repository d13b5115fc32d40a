"""A simulated week of a small fleet, as the exporter's series every two minutes, for the page-budget replay.

Healthy servers behave as vLLM does (exporter/simulate/memory.py): GPU memory sits at the
gpu_memory_utilization budget (0.92 and 0.97) from readiness on; the KV cache fills at peak hours with no
capacity queue; a few preemptions and a short queue burst at the daily peak that clear; quiet nights with no
requests and no log lines (vLLM logs its stats at debug level when idle). Each incident server is healthy but
for one injected incident. Writing the series directly (not through the daemon's collector, which takes
tens of milliseconds a step) keeps a week at that resolution within a test's time; a test checks that every
series here has the exporter's own name and label names.

The output is OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator

from exporter import catalog
from exporter.environment import CHECKS
from exporter.logs.patterns import ENGINE_STAGES, LOADING_STAGES, RUNTIME_STAGES
from exporter.simulate.memory import VllmMemoryModel

MINUTE = 60
STEP_MIN = 2  # one sample every 2 minutes: a week of ~200 series stays ~150 MB of OpenMetrics
DAY_MIN = 1440
WEEK_MIN = 7 * DAY_MIN
GIB = 1024**3
GPU_TOTAL = 288 * GIB
JOB = "vllm-headroom"


@dataclass
class Incident:
    """What goes wrong on one server, and what the guide expects of the alerts and the weekly verdict."""

    kind: str
    at_min: int = 0  # minute of the week it starts
    alerts: tuple[str, ...] = ()  # exactly one firing episode of each, for this server (or its node)
    verdict: tuple[str, str] = ("tune_and_keep", "stable_headroom")


@dataclass
class ReplayServer:
    name: str
    node: str
    utilization: float = 0.92
    engines: int = 1
    role: str = "both"  # prefill | decode | both, as the exporter labels it
    incident: Incident = field(default_factory=lambda: Incident("none"))


def fleet() -> list[ReplayServer]:
    """Two healthy servers (budgets 0.92 and 0.97) and one server per incident the issue lists."""
    d = DAY_MIN
    return [
        ReplayServer("healthy-092", "node-1", 0.92, engines=2),
        ReplayServer("healthy-097", "node-2", 0.97),
        ReplayServer(
            "runtime-oom",
            "node-3",
            incident=Incident(
                "runtime_oom", 2 * d + 15 * 60, ("VllmRuntimeOOM",), ("monitor_and_operate", "runtime_oom")
            ),
        ),
        ReplayServer(
            "shrinking",
            "node-3",
            engines=2,
            incident=Incident(
                "capacity_shrinks",
                6 * d + 8 * 60,
                ("VllmRequestsQueueingKVCacheFull",),
                ("migrate_or_scale", "capacity_queueing"),
            ),
        ),
        ReplayServer("target-down", "node-4", incident=Incident("target_down", 3 * d + 11 * 60, ("VllmTargetDown",))),
        ReplayServer(
            "kv-renamed",
            "node-4",
            incident=Incident(
                "kv_series_renamed", 12 * 60, ("VllmKVCacheSeriesMissing",), ("insufficient_data", "no_kv_data")
            ),
        ),
        ReplayServer(
            "weights-fail",
            "node-5",
            incident=Incident(
                "weights_cannot_load", 4 * d, ("VllmLoadingStageOOM",), ("migrate_or_scale", "weights_cannot_load")
            ),
        ),
        ReplayServer(
            "kv-fixed",
            "node-5",
            incident=Incident("kv_alloc_fixed_by_restart", 2 * d + 14 * 60, ("VllmLoadingStageOOM",)),
        ),
        ReplayServer(
            "behind-down-exporter",
            "node-6",
            incident=Incident("exporter_down", 1 * d + 10 * 60, ("VllmHeadroomExporterDown",)),
        ),
    ]


OOM_KEYS = [(stage, "loading") for stage in LOADING_STAGES] + [(stage, "runtime") for stage in RUNTIME_STAGES]
# the engine stages each incident passes through, and the memory failures it logs
STAGES_OF = {
    "none": ("ready",),
    "capacity_shrinks": ("ready",),
    "target_down": ("ready",),
    "kv_series_renamed": ("ready",),
    "exporter_down": ("ready",),
    "runtime_oom": ("ready", "crashed", "weight_loading"),
    "weights_cannot_load": ("ready", "crashed", "weight_loading"),
    "kv_alloc_fixed_by_restart": ("ready", "crashed", "weight_loading", "kv_cache_alloc"),
}
OOMS_OF = {
    "runtime_oom": (("prefill", "runtime"),),
    "weights_cannot_load": (("weight_loading", "loading"),),
    "kv_alloc_fixed_by_restart": (("kv_cache_alloc", "loading"),),
}


def load(minute: int, engine: int = 0) -> float:
    """Share of peak load: idle 00:00-06:00, a ramp, a plateau at full load 13:00-18:00, an evening fall."""
    h = (minute % DAY_MIN) / 60 + 0.25 * engine
    if h < 6:
        return 0.0
    if h < 13:
        return (h - 6) / 7
    if h < 18:
        return 1.0
    return max(0.0, 1 - (h - 18) / 6)


@dataclass
class State:
    """One server at one minute, as the exporter would see it."""

    up: bool = True  # vLLM's /metrics answers
    stage: str = "ready"
    kv: bool = True  # the KV-cache series exist (absent after a metric rename)
    exists: bool = True  # the server is deployed
    oom: tuple[str, str] | None = None  # (stage, phase) of a memory failure logged in this minute
    queue_capacity: float = 0.0  # requests waiting for KV capacity, engine 0


def state(s: ReplayServer, m: int) -> State:
    """The injected incident's effect at minute `m`; healthy otherwise."""
    i, st = s.incident, State()
    if i.kind == "none" or m < i.at_min:
        if i.kind == "weights_cannot_load":
            st.exists = False  # deployed on the day it fails
        return st
    k = m - i.at_min
    if i.kind == "runtime_oom":
        if k == 0:
            st.oom = ("prefill", "runtime")
        if 0 <= k < 12:  # the supervisor restarts it; a 2.8T model takes ~10 minutes to load
            st.up, st.stage = False, ("crashed" if k == 0 else "weight_loading")
    elif i.kind == "capacity_shrinks":  # the same load no longer fits: a queue for capacity from then on
        st.queue_capacity = 3.0
    elif i.kind == "target_down":
        st.up = not (0 <= k < 20)  # hung: the port stops answering, the log says nothing
    elif i.kind == "kv_series_renamed":
        st.kv = False
    elif i.kind == "weights_cannot_load":  # a crash loop: 8 minutes loading, an OOM, 8 minutes of back-off
        c = k % 16
        st.up, st.stage = False, ("weight_loading" if c < 8 else "crashed")
        if c == 8:
            st.oom = ("weight_loading", "loading")
    elif i.kind == "kv_alloc_fixed_by_restart":  # two failed starts, then a start with a fixed config
        if k < 32:
            c = k % 16
            st.up, st.stage = False, ("weight_loading" if c < 6 else "kv_cache_alloc" if c < 8 else "crashed")
            if c == 8:
                st.oom = ("kv_cache_alloc", "loading")
        elif k < 48:
            st.up, st.stage = False, "weight_loading"
    return st


class Series:
    """Samples of one series, appended step by step; a gap is a step without a sample."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, float]] = []

    def add(self, ts: int, value: float) -> None:
        self.samples.append((ts, value))


class Week:
    """Builds every series of the replay; `openmetrics()` writes them."""

    def __init__(self, servers: list[ReplayServer], start: int) -> None:
        self.servers = servers
        self.start = start
        self.families: dict[str, tuple[str, dict[str, Series]]] = {}
        self.last_log: dict[str, int] = {}

    def _s(self, family: str, kind: str, labels: dict[str, str]) -> Series:
        fam = self.families.setdefault(family, (kind, {}))[1]
        key = ",".join(f'{k}="{v}"' for k, v in labels.items())
        return fam.setdefault(key, Series())

    def build(self) -> Week:
        nodes: dict[str, list[ReplayServer]] = {}
        for s in self.servers:
            nodes.setdefault(s.node, []).append(s)
        counters: dict[tuple[str, ...], float] = {}

        def count(key: tuple[str, ...], inc: float) -> float:
            counters[key] = counters.get(key, 0.0) + inc
            return counters[key]

        for m in range(0, WEEK_MIN + 1, STEP_MIN):
            ts = self.start + m * MINUTE
            for node, members in nodes.items():
                exporter_up = not any(
                    s.incident.kind == "exporter_down" and 0 <= m - s.incident.at_min < 30 for s in members
                )
                self._s("up", "gauge", {"job": JOB, "instance": f"{node}:9478"}).add(ts, 1 if exporter_up else 0)
                if not exporter_up:
                    for s in members:  # counters go on in the daemon's state; nothing is scraped meanwhile
                        self._advance(s, m, count, None)
                    continue
                base = {"job": JOB, "instance": f"{node}:9478"}
                self._node(base, members, m, ts)
                for s in members:
                    self._advance(s, m, count, (base, ts))
        return self

    def _node(self, base: dict[str, str], members: list[ReplayServer], m: int, ts: int) -> None:
        budget = max(s.utilization for s in members)
        memory = VllmMemoryModel(utilization=budget)
        for g in ("0",):
            lab = {
                **base,
                "gpu": g,
                "uuid": f"GPU-{base['instance']}-{g}",
                "gpu_model": "NVIDIA GB300",
                "vendor": "nvidia",
            }
            # vLLM holds its budget (plus CUDA graphs) whatever the KV usage; 10 Hz peaks barely differ
            used = memory.used("ready") + 0.0005 * math.sin(m / 37)
            self._s(catalog.family_name("gpu_memory_peak_used_bytes"), "gauge", lab).add(ts, round(used * GPU_TOTAL))
            self._s(catalog.family_name("gpu_memory_total_bytes"), "gauge", lab).add(ts, GPU_TOTAL)
            self._s(catalog.family_name("gpu_memory_headroom_ratio"), "gauge", lab).add(ts, round(1 - used, 6))
            self._s(catalog.family_name("gpu_up"), "gauge", lab).add(ts, 1)
        for check in CHECKS[:1]:
            self._s(catalog.family_name("environment_check"), "gauge", {**base, "check": check}).add(ts, 1)

    def _advance(
        self,
        s: ReplayServer,
        m: int,
        count: Callable[[tuple[str, ...], float], float],
        out: tuple[dict[str, str], int] | None,
    ) -> None:
        st = state(s, m)
        if not st.exists:
            return
        gen, hits, queries, preempt = [], [], [], []
        for e in range(s.engines):
            x = load(m, e) if st.up else 0.0
            secs = 60 * STEP_MIN
            gen.append(count((s.name, "gen", str(e)), secs * 800 * x))
            queries.append(count((s.name, "q", str(e)), secs * 4 * 20_000 * x))
            hits.append(count((s.name, "h", str(e)), secs * 4 * 12_000 * x))
            # a short burst at the daily peak (15:00-15:02): a few dozen preemptions that clear
            burst = st.up and (m % DAY_MIN) // 60 == 15 and (m % 60) < 2
            preempt.append(count((s.name, "p", str(e)), 40 if burst else 0))
        oom = {key: count((s.name, "oom", *key), 1 if st.oom == key else 0) for key in OOM_KEYS}
        # vLLM writes while it serves or starts (stats every 10 s, access lines); an idle one writes nothing
        if (st.up and any(load(m, e) > 0 for e in range(s.engines))) or st.stage != "ready" or st.oom:
            self.last_log[s.name] = self.start + m * MINUTE
        log_at = self.last_log.get(s.name, self.start)
        if out is None:
            return
        base, ts = out
        srv = {**base, "server": s.name, "role": s.role}
        self._s(catalog.family_name("target_up"), "gauge", srv).add(ts, 1 if st.up else 0)
        self._s(catalog.family_name("engine_ready"), "gauge", srv).add(ts, 1 if st.up and st.stage == "ready" else 0)
        for stage in ENGINE_STAGES:  # the exporter writes all eight; the replay the ones this server enters
            if stage in STAGES_OF[s.incident.kind]:
                self._s(catalog.family_name("engine_stage"), "gauge", {**srv, "stage": stage}).add(
                    ts, 1 if stage == st.stage else 0
                )
        for (stage, phase), v in oom.items():
            if (stage, phase) not in OOMS_OF.get(s.incident.kind, ()):
                continue  # a counter that stays 0 all week changes no alert
            self._s(catalog.family_name("oom_events"), "counter", {**srv, "stage": stage, "phase": phase}).add(ts, v)
        self._s(catalog.family_name("log_file_present"), "gauge", srv).add(ts, 1)
        self._s(catalog.family_name("log_last_read_timestamp_seconds"), "gauge", srv).add(ts, log_at)
        self._s(catalog.family_name("gpu_memory_utilization_ratio"), "gauge", srv).add(ts, s.utilization)
        if not st.up:
            return  # nothing re-exported from a vLLM that does not answer
        self._s(catalog.family_name("prefix_cache_enabled"), "gauge", srv).add(ts, 1)
        for e in range(s.engines):
            x = load(m, e)
            eng = {**srv, "model_name": "kimi-k3", "engine": str(e)}
            # KV usage follows load and saturates at the plateau: vLLM fills its budget with KV blocks
            kv = min(1.0, 0.05 + 1.0 * x) if x > 0 else 0.0
            queue = st.queue_capacity if e == 0 and x > 0 else 0.0
            if (m % DAY_MIN) // 60 == 15 and 30 <= (m % 60) < 34:
                queue = max(queue, 1.0)  # a short queue at the peak that clears within minutes
            if st.kv:
                self._s(catalog.family_name("kv_cache_usage_ratio"), "gauge", eng).add(ts, round(kv, 4))
                self._s(catalog.family_name("kv_cache_headroom_ratio"), "gauge", eng).add(ts, round(1 - kv, 4))
                for reason, v in (("capacity", queue), ("deferred", 0.0)):
                    self._s(catalog.family_name("requests_waiting_by_reason"), "gauge", {**eng, "reason": reason}).add(
                        ts, v
                    )
            self._s(catalog.family_name("requests_running"), "gauge", eng).add(ts, round(40 * x))
            self._s(catalog.family_name("requests_waiting"), "gauge", eng).add(ts, queue)
            self._s(catalog.family_name("preemptions"), "counter", eng).add(ts, preempt[e])
            self._s(catalog.family_name("generation_tokens"), "counter", eng).add(ts, gen[e])
            self._s(catalog.family_name("prefix_cache_hits_tokens"), "counter", eng).add(ts, hits[e])
            self._s(catalog.family_name("prefix_cache_queries_tokens"), "counter", eng).add(ts, queries[e])

    def series_names(self) -> Iterator[tuple[str, frozenset[str]]]:
        """(sample name, label names without job/instance) of every series, for the shape check."""
        for family, (kind, series) in self.families.items():
            name = family + "_total" if kind == "counter" else family
            for key in series:
                labels = {part.split("=", 1)[0] for part in key.split('",') if part}
                yield name, frozenset(labels - {"job", "instance"})

    def openmetrics(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            for family, (kind, series) in self.families.items():
                name = family + "_total" if kind == "counter" else family
                fh.write(f"# TYPE {family} {kind}\n")
                for key, s in series.items():
                    prefix = f"{name}{{{key}}} "
                    # repr, not :g: a Unix timestamp needs all of its digits
                    fh.write("".join(f"{prefix}{v!r} {ts}\n" for ts, v in s.samples))
            fh.write("# EOF\n")
