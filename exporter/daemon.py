"""`vllm-headroom serve`: scrapes the vLLM servers, samples GPU memory, follows the logs, serves /metrics.

The aiohttp app's cleanup context owns every background task, so SIGTERM stops them in order and the
log offsets are flushed before the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import time
from collections import Counter
from operator import itemgetter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from exporter import derive
from exporter.config import Config, ServerConfig, redact_text
from exporter.exposition import LabelCache
from exporter.gpu.base import GpuUnavailable, open_backend
from exporter.gpu.sampler import GpuSampler
from exporter.httpguard import ConnectionGuard, serve
from exporter.logs.tailer import LogTailer
from exporter.metrics import HeadroomCollector
from exporter.vllm.scrape import ScrapeResult, fetch_metrics

log = logging.getLogger("vllm_headroom")
TAIL_INTERVAL_S = 0.25
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


def _label_keys(labels: tuple) -> tuple[tuple[str, str], tuple]:
    """A label set's (model_name, engine) pair and the part of it re-exported; worked out once per set."""
    from exporter.vllm.names import PASS_LABELS

    d = dict(labels)
    return (d.get("model_name", ""), d.get("engine", "")), tuple(sorted((k, v) for k, v in labels if k in PASS_LABELS))


class ServerState:
    """What is known of one vLLM server: its last scrape, windows over its counters, its log."""

    def __init__(self, config: ServerConfig, window_s: float, tailer: LogTailer | None) -> None:
        self.config = config
        self.name = config.name
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

    def update(self, result: ScrapeResult, now: float) -> None:
        self.scrapes += 1
        self.last_duration = result.duration_s
        self.last_size = result.size_bytes
        if not result.ok:
            self.errors[result.reason or "other"] += 1
            detail = redact_text(result.detail, self.config.url)
            if self.up:
                log.warning("%s: scrape of %s failed (%s: %s)", self.name, self.config.safe_url, result.reason,
                            detail)
            elif self.scrapes == 1:
                log.info("%s: %s not answering yet (%s: %s)", self.name, self.config.safe_url, result.reason,
                         detail)
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
        keys = self._keys
        if len(keys) > 50_000:  # label sets churning without end: start over rather than grow
            keys.clear()
        for group in out.values():
            for labels in set(map(_LABELS, group)).difference(keys):
                keys[labels] = _label_keys(labels)
        pairs = sorted({keys[s[1]][0] for group in out.values() for s in group})
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
            log.warning("%s: %s; the rest are dropped and counted in vllm_headroom_series_dropped_total",
                        self.name, what)
            self._warned_cap = True

    def reexported(self) -> dict:
        if self._rendered is None:
            from exporter.metrics import render_reexport

            self._rendered = render_reexport(self.name, self.series)
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

    def log_facts(self) -> dict[str, Any]:
        if self.tailer is None:
            return {}
        with self.tailer.lock:
            return dict(self.tailer.analyzer.epoch.facts)


