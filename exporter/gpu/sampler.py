"""Reads GPU memory on its own timer (10 Hz by default) in a thread, keeping the peak over a trailing window.

Sampling on our own timer departs from the exporter guide's read-on-scrape rule, as dcgm-exporter does,
because a prefill spike lives for milliseconds: a 15 s scrape would never see it. The peak is the max of
the samples of the last `peak_window_s` seconds, whoever reads it and how often: reading /metrics has no
side effect, so two Prometheus replicas (or a curl) see the same spikes. The thread also keeps a slow NVML
call from stalling the event loop. A failing GPU is marked down and retried with backoff; the other GPUs
keep flowing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from exporter.gpu.base import GpuBackend, GpuError, GpuInfo

log = logging.getLogger("vllm_headroom.gpu")
MAX_BACKOFF_S = 30.0
MAX_PROCESSES = 32
PEAK_WINDOW_S = 60.0  # longer than any sane scrape interval, so every scrape sees every spike


@dataclass
class GpuState:
    info: GpuInfo
    up: bool = False
    used: int | None = None
    total: int | None = None
    reserved: int | None = None
    peak: int | None = None  # max used over the trailing window
    samples: int = 0
    errors: int = 0
    lost: int = 0
    last_success: float | None = None  # wall-clock seconds
    retry_at: float = 0.0
    backoff: float = 0.0
    processes: list[tuple[int, int]] = field(default_factory=list)
    # (monotonic time, used) with decreasing `used`: the front is the window's max (a sliding-window maximum)
    window: deque[tuple[float, int]] = field(default_factory=deque, repr=False)

    def observe(self, now: float, used: int, window_s: float) -> None:
        """Add a sample and drop what left the window; O(1) amortized per sample."""
        w = self.window
        while w and w[-1][1] <= used:
            w.pop()
        w.append((now, used))
        while w[0][0] <= now - window_s:
            w.popleft()
        self.peak = w[0][1]


class GpuSampler:
    def __init__(
        self,
        backend: GpuBackend,
        interval_s: float = 0.1,
        process_interval_s: float = 1.0,
        peak_window_s: float = PEAK_WINDOW_S,
    ) -> None:
        self.backend = backend
        self.interval_s = interval_s
        self.peak_window_s = peak_window_s
        self.process_interval_s = process_interval_s
        self.states = {d.index: GpuState(d) for d in backend.devices()}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_procs = 0.0
        self.version = 0  # bumped when a reading differs from the last one: the /metrics cache's key
        self.driver = backend.driver()

    def start(self) -> None:
        if self._thread is None and self.states:
            self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.backend.close()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            next_at += self.interval_s
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (a slow driver call): skip ahead instead of bursting
                next_at = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def sample_once(self) -> None:
        start = time.monotonic()
        want_procs = start >= self._next_procs
        if want_procs:
            self._next_procs = start + self.process_interval_s
        for index, st in self.states.items():
            if not st.up and start < st.retry_at:
                continue
            try:
                reading = self.backend.read_memory(index)
                procs = self.backend.processes(index)[:MAX_PROCESSES] if want_procs else None
            except GpuError as exc:
                self._failed(st, exc, start)
                continue
            except Exception as exc:  # an adapter bug must not kill the sampler
                self._failed(st, GpuError(f"{type(exc).__name__}: {exc}"), start)
                continue
            with self._lock:
                before = (st.up, st.used, st.total, st.reserved, st.peak, st.processes)
                if not st.up and st.errors:
                    log.info("GPU %s is readable again after %d error(s)", index, st.errors)
                st.up = True
                st.backoff = 0.0
                st.used, st.total, st.reserved = reading.used_bytes, reading.total_bytes, reading.reserved_bytes
                st.observe(start, reading.used_bytes, self.peak_window_s)
                st.samples += 1
                st.last_success = time.time()
                if procs is not None:
                    st.processes = procs
                if (st.up, st.used, st.total, st.reserved, st.peak, st.processes) != before:
                    self.version += 1

    def _failed(self, st: GpuState, exc: GpuError, now: float) -> None:
        with self._lock:
            if st.up or not st.errors:
                log.warning(
                    "GPU %s (%s) read failed%s: %s; retrying with backoff",
                    st.info.index,
                    st.info.uuid,
                    " (GPU lost)" if exc.lost else "",
                    exc,
                )
            st.up = False
            st.errors += 1
            self.version += 1
            st.lost += exc.lost
            st.backoff = min(MAX_BACKOFF_S, max(self.interval_s, st.backoff * 2 or 0.5))
            st.retry_at = now + st.backoff

    def collect(self) -> list[GpuState]:
        """A snapshot for one scrape. Changes nothing: the peak is over a fixed trailing window, not per reader."""
        with self._lock:
            return [
                GpuState(**{k: getattr(st, k) for k in st.__dataclass_fields__ if k != "window"})
                for st in self.states.values()
            ]
