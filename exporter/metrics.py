"""The exported series: one collector per domain (exporter/collectors/), composed here per scrape.

Fresh families on every collect mean no stale label set lingers after a DP engine or a GPU goes away.
Every name carries the `vllm_headroom_` prefix and base units; counters end in `_total` (exporter/catalog.py).
Here the fleet labels are added, in one place, to what the domains build.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterable, Iterator

from prometheus_client.core import Metric

from exporter.catalog import family
from exporter.collectors import Domain
from exporter.collectors.environment import EnvironmentCollector
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.kv_cache import KvCacheCollector
from exporter.collectors.reexported import ReexportCollector
from exporter.collectors.targets import TargetCollector
from exporter.collectors.vllm_log import VllmLogCollector
from exporter.state import ServerReading

if TYPE_CHECKING:
    from exporter.state import DaemonView


def _decorated(
    families: Iterable[Metric],
    extra: dict[str, dict[str, str]],
    owners: dict[str, tuple[str, str]],
    cluster: str | None,
) -> Iterator[Metric]:
    """Fleet labels added in one place: `role` (and `cluster` when configured) beside every `server`, and on a
    GPU's series the server that uses it (config `gpus`), so a server spanning nodes is one `server` on all of
    its GPUs and a prefill pool's GPUs are told from a decode pool's."""
    for fam in families:
        out = []
        for s in fam.samples:
            labels = s.labels
            server = labels.get("server")
            if server is not None:
                add = extra.get(server)
            elif "gpu" in labels and owners:
                owner = owners.get(labels["gpu"]) or owners.get("*")
                add = {"server": owner[0], "role": owner[1]} if owner else None
            else:
                add = None
            if add or cluster:
                labels = {**labels, **(add or {}), **({"cluster": cluster} if cluster else {})}
                s = s._replace(labels=labels)
            out.append(s)
        fam.samples = out
        yield fam


class HeadroomCollector:
    """The registry's one custom collector: reads the daemon once per collect and asks each domain in turn."""

    def __init__(self, daemon: DaemonView) -> None:
        self.d = daemon

    def describe(self) -> list:
        return []  # families vary with the state: no registration-time describe

    def collect(self) -> Iterator[Metric]:
        start = time.monotonic()
        states = list(self.d.servers.values())
        servers = [ServerReading(st, st.tail()) for st in states]  # one copy of each log's word per scrape
        extra = {st.name: st.extra_labels for st in states}
        owners = self.d.gpu_owners
        cluster = self.d.cfg.cluster
        sampler = self.d.gpu
        domains: tuple[Domain, ...] = (
            TargetCollector(),
            VllmLogCollector(),
            KvCacheCollector(self.d.cfg.prefix_cache_window_s),
            ReexportCollector(),
            GpuCollector(sampler),
            EnvironmentCollector(sampler, self.d.cfg.environment),
        )
        for domain in domains:
            families = domain.collect(servers)
            if isinstance(domain, ReexportCollector):
                yield from families  # rendered with the fleet labels already
            else:
                yield from _decorated(families, extra, owners, cluster)
        dur = family("collect_duration_seconds")
        dur.add_metric([], time.monotonic() - start)
        yield from _decorated([dur], extra, owners, cluster)
