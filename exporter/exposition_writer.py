"""The Prometheus text format (0.0.4) and OpenMetrics 1.0, written faster than prometheus_client's encoders.

The daemon answers /metrics with thousands of samples (16 servers with DP engines, histograms, 8 GPUs);
prometheus_client validates and escapes every label name of every sample on the way out. Our names are
fixed and valid, so these writers escape only values that need it. Their output is byte for byte that of
prometheus_client's `generate_latest` and `openmetrics.exposition.generate_latest` (tests hold them to it).
Both take a list of collected families, so one collection feeds both formats (see exporter/served.py).
"""

from __future__ import annotations

from collections.abc import Iterable

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


# Each /metrics build writes the same label sets and many of the same values as the last (16-64 servers: thousands
# of samples, every 15 s): both are remembered, bounded (cleared when full: label sets churning without end).
_HEADS: dict[tuple, str] = {}
_VALUES: dict[float, str] = {}
CACHE_LIMIT = 50_000


def write_head(name: str, labels: dict[str, str]) -> str:
    """`name{label="value",...}`, labels sorted and escaped: a sample line up to its value (not remembered: for a
    caller that keeps its own, as exporter/reexport.py does per server)."""
    if not labels:
        return name
    inner = ",".join([f'{k}="{_escape(labels[k])}"' for k in sorted(labels)])
    return f"{name}{{{inner}}}"


def sample_head(name: str, labels: dict[str, str]) -> str:
    """write_head, remembered across /metrics builds."""
    if not labels:
        return name
    key = (name, *labels.items())
    head = _HEADS.get(key)
    if head is None:
        head = write_head(name, labels)
        if len(_HEADS) >= CACHE_LIMIT:
            _HEADS.clear()
        _HEADS[key] = head
    return head


def go_float(value: float) -> str:
    """prometheus_client's floatToGoString, remembered per value (not zero: 0.0 and -0.0 are one key but two
    texts; not NaN)."""
    text = _VALUES.get(value)
    if text is None:
        text = floatToGoString(value)
        if value and value == value:  # NaN never finds itself again
            if len(_VALUES) >= CACHE_LIMIT:
                _VALUES.clear()
            _VALUES[value] = text
    return text


def sample_line(name: str, labels: dict[str, str], value: float, timestamp: float | Timestamp | None) -> str:
    """One text-format sample line; without a timestamp it is also the OpenMetrics line."""
    head = sample_head(name, labels)
    if timestamp is not None:
        return f"{head} {go_float(value)} {int(float(timestamp) * 1000):d}\n"
    return f"{head} {go_float(value)}\n"


class Rendered(Metric):
    """A family whose sample lines were written once (at scrape time) and are reused until the next scrape.

    The lines carry no timestamp and no exemplar, so they are the same in both formats. It keeps its samples
    too, so prometheus_client's encoders see an ordinary family.
    """

    def __init__(self, name: str, documentation: str, typ: str) -> None:
        super().__init__(name, documentation, typ)
        self.chunks: list[str] = []

    def add_rendered(self, samples: list, text: str) -> None:
        self.samples.extend(samples)
        self.chunks.append(text)


def _families(source: Collector | Iterable[Metric]) -> Iterable[Metric]:
    return source.collect() if hasattr(source, "collect") else source


def text_format(source: Collector | Iterable[Metric]) -> bytes:
    """The text format 0.0.4 of a registry or of families already collected."""
    out: list[str] = []
    append = out.append
    for metric in _families(source):
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
            if name.endswith(_OM_SUFFIXES) and name[len(metric.name) :] in _OM_SUFFIXES:
                extra.setdefault(name[len(metric.name) :], []).append(sample_line(name, s.labels, s.value, s.timestamp))
            else:
                append(sample_line(name, s.labels, s.value, s.timestamp))
        for suffix, lines in sorted(extra.items()):
            append(f"# HELP {metric.name}{suffix} {doc}\n# TYPE {metric.name}{suffix} gauge\n")
            out.extend(lines)
    return "".join(out).encode("utf-8")


def _om_exemplar(exemplar) -> str:
    labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(exemplar.labels.items()))
    tail = f" {exemplar.timestamp}" if exemplar.timestamp is not None else ""
    return f" # {{{labels}}} {floatToGoString(exemplar.value)}{tail}"


def openmetrics_format(source: Collector | Iterable[Metric]) -> bytes:
    """OpenMetrics 1.0.0 text of a registry or of families already collected (legacy names only, ours are).

    Native histograms are not written (OpenMetrics 1.0 has none), as prometheus_client does for 1.0.0.
    """
    out: list[str] = []
    append = out.append
    for metric in _families(source):
        name = metric.name
        append(f"# HELP {name} {_escape(metric.documentation)}\n# TYPE {name} {metric.type}\n")
        if metric.unit:
            append(f"# UNIT {name} {metric.unit}\n")
        if isinstance(metric, Rendered):
            out.extend(metric.chunks)
            continue
        for s in metric.samples:
            if s.native_histogram:
                continue
            line = sample_head(s.name, s.labels)
            if s.value is not None:
                line += " " + go_float(s.value)
            else:
                line += " "
            if s.timestamp is not None:
                line += f" {s.timestamp}"
            if s.exemplar:
                if not _exemplar_allowed(metric, s.name):
                    raise ValueError(f"Metric {name} has exemplars, but is not a histogram bucket or counter")
                line += _om_exemplar(s.exemplar)
            append(line + "\n")
    append("# EOF\n")
    return "".join(out).encode("utf-8")


def _exemplar_allowed(metric: Metric, sample: str) -> bool:
    if metric.type == "counter":
        return sample.endswith("_total")
    if metric.type == "gaugehistogram":
        return sample.endswith("_bucket")
    return metric.type == "histogram" and (sample.endswith("_bucket") or sample == metric.name)
