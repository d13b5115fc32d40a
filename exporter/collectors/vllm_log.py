"""What each server's vLLM log says: the engine's stage, OOMs by stage, other events, the startup's durations and
memory split, and how the tail of the log itself is doing."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from exporter.catalog import family
from exporter.logs.patterns import ENGINE_STAGES, EVENT_KINDS, LOADING_STAGES, RUNTIME_STAGES

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from exporter.logs.tailer import TailSnapshot
    from exporter.state import ServerReading

# part label -> the log fact it comes from (GiB as vLLM prints it)
MEMORY_PARTS = {
    "weights": ("weights_memory_gib", "model_loading_gib"),
    "activation_peak": ("activation_peak_gib",),
    "non_torch": ("non_torch_memory_gib",),
    "kv_cache": ("kv_cache_memory_gib",),
    "cuda_graphs": ("graph_memory_gib",),
}
STARTUP_STAGES = (
    "weight_loading",
    "torch_compile",
    "memory_profiling",
    "graph_capture",
    "engine_init",
    "time_to_ready",
)
# family -> the TailHealth counter it carries, in the order they are exported
HEALTH_COUNTERS = {
    "log_bytes_read": "bytes_read",
    "log_lines_read": "lines_read",
    "log_rotations": "rotations",
    "log_truncations": "truncations",
    "log_bytes_skipped": "bytes_skipped",
    "log_lines_cut": "lines_cut",
    "log_read_errors": "read_errors",
}


class VllmLogCollector:
    """The log's families; a server whose log is not followed still gets ready/stage from its scrape."""

    def collect(self, servers: Sequence[ServerReading]) -> Iterator[Metric]:
        fams = _LogFamilies()
        for reading in servers:
            if reading.tail is None:
                fams.from_scrape(reading.state.name, reading.state.up)
            else:
                fams.from_log(reading.state.name, reading.state.up, reading.state.scrapes, reading.tail)
        yield from (fams.ready, fams.stage, fams.ooms, fams.events, fams.startup, fams.memory)
        yield from (*fams.health.values(), fams.present, fams.last_read)


class _LogFamilies:
    """One collection's log families, filled server by server."""

    def __init__(self) -> None:
        self.ready = family("engine_ready")
        self.stage = family("engine_stage")
        self.ooms = family("oom_events")
        self.events = family("log_events")
        self.startup = family("startup_stage_duration_seconds")
        self.memory = family("startup_memory_bytes")
        self.health = {name: family(name) for name in HEALTH_COUNTERS}
        self.present = family("log_file_present")
        self.last_read = family("log_last_read_timestamp_seconds")

    def from_scrape(self, name: str, up: bool) -> None:
        self.ready.add_metric([name], 1 if up else 0)
        for s in ENGINE_STAGES:
            self.stage.add_metric([name, s], 1 if s == ("ready" if up else "unknown") else 0)

    def from_log(self, name: str, up: bool, scrapes: int, tail: TailSnapshot) -> None:
        current = tail.engine_stage
        if current == "unknown" and up:
            current = "ready"  # the port refuses until the engine is initialised
        # the log's word, unless the server stopped answering (a kill the log never saw, e.g. the kernel's)
        self.ready.add_metric([name], 1 if current == "ready" and (up or not scrapes) else 0)
        for s in ENGINE_STAGES:
            self.stage.add_metric([name, s], 1 if s == current else 0)
        for s in LOADING_STAGES:
            self.ooms.add_metric([name, s, "loading"], tail.oom_counts.get((s, "loading"), 0))
        for s in RUNTIME_STAGES:
            self.ooms.add_metric([name, s, "runtime"], tail.oom_counts.get((s, "runtime"), 0))
        for kind in EVENT_KINDS:
            if kind != "oom":
                self.events.add_metric([name, kind], tail.counts.get(kind, 0))
        for s in STARTUP_STAGES:
            if s + "_s" in tail.startup:
                self.startup.add_metric([name, s], tail.startup[s + "_s"])
        for part, keys in MEMORY_PARTS.items():
            value = next((tail.facts[k] for k in keys if isinstance(tail.facts.get(k), (int, float))), None)
            if value is not None:
                self.memory.add_metric([name, part], value * 1024**3)
        h = tail.health
        for fam_name, attr in HEALTH_COUNTERS.items():
            self.health[fam_name].add_metric([name], getattr(h, attr))
        self.present.add_metric([name], 1 if h.file_present else 0)
        if h.last_read is not None:
            self.last_read.add_metric([name], h.last_read)
