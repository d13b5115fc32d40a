"""A fast parser for the Prometheus text format and OpenMetrics, as vLLM and prometheus_client emit them.

prometheus_client's own parser walks every character in Python; a vLLM server with 8 DP engines and full
histograms sends thousands of samples, scraped every few seconds for many servers. This parser splits
lines with str methods and takes a regex fast path for label sets without escapes, falling back to a
careful scanner only when a value holds `\\`, `\"` or `\n`. A bad line is counted and skipped, never fatal.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"\\]*)"\s*(,?)')
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs: hashable, cheap to compare


@dataclass(slots=True)
class Sample:
    name: str
    labels: Labels
    value: float
    timestamp: float | None = None

    def label(self, key: str, default: str = "") -> str:
        for k, v in self.labels:
            if k == key:
                return v
        return default


@dataclass(slots=True)
class Exposition:
    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)  # family name -> counter|gauge|histogram|...
    helps: dict[str, str] = field(default_factory=dict)
    errors: int = 0  # lines that could not be parsed (skipped)
    first_error: str | None = None


class ParseError(ValueError):
    pass


def parse(text: str) -> Exposition:
    """Parse a whole exposition. Samples keep their wire names (with `_total`, `_bucket`, `_created`)."""
    out = Exposition()
    samples = out.samples
    append = samples.append
    empty: Labels = ()
    for line in text.split("\n"):
        if not line:
            continue
        first = line[0]
        if first == "#":
            if line.startswith("# TYPE "):
                parts = line.split(None, 3)
                if len(parts) == 4:
                    out.types[parts[2]] = parts[3].strip()
            elif line.startswith("# HELP "):
                parts = line.split(None, 3)
                if len(parts) >= 3:
                    out.helps[parts[2]] = _unescape_help(parts[3]) if len(parts) == 4 else ""
            elif line.startswith("# EOF"):
                break
            continue
        if first == " " or first == "\t" or first == "\r":
            line = line.strip()
            if not line:
                continue
        try:
            space = line.find(" ")
            brace = line.find("{", 0, space if space != -1 else len(line))  # not an exemplar's brace
            if brace == -1:
                parts = line.split()
                if len(parts) < 2:
                    raise ParseError("no value")
                name = parts[0]
                labels = empty
                rest = parts[1:]
            else:
                name = line[:brace].rstrip()
                labels, end = _labels(line, brace + 1)
                rest = line[end:].split()
                if not rest:
                    raise ParseError("no value")
            if not _NAME.match(name):
                raise ParseError("bad metric name")
            value = _float(rest[0])
            ts = None
            if len(rest) > 1 and rest[1] != "#":  # OpenMetrics exemplars follow ` # `
                ts = float(rest[1])
            append(Sample(name, labels, value, ts))
        except (ParseError, ValueError, IndexError) as exc:
            out.errors += 1
            if out.first_error is None:
                out.first_error = f"{exc}: {line[:120]!r}"
    return out


def _float(text: str) -> float:
    v = float(text)  # accepts NaN, +Inf, -Inf, 1e3, as the format allows
    if math.isnan(v):
        return math.nan
    return v


def _labels(line: str, pos: int) -> tuple[Labels, int]:
    """Parse `a="x",b="y"}`; return the sorted pairs and the index after the closing brace."""
    pairs = []
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t":
            pos += 1
        if pos < n and line[pos] == "}":
            pairs.sort()
            return tuple(pairs), pos + 1
        m = _LABEL.match(line, pos)
        if m is not None:  # no escapes in this value
            pairs.append((m.group(1), m.group(2)))
            pos = m.end()
            if not m.group(3):
                while pos < n and line[pos] in " \t":
                    pos += 1
                if pos >= n or line[pos] != "}":
                    raise ParseError("expected , or } after a label")
            continue
        key, value, pos = _slow_label(line, pos)
        pairs.append((key, value))


def _slow_label(line: str, pos: int) -> tuple[str, str, int]:
    """One label with escapes in its value: `\\\\`, `\\"` and `\\n`."""
    eq = line.find("=", pos)
    if eq == -1:
        raise ParseError("label without =")
    key = line[pos:eq].strip()
    if not re.match(r"^[a-zA-Z_][a-zA-Z0-9_]*$", key):
        raise ParseError("bad label name")
    q = eq + 1
    while q < len(line) and line[q] in " \t":
        q += 1
    if q >= len(line) or line[q] != '"':
        raise ParseError("label value not quoted")
    chars = []
    i = q + 1
    n = len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            if i + 1 >= n:
                raise ParseError("dangling escape")
            nxt = line[i + 1]
            chars.append("\n" if nxt == "n" else nxt if nxt in '"\\' else "\\" + nxt)
            i += 2
            continue
        if c == '"':
            break
        chars.append(c)
        i += 1
    else:
        raise ParseError("unterminated label value")
    i += 1
    while i < n and line[i] in " \t":
        i += 1
    if i < n and line[i] == ",":
        i += 1
    elif i >= n or line[i] != "}":
        raise ParseError("expected , or } after a label")
    return key, "".join(chars), i


def _unescape_help(text: str) -> str:
    if "\\" not in text:
        return text
    return text.replace("\\\\", "\x00").replace("\\n", "\n").replace("\x00", "\\")
