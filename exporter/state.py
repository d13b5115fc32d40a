"""What is known of each vLLM server between two scrapes, and the view of the daemon that readers get.

No asyncio, no HTTP: the daemon's loops write this state, the collector (metrics.py) and the HTTP side
(server.py) read it. Keeping it here is what lets those three modules avoid importing each other.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Protocol

from exporter import derive
from exporter.config import Config, ServerConfig, redact_text
from exporter.exposition_parser import LabelCache
from exporter.reexport import Heads, render_reexport
from exporter.vllm.names import PASS_LABELS
from exporter.vllm.scrape import ScrapeResult

if TYPE_CHECKING:
    from exporter.gpu.sampler import GpuSampler
    from exporter.logs.tailer import LogTailer, TailSnapshot

log = logging.getLogger("vllm_headroom")
MAX_ENGINES = 64  # (model_name, engine) pairs kept per server per scrape; the rest are dropped and counted
# Re-exported samples kept per server per scrape: 64 engines of every re-exported family (~110 samples an
# engine with both histograms) fit several times over; 100k `finished_reason` or `le` values do not.
MAX_REEXPORTED = 20_000


def _reexported_keys() -> tuple[str, ...]:
    """The series keys the re-export reads (histograms by part), in a fixed order."""
    from exporter.vllm import names

    keys = list(names.REEXPORT)
    for wire in names.REEXPORT_HISTOGRAMS:
        keys += [wire + part for part in names.HISTOGRAM_PARTS]
    return tuple(keys)


_LABELS = itemgetter(1)
_PAIR = itemgetter(0)  # of a _label_keys value: (model_name, engine)
_PASSED = itemgetter(1)  # of a _label_keys value: the labels passed on


def _label_keys(labels: tuple) -> tuple[tuple[str, str], tuple]:
    """A label set's (model_name, engine) pair and the part of it re-exported; worked out once per set."""
    d = dict(labels)
    return (d.get("model_name", ""), d.get("engine", "")), tuple(sorted((k, v) for k, v in labels if k in PASS_LABELS))


def _without_repeats(series: dict) -> tuple[dict, int]:
    """Each family with a label set repeated kept once, and how many samples that dropped."""
    dropped = 0
    out: dict = {}
    for name, group in series.items():
        if len(set(map(_LABELS, group))) == len(group):  # the usual case, checked in C: no repeats
            out[name] = group
            continue
        seen: set = set()
        kept = []
        for s in group:
            key = s[1]  # the parser's labels are sorted tuples
            if key in seen:
                continue
            seen.add(key)
            kept.append(s)
        dropped += len(group) - len(kept)
        out[name] = kept
    return out, dropped


