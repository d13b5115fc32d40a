"""`vllm-headroom serve`: scrapes the vLLM servers, samples GPU memory, follows the logs, serves /metrics.

The aiohttp app's cleanup context owns every background task, so SIGTERM stops them in order and the
log offsets are flushed before the process exits. What the loops learn is kept in exporter.state, which
the collector (exporter.metrics) and the HTTP side (exporter.server) read without importing this module.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import AsyncIterator

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from exporter.config import Config
from exporter.gpu.base import GpuUnavailable
from exporter.gpu.choose import open_backend
from exporter.gpu.sampler import GpuSampler
from exporter.httpguard import ConnectionGuard, serve
from exporter.logs.tailer import LogTailer
from exporter.metrics import HeadroomCollector
from exporter.state import ServerState
from exporter.vllm.scrape import fetch_metrics

log = logging.getLogger("vllm_headroom")
TAIL_INTERVAL_S = 0.25
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
                result = await fetch_metrics(session, s.config.url, s.config.timeout_s, s.config.max_response_bytes)
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