class Daemon:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.servers: dict[str, ServerState] = {}
        for sc in cfg.servers:
            tailer = LogTailer(sc.name, sc.log, cfg.state_dir, save_every_s=cfg.state_save_interval_s) if sc.log else None
            self.servers[sc.name] = ServerState(sc, cfg.prefix_cache_window_s, tailer)
        self.gpu: GpuSampler | None = None
        self._tasks: list[asyncio.Task] = []
        # One thread does every log read and every state save, so a poll still running when the tail task is
        # cancelled finishes before close() saves: never two writers of one state file.
        self._log_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="logs")
        self._tails_polled = False
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.registry.register(HeadroomCollector(self))

    def open_gpus(self) -> None:
        g = self.cfg.gpu
        try:
            backend = open_backend(g.backend, g.fake_count, g.fake_model, g.fake_total_bytes)
        except GpuUnavailable as exc:
            log.error("GPU memory: the configured backend %r is not usable: %s; GPU series are not exported",
                      g.backend, exc)
            backend = None
        if backend is not None:
            self.gpu = GpuSampler(backend, g.sample_interval_s)

    def state_version(self) -> tuple:
        """Changes whenever anything /metrics shows may have changed: the exposition cache's key.

        A scrape of a vLLM server counts in `scrapes`; a log poll in the tailer's `version`; a GPU reading
        that differs from the last one in the sampler's `version`.
        """
        return (tuple(s.scrapes for s in self.servers.values()),
                tuple(s.tailer.version for s in self.servers.values() if s.tailer),
                self.gpu.version if self.gpu is not None else -1)

    def ready(self) -> bool:
        scraped = all(s.scrapes > 0 for s in self.servers.values())
        tails = self._tails_polled or not any(s.tailer for s in self.servers.values())
        return scraped and tails

    def report(self) -> None:
        """Say once, at startup, what is being watched."""
        for s in self.servers.values():
            log.info("watching %s: %s every %gs (timeout %gs)%s", s.name, s.config.safe_url, s.config.interval_s,
                     s.config.timeout_s, f", log {s.config.log.path} ({s.config.log.format})" if s.config.log else "")
        log.info("state kept in %s; prefix-cache window %gs; listening on %s", self.cfg.state_dir,
                 self.cfg.prefix_cache_window_s, self.cfg.listen_address)

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        """aiohttp cleanup context: start everything, yield while serving, stop everything."""
        self.report()
        if self.gpu is None:
            self.open_gpus()
        if self.gpu is not None:
            self.gpu.start()
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64), auto_decompress=True)
        for s in self.servers.values():
            self._tasks.append(asyncio.create_task(self._scrape_loop(session, s), name=f"scrape-{s.name}"))
        if any(s.tailer for s in self.servers.values()):
            self._tasks.append(asyncio.create_task(self._tail_loop(), name="tail"))
        try:
            yield
        finally:
            for t in self._tasks:
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await session.close()
            await asyncio.get_running_loop().run_in_executor(self._log_thread, self.close_tailers)
            self._log_thread.shutdown(wait=True)
            if self.gpu is not None:
                self.gpu.stop()
            log.info("stopped; log offsets saved")

    def close_tailers(self) -> None:
        """Save every log position; runs on the log thread, after any poll still in flight there."""
        for s in self.servers.values():
            if s.tailer:
                s.tailer.close()

    async def _scrape_loop(self, session: aiohttp.ClientSession, s: ServerState) -> None:
        await asyncio.sleep(random.uniform(0, min(0.5, s.config.interval_s / 10)))  # spread many servers
        while True:
            started = time.monotonic()
            try:
                result = await fetch_metrics(session, s.config.url, s.config.timeout_s, s.config.max_response_bytes,
                                             s.labels)
                s.update(result, started)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not stop this server's scraping for good
                log.exception("%s: unexpected error while scraping", s.name)
            await asyncio.sleep(max(0.0, s.config.interval_s - (time.monotonic() - started)))

    async def _tail_loop(self) -> None:
        tailers = [s.tailer for s in self.servers.values() if s.tailer]

        loop = asyncio.get_running_loop()

        def poll_all(due: list[LogTailer]) -> None:
            for t in tailers:
                if t in due:
                    t.poll()
                else:
                    t.save_if_due()

        while True:
            try:
                due = [t for t in tailers if t.needs_poll()]  # stats here; reads and saves on the log thread
                await loop.run_in_executor(self._log_thread, poll_all, due)
                self._tails_polled = True
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("unexpected error while following logs")
            await asyncio.sleep(TAIL_INTERVAL_S)


def _host_port(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def run(cfg: Config) -> int:
    from exporter.config import ConfigError
    from exporter.server import build_app
    from exporter.webconfig import load_web_config

    web_config = None
    if cfg.web_config_file:
        try:
            web_config = load_web_config(cfg.web_config_file)
        except ConfigError as exc:
            for problem in exc.problems:
                log.error("%s", problem)
            return 2
        log.info("web config %s: TLS %s, basic auth for %d user(s)", cfg.web_config_file,
                 "on" if web_config.ssl_context else "off", len(web_config.users))
    daemon = Daemon(cfg)
    host, port = _host_port(cfg.listen_address)
    guard = ConnectionGuard()
    app = build_app(daemon, daemon.registry, web_config=web_config, guard=guard)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(app, host, port, web_config.ssl_context if web_config else None, guard, stop)

    try:
        asyncio.run(main())
    except OSError as exc:
        log.error("cannot listen on %s: %s", cfg.listen_address, exc)
        return 2
    return 0
