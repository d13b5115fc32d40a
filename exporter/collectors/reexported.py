"""vLLM's own series passed on with a `server` label (the list is exporter/vllm/names.py's REEXPORT)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from exporter.catalog import PREFIX
from exporter.exposition_writer import Rendered
from exporter.reexport import reexport_families

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from exporter.state import ServerReading


class ReexportCollector:
    """Rendered once per scrape of each server, reused by every /metrics answer; the samples already carry the
    fleet labels, so the composer does not add them again."""

    def collect(self, servers: Sequence[ServerReading]) -> Iterator[Metric]:
        fams = {
            wire: Rendered(PREFIX + base, f"Re-exported {wire} with a server label.", typ)
            for wire, (base, typ) in reexport_families().items()
        }
        for reading in servers:
            if reading.state.up:
                for wire, (samples, text) in reading.state.reexported().items():
                    fams[wire].add_rendered(samples, text)
        yield from fams.values()
