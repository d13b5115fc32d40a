"""GPU memory per device from the sampler's snapshot: used, total, reserved, peak over a window, headroom, the
reads' health and memory per process."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from exporter.catalog import family

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from exporter.gpu.sampler import GpuSampler
    from exporter.state import ServerReading


class GpuCollector:
    """The GPU families; with no sampler (GPU reading off or unavailable) they are empty but still described."""

    def __init__(self, sampler: GpuSampler | None) -> None:
        self.sampler = sampler

    def collect(self, servers: Sequence[ServerReading]) -> Iterator[Metric]:  # GPUs are per node, not per server
        sampler = self.sampler
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
