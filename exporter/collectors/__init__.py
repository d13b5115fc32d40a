"""One collector per domain of the exported series, composed by exporter/metrics.py.

Each builds its families from exporter/catalog.py afresh on every collection and reads only what one /metrics
answer took of the daemon's state: per server a `state.ServerReading` (the server's state and one copy of its
log's word), and the GPU sampler's own snapshot. None of them takes a lock or reads another module's internals.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from exporter.state import ServerReading


class Domain(Protocol):
    """What exporter/metrics.py asks of each domain's collector: its families for one /metrics answer."""

    def collect(self, servers: Sequence[ServerReading]) -> Iterable[Metric]: ...
