"""vLLM's own series passed on with a `server` label: which families, under which names, as text lines.

Pure functions of one scrape's samples, apart from metrics.py so that the per-server state can cache
the rendered lines without importing the collector.
"""

from __future__ import annotations

from prometheus_client.samples import Sample as PCSample

from exporter.catalog import PREFIX
from exporter.exposition_writer import go_float, write_head
from exporter.vllm import names


def reexport_families() -> dict[str, tuple[str, str]]:
    """wire family -> (our family name without prefix and `_total`, type)."""
    out = {}
    for wire, (ours, typ) in names.REEXPORT.items():
        out[wire] = (ours[: -len("_total")] if typ == "counter" else ours, typ)
    for wire, ours in names.REEXPORT_HISTOGRAMS.items():
        out[wire] = (ours, "histogram")
    return out


# (sample name, wire label set) -> (sample name, our labels, `name{labels}` as written, the series' labels
# without `le`): a server's label sets repeat on every scrape, only values move, so each is sorted, escaped and
# written once
Heads = dict[tuple[str, tuple], tuple[str, dict[str, str], str, tuple]]
MAX_HEADS = 50_000  # label sets churning without end (engines renumbered): start over rather than grow


def render_reexport(
    server: str, series: dict, extra: dict[str, str] | None = None, heads: Heads | None = None
) -> dict[str, tuple[list, str]]:
    """One server's re-exported samples and their text lines, per wire family; `extra` labels (role, cluster)
    go on every sample. `heads`: this server's cache of written label sets, kept across its scrapes (the
    server and `extra` must not change while it is)."""
    extra = extra or {}
    if heads is None:
        heads = {}
    elif len(heads) > MAX_HEADS:
        heads.clear()
    out = {}
    for wire, (base, typ) in reexport_families().items():
        name = PREFIX + base
        parts = names.HISTOGRAM_PARTS if typ == "histogram" else ("_total" if typ == "counter" else "",)
        rows = []
        for part in parts:
            source = series.get(wire + part if typ == "histogram" else wire, ())
            sname = name + part
            for s in source:
                head = heads.get((sname, s[1]))
                if head is None:
                    labels = {"server": server, **extra, **{k: v for k, v in s[1] if k in names.PASS_LABELS}}
                    group = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
                    head = heads[(sname, s[1])] = (sname, labels, write_head(sname, labels), group)
                rows.append((head, s[2]))
        if typ == "histogram":  # OpenMetrics wants each series' buckets, sum and count together
            order: dict[tuple, int] = {}
            for head, _ in rows:
                order.setdefault(head[3], len(order))
            rows.sort(key=lambda row: order[row[0][3]])
        samples = [PCSample(head[0], head[1], value, None, None) for head, value in rows]
        out[wire] = (samples, "".join([f"{head[2]} {go_float(value)}\n" for head, value in rows]))
    return out
