"""A fast parser for the Prometheus text format and OpenMetrics, as vLLM and prometheus_client emit them.

prometheus_client's own parser walks every character in Python; a vLLM server with 8 DP engines and full
histograms sends thousands of samples, scraped every few seconds for many servers. This parser splits
lines with str methods and takes a regex fast path for label sets without escapes, falling back to a
careful scanner only when a value holds `\\`, `\"` or `\n`. A bad line is counted and skipped, never fatal.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from operator import itemgetter

_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"\\]*)"\s*(,?)')
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs: hashable, cheap to compare


class Sample(tuple):
    """(name, labels, value, timestamp): a tuple, because thousands are made per scrape and tuples are cheapest."""

    __slots__ = ()

    def __new__(cls, name: str, labels: Labels, value: float, timestamp: float | None = None) -> "Sample":
        return tuple.__new__(cls, (name, labels, value, timestamp))

    name = property(itemgetter(0))
    labels = property(itemgetter(1))
    value = property(itemgetter(2))
    timestamp = property(itemgetter(3))

    def label(self, key: str, default: str = "") -> str:
        for k, v in self[1]:
            if k == key:
                return v
        return default

    def __repr__(self) -> str:
        return f"Sample(name={self[0]!r}, labels={self[1]!r}, value={self[2]!r}, timestamp={self[3]!r})"


@dataclass(slots=True)
class Exposition:
    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)  # family name -> counter|gauge|histogram|...
    helps: dict[str, str] = field(default_factory=dict)
    errors: int = 0  # lines that could not be parsed (skipped)
    first_error: str | None = None


class ParseError(ValueError):
    pass


# One regex pass over the whole payload, in C, finds every line that is not a comment or blank: either the
# shape every exporter writes, `name{labels} value [timestamp]` (groups 1-4; broad negated classes keep the
# engine fast, names are checked afterwards, once per distinct name), or anything else (group 5: escapes,
# exemplars, odd spacing, bad lines), which the careful scanner reads, that line alone. A literal `\n` before
# each line lets the engine skip ahead in C; `^` with re.M would test every position. CRLF needs nothing:
# the `\r` ends up in the value or timestamp, and float() ignores it.
_LINE = re.compile(r"\n(?:([^#\n{ ]+)(?:\{([^\n}]*)\})? ([^ \n]+)(?: ([^ \n]+))?(?=\n|$)|(?!#)([^\n]+))")
_TYPE_LINE = re.compile(r"\n# TYPE (\S+)[ \t]+(\S+)")
_HELP_LINE = re.compile(r"\n# HELP (\S+)(?:[ \t]([^\n]*))?")
_NAMES, _BLOCKS, _VALUES, _STAMPS, _OTHERS = (itemgetter(i) for i in range(5))
_new_sample = partial(tuple.__new__, Sample)


class LabelCache:
    """Label blocks, `key="value"` pairs and metric names already checked: kept across scrapes of one target.

    A vLLM server sends the same label blocks on every scrape; only the values move. `parse(text)` alone uses
    a fresh cache (the cold case); the scraper keeps one per server (the steady state). Bounded: cleared when
    it grows past `limit` entries (a target whose label values churn), so it never holds more than that.
    """

    __slots__ = ("blocks", "limit", "names", "pairs")

    def __init__(self, limit: int = 100_000) -> None:
        self.blocks: dict[str, Labels] = {"": ()}
        self.pairs: dict[str, tuple[str, str]] = {}
        self.names: set[str] = set()
        self.limit = limit

    def trim(self) -> None:
        if len(self.blocks) + len(self.pairs) + len(self.names) > self.limit:
            self.__init__(self.limit)  # type: ignore[misc]


class _Fallback(Exception):
    """Something in the plain-looking lines needs a closer look: read them one by one instead."""


def parse(text: str, cache: LabelCache | None = None, meta: bool = True) -> Exposition:
    """Parse a whole exposition. Samples keep their wire names (with `_total`, `_bucket`, `_created`).
    `meta=False`: leave the TYPE and HELP lines unread (two passes over the text a scraper needs not)."""
    eof = text.find("# EOF")
    if eof != -1 and (eof == 0 or text[eof - 1] == "\n"):
        text = text[:eof]
    if cache is None:
        cache = LabelCache()
    framed = "\n" + text
    found = _LINE.findall(framed)
    out = Exposition()
    if meta and "# " in text:
        out.types = dict(_TYPE_LINE.findall(framed))
        out.helps = {name: _unescape_help(h) for name, h in _HELP_LINE.findall(framed)}
    if not any(map(_OTHERS, found)):
        try:
            out.samples = _columns(found, cache)
        except _Fallback:
            _by_line(found, out, cache)
    else:
        _by_line(found, out, cache)
    cache.trim()
    return out


def _columns(found: list[tuple[str, str, str, str, str]], cache: LabelCache) -> list[Sample]:
    """Every line plain: each column converted by C loops (map), Python work only per distinct block or name."""
    blocks = list(map(_BLOCKS, found))
    known = cache.blocks
    for block in set(blocks).difference(known):
        labels = _fast_labels(block, cache.pairs) if "\\" not in block else None
        if labels is None:
            raise _Fallback
        known[block] = labels
    names = list(map(_NAMES, found))
    for name in set(names).difference(cache.names):
        if not _NAME.match(name):
            raise _Fallback
        cache.names.add(name)
    try:
        values = list(map(float, map(_VALUES, found)))
        if any(map(_STAMPS, found)):
            stamps: Iterable[float | None] = [float(t) if t else None for t in map(_STAMPS, found)]
        else:
            stamps = repeat(None)
    except ValueError:
        raise _Fallback from None
    return list(map(_new_sample, zip(names, map(known.__getitem__, blocks), values, stamps, strict=False)))


def _by_line(found: list[tuple[str, str, str, str, str]], out: Exposition, cache: LabelCache) -> None:
    """Line by line: plain lines still through the caches, the rest through the careful scanner, bad ones
    counted and skipped."""
    samples = out.samples
    append = samples.append
    known, names_ok = cache.blocks, cache.names
    new = tuple.__new__
    for name, block, value, ts, other in found:
        if not other:
            labels = known.get(block)
            if labels is None and "\\" not in block:
                labels = _fast_labels(block, cache.pairs)
                if labels is not None:
                    known[block] = labels
            if labels is not None and (name in names_ok or _NAME.match(name)):
                try:
                    append(new(Sample, (name, labels, float(value), float(ts) if ts else None)))
                    names_ok.add(name)
                    continue
                except ValueError:
                    pass
            other = name + (f"{{{block}}}" if block else "") + " " + value + (" " + ts if ts else "")
        try:
            sample = _careful_line(other, cache)
            if sample is not None:
                append(sample)
        except (ParseError, ValueError, IndexError) as exc:
            out.errors += 1
            if out.first_error is None:
                out.first_error = f"{exc}: {other[:120]!r}"


def _careful_line(line: str, cache: LabelCache) -> Sample | None:
    """One line with escapes, exemplars or odd spacing; None for a blank one. Raises on a bad line."""
    first = line[0]
    if first == " " or first == "\t" or first == "\r":
        line = line.strip()
        if not line:
            return None
    space = line.find(" ")
    brace = line.find("{", 0, space if space != -1 else len(line))  # not an exemplar's brace
    if brace == -1:
        parts = line.split()
        if len(parts) < 2:
            raise ParseError("no value")
        name = parts[0]
        labels: Labels | None = ()
        rest = parts[1:]
    else:
        name = line[:brace].rstrip()
        close = line.rfind("}")
        labels = None
        if close > brace and "\\" not in line and " # " not in line:
            block = line[brace + 1 : close]
            labels = cache.blocks.get(block)
            if labels is None:
                labels = _fast_labels(block, cache.pairs)
                if labels is not None:
                    cache.blocks[block] = labels
            end = close + 1
        if labels is None:  # escapes, exemplars or an odd shape: the careful scanner decides
            labels, end = _labels(line, brace + 1)
        rest = line[end:].split()
        if not rest:
            raise ParseError("no value")
    assert labels is not None
    if name not in cache.names:
        if not _NAME.match(name):
            raise ParseError("bad metric name")
        cache.names.add(name)
    value = float(rest[0])
    ts = None
    if len(rest) > 1 and rest[1] != "#":  # OpenMetrics exemplars follow ` # `
        ts = float(rest[1])
    return Sample(name, labels, value, ts)


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _fast_labels(block: str, pairs_seen: dict[str, tuple[str, str]] | None = None) -> Labels | None:
    """`a="x",b="y"` without escapes; None when the block is not exactly that (the careful path decides).

    Pairs repeat far more than blocks do (every bucket has the same engine and model): each distinct
    `key="value"` text is split once per parse.
    """
    if block.endswith(","):
        block = block[:-1]
    if not block.endswith('"'):
        return None
    seen = pairs_seen if pairs_seen is not None else {}
    pairs = []
    for part in block[:-1].split('",'):
        pair = seen.get(part)
        if pair is None:
            eq = part.find('="')
            if eq <= 0:
                return None
            key, value = part[:eq], part[eq + 2 :]
            if '"' in value or not _LABEL_NAME.match(key):
                return None
            pair = seen[part] = (key, value)
        pairs.append(pair)
    if len(pairs) > 1:
        pairs.sort()
    return tuple(pairs)


def _labels(line: str, pos: int) -> tuple[Labels, int]:
    """Parse `a="x",b="y"}`; return the sorted pairs and the index after the closing brace."""
    pairs: list[tuple[str, str]] = []
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
