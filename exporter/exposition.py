"""A fast parser for the Prometheus text format and OpenMetrics, as vLLM and prometheus_client emit them.

prometheus_client's own parser walks every character in Python; a vLLM server with 8 DP engines and full
histograms sends thousands of samples, scraped every few seconds for many servers. This parser splits
lines with str methods and takes a regex fast path for label sets without escapes, falling back to a
careful scanner only when a value holds `\\`, `\"` or `\n`. A bad line is counted and skipped, never fatal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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


# The shape every exporter writes: `name{labels} value [timestamp]`, single spaces. Broad negated classes
# keep the regex engine fast; names are checked afterwards, once per distinct name.
_SAMPLE_LINE = re.compile(r"\n([^#\n{ ]+)(?:\{([^\n}]*)\})? ([^ \n]+)(?: ([^ \n]+))?(?=\n|$)")
# A literal prefix lets the regex engine skip ahead in C; `^` with re.M would test every position.
_TYPE_LINE = re.compile(r"\n# TYPE (\S+)[ \t]+(\S+)")
_HELP_LINE = re.compile(r"\n# HELP (\S+)(?:[ \t]([^\n]*))?")


def parse(text: str) -> Exposition:
    """Parse a whole exposition. Samples keep their wire names (with `_total`, `_bucket`, `_created`)."""
    eof = text.find("# EOF")
    if eof != -1 and (eof == 0 or text[eof - 1] == "\n"):
        text = text[:eof]
    return _parse_fast(text) or _parse_careful(text)


def _parse_fast(text: str) -> Exposition | None:
    """The whole text through one regex, in C; None when any line is not the plain shape it expects."""
    framed = "\n" + text  # every line starts after a newline: the regexes search for that literal, in C
    found = _SAMPLE_LINE.findall(framed)
    lines = framed.count("\n")
    blank = framed.count("\n\n") + framed.endswith("\n")  # overlapping runs undercount: then the careful path
    if len(found) != lines - blank - framed.count("\n#"):
        return None
    out = Exposition()
    out.types = dict(_TYPE_LINE.findall(framed))
    out.helps = {name: _unescape_help(h) for name, h in _HELP_LINE.findall(framed)}
    cache: dict[str, Labels] = {"": ()}
    pairs_seen: dict[str, tuple[str, str]] = {}
    for _name, block, _value, _ts in found:  # label blocks repeat across families and buckets: parse each once
        if block not in cache:
            labels = _fast_labels(block, pairs_seen) if "\\" not in block else None
            if labels is None:
                return None
            cache[block] = labels
    for name in {f[0] for f in found}:
        if not _NAME.match(name):
            return None
    new = tuple.__new__
    try:
        out.samples = [new(Sample, (name, cache[block], float(value), float(ts) if ts else None))
                       for name, block, value, ts in found]
    except ValueError:
        return None
    return out


def _parse_careful(text: str) -> Exposition:  # noqa: C901  one hot loop over lines, kept inline for speed
    """Line by line, with escapes, exemplars and bad lines (counted and skipped)."""
    out = Exposition()
    samples = out.samples
    append = samples.append
    empty: Labels = ()
    labels: Labels | None
    cache: dict[str, Labels] = {}  # label blocks repeat across families and buckets: parse each once
    names_ok: set[str] = set()
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
                close = line.rfind("}")
                labels = None
                if close > brace and "\\" not in line and " # " not in line:
                    block = line[brace + 1:close]
                    labels = cache.get(block)
                    if labels is None:
                        labels = _fast_labels(block)
                        if labels is not None and len(cache) < 100_000:
                            cache[block] = labels
                    end = close + 1
                if labels is None:  # escapes, exemplars or an odd shape: the careful scanner decides
                    labels, end = _labels(line, brace + 1)
                rest = line[end:].split()
                if not rest:
                    raise ParseError("no value")
            if name not in names_ok:
                if not _NAME.match(name):
                    raise ParseError("bad metric name")
                names_ok.add(name)
            value = float(rest[0])
            ts = None
            if len(rest) > 1 and rest[1] != "#":  # OpenMetrics exemplars follow ` # `
                ts = float(rest[1])
            append(Sample(name, labels, value, ts))
        except (ParseError, ValueError, IndexError) as exc:
            out.errors += 1
            if out.first_error is None:
                out.first_error = f"{exc}: {line[:120]!r}"
    return out


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
            key, value = part[:eq], part[eq + 2:]
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
