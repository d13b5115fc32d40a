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

from exporter.config import Config, ServerConfig
from exporter.gpu.base import GpuUnavailable
from exporter.gpu.choose import open_backend
from exporter.gpu.sampler import GpuSampler
from exporter.httpguard import ConnectionGuard, serve
from exporter.logs.stages import UNDECIDED_STAGE
from exporter.logs.tailer import LogTailer
from exporter.metrics import HeadroomCollector
from exporter.state import ServerState
from exporter.vllm.scrape import fetch_metrics

log = logging.getLogger("vllm_headroom")
# How often the logs are polled: an OOM line reaches /metrics within about this (p99 ~0.5 s against the 1 s goal,
# benchmarks/bench_latency.py). Each poll of a growing log has a fixed cost (a stat, two preads, a read, a thread
# hop shared by all logs) beside its lines', so 0.5 s instead of 0.25 s halves that part.
TAIL_INTERVAL_S = 0.5


class Daemon:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.servers: dict[str, ServerState] = {}
        self.gpu: GpuSampler | None = None
        self._tasks: list[asyncio.Task] = []
        self._scrapes: dict[str, asyncio.Task] = {}
        self._session: aiohttp.ClientSession | None = None
        # One thread does every log read and every state save, so a poll still running when the tail task is
        # cancelled finishes before close() saves: never two writers of one state file.
        self._log_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="logs")
        self._tails_polled = False
        self.gpu_owners: dict[str, tuple[str, str]] = {}
        self.admit(self.wanted())
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.registry.register(HeadroomCollector(self))

    def wanted(self) -> list[ServerConfig]:
        """The configured servers, then the vLLM pods found on this node (a configured name wins)."""
        out = list(self.cfg.servers)
        if self.cfg.kubernetes is not None:
            from exporter.discovery import discover

            names = {sc.name for sc in out}
            for sc in discover(self.cfg.kubernetes):
                if sc.name in names:
                    log.warning(
                        "discovered server %r has the name of a configured one: the configured one is kept", sc.name
                    )
                    continue
                out.append(sc)
        return out

    def retire(self, wanted: list[ServerConfig]) -> list[ServerState]:
        """Forget the servers not in `wanted` (or whose config changed) and return them, for the caller to stop
        their scrapes and close their tailers before `admit` starts a replacement on the same state file."""
        want = {sc.name: sc for sc in wanted}
        gone = [st for name, st in self.servers.items() if name not in want or want[name] != st.config]
        for st in gone:
            del self.servers[st.name]
        return gone

    def admit(self, wanted: list[ServerConfig]) -> list[str]:
        """Give state to the servers of `wanted` not yet watched; returns their names."""
        added = []
        for sc in wanted:
            if sc.name in self.servers:
                continue
            # A server scraped as well tells its log's analyzer when it serves (note_serving, after a good scrape), so
            # a failure nothing places in a run no scrape found serving is one of a startup; for a log alone, the
            # prior that pasted logs bear out (stages.UNDECIDED_STAGE).
            tailer = (
                LogTailer(
                    sc.name,
                    sc.log,
                    self.cfg.state_dir,
                    save_every_s=self.cfg.state_save_interval_s,
                    undecided_stage="loading_unknown" if sc.url else UNDECIDED_STAGE,
                )
                if sc.log
                else None
            )
            self.servers[sc.name] = ServerState(sc, self.cfg.prefix_cache_window_s, tailer, self.cfg.cluster)
            added.append(sc.name)
        self.gpu_owners = gpu_owners(wanted)
        return added

    def open_gpus(self) -> None:
        g = self.cfg.gpu
        try:
            backend = open_backend(g.backend, g.fake_count, g.fake_model, g.fake_total_bytes)
        except GpuUnavailable as exc:
            log.error(
                "GPU memory: the configured backend %r is not usable: %s; GPU series are not exported", g.backend, exc
            )
            backend = None
        if backend is not None:
            self.gpu = GpuSampler(backend, g.sample_interval_s)

    def state_version(self) -> tuple:
        """Changes whenever anything /metrics shows may have changed: the exposition cache's key.

        A scrape of a vLLM server counts in `scrapes`; a log poll in the tailer's `version`; a GPU reading
        that differs from the last one in the sampler's `version`.
        """
        return (
            tuple(s.scrapes for s in self.servers.values()),
            tuple(s.tailer.version for s in self.servers.values() if s.tailer),
            self.gpu.version if self.gpu is not None else -1,
        )

    def ready(self) -> bool:
        scraped = all(s.scrapes > 0 or s.config.url is None for s in self.servers.values())
        tails = self._tails_polled or not any(s.tailer for s in self.servers.values())
        return scraped and tails

    def report(self) -> None:
        """Say once, at startup, what is being watched."""
        for s in self.servers.values():
            log.info(
                "watching %s: %s every %gs (timeout %gs)%s",
                s.name,
                s.config.safe_url,
                s.config.interval_s,
                s.config.timeout_s,
                f", log {s.config.log.path} ({s.config.log.format})" if s.config.log else "",
            )
        log.info(
            "state kept in %s; prefix-cache window %gs; listening on %s",
            self.cfg.state_dir,
            self.cfg.prefix_cache_window_s,
            self.cfg.listen_address,
        )

    async def lifecycle(self, app: web.Application) -> AsyncIterator[None]:
        """aiohttp cleanup context: start everything, yield while serving, stop everything."""
        self.report()
        if self.gpu is None:
            self.open_gpus()
        if self.gpu is not None:
            self.gpu.start()
        session = self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64), auto_decompress=True)
        for s in self.servers.values():
            self._start_scrape(s)
        if any(s.tailer for s in self.servers.values()) or self.cfg.kubernetes is not None:
            self._tasks.append(asyncio.create_task(self._tail_loop(), name="tail"))
        if self.cfg.kubernetes is not None:
            self._tasks.append(asyncio.create_task(self._discovery_loop(), name="discovery"))
        try:
            yield
        finally:
            tasks = self._tasks + list(self._scrapes.values())
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await session.close()
            await asyncio.get_running_loop().run_in_executor(self._log_thread, self.close_tailers)
            self._log_thread.shutdown(wait=True)
            if self.gpu is not None:
                self.gpu.stop()
            log.info("stopped; log offsets saved")

    def _start_scrape(self, s: ServerState) -> None:
        if s.config.url is not None and self._session is not None:
            self._scrapes[s.name] = asyncio.create_task(self._scrape_loop(self._session, s), name=f"scrape-{s.name}")

    async def _discovery_loop(self) -> None:
        """Look for this node's vLLM pods again every `kubernetes.refresh`: pods come, go and move."""
        assert self.cfg.kubernetes is not None
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.cfg.kubernetes.refresh_s)
            try:
                wanted = await loop.run_in_executor(self._log_thread, self.wanted)
                for st in self.retire(wanted):
                    task = self._scrapes.pop(st.name, None)
                    if task is not None:
                        task.cancel()
                    if st.tailer is not None:  # offsets and counters saved before a replacement reads them
                        await loop.run_in_executor(self._log_thread, st.tailer.close)
                    log.info("%s: no longer on this node (or its config changed); not watched any more", st.name)
                added = self.admit(wanted)
                for name in added:
                    log.info(
                        "%s: found on this node (%s, role %s)",
                        name,
                        self.servers[name].config.safe_url,
                        self.servers[name].config.role,
                    )
                    self._start_scrape(self.servers[name])
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("unexpected error while discovering pods")

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
                assert s.config.url is not None  # log-only servers get no scrape task
                result = await fetch_metrics(
                    session, s.config.url, s.config.timeout_s, s.config.max_response_bytes, s.labels
                )
                s.update(result, started)
                if result.series and s.tailer is not None and s.tailer.heeds_serving():
                    # serving: the log's analyzer hears it on its own thread
                    await asyncio.get_running_loop().run_in_executor(self._log_thread, s.tailer.note_serving)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not stop this server's scraping for good
                log.exception("%s: unexpected error while scraping", s.name)
            await asyncio.sleep(max(0.0, s.config.interval_s - (time.monotonic() - started)))

    async def _tail_loop(self) -> None:
        loop = asyncio.get_running_loop()

        def poll_all(tailers: list[LogTailer], due: set[LogTailer]) -> None:
            for t in tailers:
                if t in due:
                    t.poll(checked=True)
                else:
                    t.save_if_due()

        while True:
            try:
                tailers = [s.tailer for s in list(self.servers.values()) if s.tailer]
                due = {t for t in tailers if t.needs_poll()}  # stats here; reads and saves on the log thread
                await loop.run_in_executor(self._log_thread, poll_all, tailers, due)
                self._tails_polled = True
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("unexpected error while following logs")
            await asyncio.sleep(TAIL_INTERVAL_S)


def gpu_owners(servers: list[ServerConfig]) -> dict[str, tuple[str, str]]:
    """GPU index (as the `gpu` label has it) -> (server, role): the indices servers name, or every GPU for the
    one server that says `all` when no server names indices."""
    owners: dict[str, tuple[str, str]] = {}
    for sc in servers:
        if isinstance(sc.gpus, tuple):
            for g in sc.gpus:
                owners.setdefault(str(g), (sc.name, sc.role))
    alls = [sc for sc in servers if sc.gpus == "all"]
    if not owners and len(alls) == 1:
        return {"*": (alls[0].name, alls[0].role)}
    return owners


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
        log.info(
            "web config %s: TLS %s, basic auth for %d user(s)",
            cfg.web_config_file,
            "on" if web_config.ssl_context else "off",
            len(web_config.users),
        )
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
