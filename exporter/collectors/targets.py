"""The scrapes of each vLLM server: up, how long, how large, why not, and what was dropped."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from exporter.catalog import family
from exporter.vllm.scrape import ERROR_REASONS

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from exporter.state import ServerReading


class TargetCollector:
    """vllm_headroom_target_up and the scrape's health, for the servers this exporter scrapes itself."""

    def collect(self, servers: Sequence[ServerReading]) -> Iterator[Metric]:
        up = family("target_up")
        dur = family("scrape_duration_seconds")
        last = family("last_scrape_success_timestamp_seconds")
        errs = family("scrape_errors")
        size = family("scrape_response_bytes")
        dropped = family("series_dropped")
        for reading in servers:
            st = reading.state
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
