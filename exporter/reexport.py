"""vLLM's own series passed on with a `server` label: which families, under which names, as text lines.

Pure functions of one scrape's samples, apart from metrics.py so that the per-server state can cache
the rendered lines without importing the collector.
"""

from __future__ import annotations

from prometheus_client.samples import Sample as PCSample

from exporter.catalog import PREFIX
from exporter.exposition_writer import sample_line
from exporter.vllm import names


def reexport_families() -> dict[str, tuple[str, str]]:
    """wire family -> (our family name without prefix and `_total`, type)."""
    out = {}
    for wire, (ours, typ) in names.REEXPORT.items():
        out[wire] = (ours[: -len("_total")] if typ == "counter" else ours, typ)
    for wire, ours in names.REEXPORT_HISTOGRAMS.items():
        out[wire] = (ours, "histogram")
    return out


def render_reexport(server: str, series: dict, extra: dict[str, str] | None = None) -> dict[str, tuple[list, str]]:
    """One server's re-exported samples and their text lines, per wire family; `extra` labels (role, cluster)
    go on every sample."""
    extra = extra or {}
    out = {}
    for wire, (base, typ) in reexport_families().items():
        name = PREFIX + base
        parts = names.HISTOGRAM_PARTS if typ == "histogram" else ("_total" if typ == "counter" else "",)
        samples = []
        for part in parts:
            source = series.get(wire + part if typ == "histogram" else wire, ())
            for s in source:
                labels = {"server": server, **extra, **{k: v for k, v in s.labels if k in names.PASS_LABELS}}
                samples.append(PCSample(name + part, labels, s.value, None, None))
        if typ == "histogram":  # OpenMetrics wants each series' buckets, sum and count together
            order: dict[tuple, int] = {}
            for x in samples:
                order.setdefault(tuple(sorted((k, v) for k, v in x.labels.items() if k != "le")), len(order))
            samples.sort(key=lambda x: order[tuple(sorted((k, v) for k, v in x.labels.items() if k != "le"))])
        lines = [sample_line(x.name, x.labels, x.value, None) for x in samples]
        out[wire] = (samples, "".join(lines))
    return out