class ServerState:
    """What is known of one vLLM server: its last scrape, windows over its counters, its log."""

    def __init__(
        self, config: ServerConfig, window_s: float, tailer: LogTailer | None, cluster: str | None = None
    ) -> None:
        self.config = config
        self.name = config.name
        # labels every series of this server carries besides `server`: its role, and the cluster when configured
        self.extra_labels = {"role": config.role, **({"cluster": cluster} if cluster else {})}
        self.tailer = tailer
        self.window_s = window_s
        self.up = False
        self.scrapes = 0
        self.last_duration = 0.0
        self.last_size = 0
        self.last_success: float | None = None
        self.errors: Counter[str] = Counter()
        self.series: dict = {}
        self.kv_usage: dict[tuple[str, str], float] = {}
        self.cache_config: dict[str, str] = {}
        self.windows: dict[tuple[str, str], derive.CounterWindow] = {}
        self.v0_rates: dict[str, float] = {}
        self.dropped_series = 0
        self._warned_cap = False
        self._rendered: dict | None = None  # re-exported series as text, made once per scrape
        self._keys: dict[tuple, tuple] = {}  # label set -> ((model_name, engine), the labels passed on): per set, once
        self.labels = LabelCache()  # this server's label blocks, parsed once across its scrapes
        self._heads: Heads = {}  # re-exported label sets as written, kept across scrapes (exporter/reexport.py)

    def update(self, result: ScrapeResult, now: float) -> None:
        self.scrapes += 1
        self.last_duration = result.duration_s
        self.last_size = result.size_bytes
        if not result.ok:
            self.errors[result.reason or "other"] += 1
            detail = redact_text(result.detail, self.config.url or "")
            if self.up:
                log.warning("%s: scrape of %s failed (%s: %s)", self.name, self.config.safe_url, result.reason, detail)
            elif self.scrapes == 1:
                log.info("%s: %s not answering yet (%s: %s)", self.name, self.config.safe_url, result.reason, detail)
            self.up = False
            self.series = {}
            self.kv_usage = {}
            self._rendered = None
            return
        if not self.up:
            log.info("%s: scraping %s (%d bytes)", self.name, self.config.safe_url, result.size_bytes)
        result.series = self._bound(result.series)
        if result.reason:
            self.errors[result.reason] += 1
        self.up = True
        self.last_success = time.time()
        self.series = result.series
        self._rendered = None
        self.kv_usage = derive.kv_usage(result.series)
        self.cache_config = derive.cache_config(result.series)
        self.v0_rates = derive.v0_hit_rate(result.series)
        counters = derive.prefix_counters(result.series)
        for key, (hits, queries) in counters.items():
            w = self.windows.get(key)
            if w is None:
                w = self.windows[key] = derive.CounterWindow(self.window_s)
            w.add(now, hits, queries)
        for key in [k for k, w in self.windows.items() if k not in counters and w.points[-1].t < now - self.window_s]:
            del self.windows[key]  # an engine gone for longer than the window: forget it (churning DP engines)

    def _bound(self, series: dict) -> dict:
        """What one scrape may bring in, deterministically: a sample repeated with the same labels is kept once
        (summing repeats once turned a KV usage of 0.6 into 1.0), at most MAX_ENGINES (model_name, engine)
        pairs, and of the re-exported families one sample per label set we pass on (samples differing only
        in a label we strip would be duplicates on /metrics), MAX_REEXPORTED in all. The rest is counted in
        vllm_headroom_series_dropped_total."""
        out, dropped = _without_repeats(series)
        keys = self._keys
        if len(keys) > 50_000:  # label sets churning without end: start over rather than grow
            keys.clear()
        sets: set = set()
        for group in out.values():
            sets.update(map(_LABELS, group))
        for labels in sets.difference(keys):
            keys[labels] = _label_keys(labels)
        pairs = sorted(set(map(_PAIR, map(keys.__getitem__, sets))))  # C loops: thousands of samples a scrape
        if len(pairs) > MAX_ENGINES:
            keep = set(pairs[:MAX_ENGINES])
            for name, group in list(out.items()):
                kept = [s for s in group if keys[s[1]][0] in keep]
                dropped += len(group) - len(kept)
                out[name] = kept
            self._warn_cap(f"{len(pairs)} model/engine pairs, more than the {MAX_ENGINES} kept")
        budget, over = MAX_REEXPORTED, False
        for name in _reexported_keys():
            group = out.get(name)
            if not group:
                continue
            passed = set(map(_PASSED, map(keys.__getitem__, map(_LABELS, group))))
            if len(passed) == len(group) <= budget:  # the usual case, checked in C: no two alike once stripped
                budget -= len(group)
                continue
            seen = set()
            kept = []
            for s in group:
                key = keys[s[1]][1]
                if key in seen:
                    continue
                if budget <= 0:
                    over = True
                    continue
                seen.add(key)
                kept.append(s)
                budget -= 1
            dropped += len(group) - len(kept)
            out[name] = kept
        if over:
            self._warn_cap(f"more than {MAX_REEXPORTED} re-exported samples")
        self.dropped_series += dropped
        return {name: group for name, group in out.items() if group}

    def _warn_cap(self, what: str) -> None:
        if not self._warned_cap:
            log.warning(
                "%s: %s; the rest are dropped and counted in vllm_headroom_series_dropped_total", self.name, what
            )
            self._warned_cap = True

    def reexported(self) -> dict:
        if self._rendered is None:
            self._rendered = render_reexport(self.name, self.series, self.extra_labels, self._heads)
        return self._rendered

    def hit_ratios(self) -> dict[str, float]:
        """Per model: hits / queries over the window, summed over engines; absent without queries."""
        sums: dict[str, list[float]] = {}
        for (model, _engine), w in self.windows.items():
            h, q = w.increases()
            acc = sums.setdefault(model, [0.0, 0.0])
            acc[0] += h
            acc[1] += q
        out = {m: h / q for m, (h, q) in sums.items() if q > 0}
        for model, rate in self.v0_rates.items():
            out.setdefault(model, rate)
        return out

    def tail(self) -> TailSnapshot | None:
        """The log's word as of now, copied under the tailer's own lock; None when no log is followed."""
        return None if self.tailer is None else self.tailer.snapshot()


@dataclass(frozen=True)
class ServerReading:
    """One server as one /metrics answer reads it: its state and one copy of its log's word, taken once so
    every collector of that answer sees the same log."""

    state: ServerState
    tail: TailSnapshot | None

    @property
    def facts(self) -> dict[str, Any]:
        """What the startup log stated (versions, sizes, settings); empty without a log."""
        return self.tail.facts if self.tail is not None else {}


class DaemonView(Protocol):
    """What the collector and the HTTP handlers read of the daemon (exporter.daemon.Daemon is one)."""

    cfg: Config
    servers: dict[str, ServerState]
    gpu: GpuSampler | None
    gpu_owners: dict[str, tuple[str, str]]  # GPU index (or "*") -> (server, role) that uses it

    def ready(self) -> bool: ...

    def state_version(self) -> tuple: ...
