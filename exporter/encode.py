"""The Prometheus text format (0.0.4), written faster than prometheus_client's `generate_latest`.

The daemon answers /metrics with thousands of samples (16 servers with DP engines, histograms, 8 GPUs);
prometheus_client validates and escapes every label name of every sample on the way out. Our names are
fixed and valid, so this writer escapes only values that need it. Its output is byte for byte that of
`generate_latest` (a test holds it to that); OpenMetrics answers still go through prometheus_client.
"""

from __future__ import annotations

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Timestamp
from prometheus_client.utils import floatToGoString

_MUNGE = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def sample_line(name: str, labels: dict[str, str], value: float, timestamp: float | Timestamp | None) -> str:
    if labels:
        inner = ",".join([f'{k}="{_escape(labels[k])}"' for k in sorted(labels)])
        head = f"{name}{{{inner}}}"
    else:
        head = name
    if timestamp is not None:
        return f"{head} {floatToGoString(value)} {int(float(timestamp) * 1000):d}\n"
    return f"{head} {floatToGoString(value)}\n"


class Rendered(Metric):
    """A family whose sample lines were written once (at scrape time) and are reused until the next scrape.

    It keeps its samples too, so prometheus_client's encoders (OpenMetrics) see an ordinary family.
    """

    def __init__(self, name: str, documentation: str, typ: str) -> None:
        super().__init__(name, documentation, typ)
        self.chunks: list[str] = []

    def add_rendered(self, samples: list, text: str) -> None:
        self.samples.extend(samples)
        self.chunks.append(text)


def text_format(registry: Collector) -> bytes:
    out: list[str] = []
    append = out.append
    for metric in registry.collect():
        mname, mtype = metric.name, metric.type
        if mtype == "counter":
            mname += "_total"
        elif mtype == "info":
            mname += "_info"
        mtype = _MUNGE.get(mtype, mtype)
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        append(f"# HELP {mname} {doc}\n# TYPE {mname} {mtype}\n")
        if isinstance(metric, Rendered):
            out.extend(metric.chunks)
            continue
        extra: dict[str, list[str]] = {}
        for s in metric.samples:
            name = s.name
            if name.endswith(_OM_SUFFIXES) and name[len(metric.name):] in _OM_SUFFIXES:
                extra.setdefault(name[len(metric.name):], []).append(sample_line(name, s.labels, s.value, s.timestamp))
            else:
                append(sample_line(name, s.labels, s.value, s.timestamp))
        for suffix, lines in sorted(extra.items()):
            append(f"# HELP {metric.name}{suffix} {doc}\n# TYPE {metric.name}{suffix} gauge\n")
            out.extend(lines)
    return "".join(out).encode("utf-8")
