"""What a paste adds to a log on its way into an issue thread, taken off before triage reads it.

A log file the daemon follows never carries these; a log copied out of a web viewer or a terminal does:
- the viewer's line numbers in front of every line (`  12 | text`, `12: text`, `cat -n`'s `    12\ttext`);
- a collector's label, the same in front of every line (stern's `pod container `, Slurm `srun --label`'s `0: `),
  which the record parser has no pattern for;
- the terminal's hard wraps: a line longer than the window split into pieces exactly as wide as it, the pieces
  after the first starting anywhere in the text (mid-word, mid-path), so neither the failure's words nor a frame's
  path reads whole.
All are recognised on the whole paste, never on one line (a log's own lines never count up one by one, and no line
of a wrapped paste is wider than its window), so a number or a long line in a real log is left as it is.
"""

from __future__ import annotations

import itertools
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from exporter.logs.formats import LogLine
from exporter.logs.patterns import LINE_OPENER, LINE_START
from exporter.logs.records import COMPOSE_COLUMN, parse_record

_NUMBER = re.compile(r"[ \t]{0,6}(\d{1,6})(?:[ \t]*[|:][ \t]?|[ \t]+|$)")
NUMBERED_SNIFF = 8
LINE_OPENER_RE = re.compile(LINE_OPENER)
# A terminal narrower than this wraps nearly every vLLM line (its prefix alone is ~60 characters): not seen pasted.
MIN_WRAP_WIDTH = 60
WRAP_SNIFF = 20_000  # lines read to find the window's width; a paste is far shorter


def unnumbered(lines: Iterable[LogLine]) -> Iterator[LogLine]:
    """The lines without the numbers a paste's viewer put in front of every one of them. Numbered only when the
    first lines count up one by one, so a number in a message is never taken; the record parser peels a lone number
    only before a line start it knows."""
    it = iter(lines)
    head = list(itertools.islice(it, NUMBERED_SNIFF))
    found = [_NUMBER.match(line.text) for line in head]
    numbers = [int(m.group(1)) if m else -1 for m in found]
    numbered = len(head) >= 3 and numbers[0] >= 0 and numbers == list(range(numbers[0], numbers[0] + len(head)))
    for line in itertools.chain(head, it):
        if numbered and (m := _NUMBER.match(line.text)) is not None:
            line = LogLine(line.number, line.text[m.end() :], line.time, line.truncated)
        yield line


PREFIX_SNIFF = 200  # lines read to find a label every line carries
LABEL_CHARS = 120  # the longest label looked for
_PREFIX_END = " \t:|]>"  # a label ends at one of these
_FRAME_STARTS = ('  File "', "File ")  # Python's frame line, IPython's (`File <path>:<n>, in <func>(...)`)


def reads_as_line(text: str) -> bool:
    """The line reads as a log line: vLLM's prefix or a wrapper the parser knows, a line start, a traceback's
    frame."""
    rec = parse_record(text)
    msg = rec.message
    return rec.vllm_shaped or rec.wrapped or msg.startswith(_FRAME_STARTS) or bool(LINE_START.match(msg))


def common_label(texts: list[str]) -> str | None:
    """The label nearly every line begins with (nine in ten), up to a separator, that the record parser does not
    peel: taken off, some lines read as log lines that did not and none stops reading as one (or, on every line, the
    parser peels it from some lines and leaves it in the others' message). Never vLLM's own prefix (a process or rank
    tag, a level): the shortest such label is the collector's (or the indentation of an excerpt pasted inside a list
    or a quote)."""
    lines = [t for t in texts if t.strip()]
    indent = os.path.commonprefix(lines)
    indent = indent[: len(indent) - len(indent.lstrip())]
    if indent and len(lines) >= 2:
        return indent  # every line indented alike: pasted inside a list or a quote (a log's own lines are not)
    if len(lines) < 2:
        return None
    common = ""
    for k in range(1, LABEL_CHARS):
        head, n = Counter(t[:k] for t in lines).most_common(1)[0]
        if n * 10 < len(lines) * 9 or len(head) < k:
            break
        common = head
    group = [t for t in lines if t.startswith(common)]
    for end in (i + 1 for i, c in enumerate(common) if c in _PREFIX_END):
        label = common[:end]
        if LINE_OPENER_RE.search(label) or "pid=" in label:
            return None
        read = [(reads_as_line(t), reads_as_line(t[end:])) for t in group]
        if any(before and not after for before, after in read):
            continue
        if any(after > before for before, after in read) or (
            len(group) == len(lines) and _peeled_somewhere(group, end)
        ):
            return label
    return None


def _peeled_somewhere(group: list[str], end: int) -> bool:
    """The record parser takes the label off some of these lines (before a line start it knows) but leaves it in the
    message of others (a line whose vLLM prefix the paste lost): a wrapper, to take off everywhere."""
    peeled = [parse_record(t).message == parse_record(t[end:]).message for t in group]
    return any(peeled) and not all(peeled)


def unlabelled(lines: Iterable[LogLine]) -> Iterator[LogLine]:
    """The lines without the label a collector put in front of every one of them (see common_label)."""
    it = iter(lines)
    head = list(itertools.islice(it, PREFIX_SNIFF))
    label = common_label([line.text for line in head])
    for line in itertools.chain(head, it):
        if label is not None and line.text.startswith(label):
            line = LogLine(line.number, line.text[len(label) :], line.time, line.truncated)
        yield line


# How a line of its own begins, from its first character (a piece cut inside a process tag, `ank=0 pid=7) ERROR`,
# does not): what opens a vLLM line (a process or rank tag, a level, a traceback's start), a timestamp (kubectl,
# docker, journald), docker compose's or podman-compose's service column.
_LINE_HEAD = re.compile(
    LINE_OPENER + r"|\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d |" + COMPOSE_COLUMN
)
# A row of a fixed-width table (nvidia-smi's, a pasted report's): as wide as its neighbours by design, never a wrap.
_TABLE_ROW = re.compile(r"[ \t]*(?:\||\+[-=+])")
START_CHARS = 10  # how much of a line's beginning is compared with how the log's other lines begin


def _starts_a_line(text: str, starts: frozenset[str] = frozenset()) -> bool:
    """A piece that surely begins a line of its own: a line head (above), an indentation (a frame, its source line),
    the way this log's other lines begin, or nothing at all. Not one space or an exception's name: a wrap falls before a space or inside
    `torch.OutOfMemoryError` as often as anywhere, and a line exactly as wide as the window is rare."""
    if not text.strip() or text.startswith(("  ", "\t")) or text[:START_CHARS] in starts:
        return True
    return _LINE_HEAD.match(text) is not None


@dataclass(frozen=True)
class Wrap:
    """How a terminal wrapped a paste: its width, and how the paste's own lines begin."""

    width: int
    starts: frozenset[str]

    def holds(self, text: str) -> bool:
        """As wide as the window, or a whole number of windows: it may go on in the next piece."""
        n = len(text)
        return n >= self.width - 1 and n % self.width in (0, self.width - 1) and not _TABLE_ROW.match(text)


def find_wrap(texts: list[str]) -> Wrap | None:
    """The window that hard-wrapped these lines, or None. Wrapped when no line is wider than the widest ones, at
    least two different lines are that wide (or one narrower: a copy drops the space the wrap fell on), and most go
    on in a piece that starts no line: not the way the paste's other lines begin (lines of one template are as wide
    as each other, and each begins like the rest)."""
    # a progress bar's redraws joined by carriage returns are one long line however wide the window was
    lengths = [-1 if "\r" in t or _TABLE_ROW.match(t) else len(t) for t in texts]
    width = max(lengths, default=0)
    if width < MIN_WRAP_WIDTH or Counter(lengths)[width] < 2:
        return None
    wide = [i for i, n in enumerate(lengths) if n >= width - 1 and i + 1 < len(texts)]
    if len({texts[i] for i in wide}) < 2:
        return None
    after_wide = {i + 1 for i in wide}
    starts = frozenset(t[:START_CHARS] for i, t in enumerate(texts) if i not in after_wide and t.strip())
    goes_on = sum(not _starts_a_line(texts[i + 1], starts) for i in wide)
    return Wrap(width, starts) if goes_on * 2 > len(wide) else None


def unwrapped(lines: Iterable[LogLine]) -> Iterator[LogLine]:
    """The lines a terminal hard-wrapped, joined again: a piece as wide as the window goes on in the next piece
    unless that one starts a line of its own. Lines of a paste that was not wrapped pass through unchanged."""
    it = iter(lines)
    head = list(itertools.islice(it, WRAP_SNIFF))
    wrap = find_wrap([line.text for line in head])
    if wrap is None:
        yield from itertools.chain(head, it)
        return
    held: LogLine | None = None
    for line in itertools.chain(head, it):
        if held is not None:
            # a piece that ends right after vLLM's prefix goes on whatever the next one starts with
            if _starts_a_line(line.text, wrap.starts) and parse_record(held.text).message.strip():
                yield held
            else:
                line = LogLine(held.number, held.text + line.text, held.time, held.truncated or line.truncated)
            held = None
        if wrap.holds(line.text):
            held = line
        else:
            yield line
    if held is not None:
        yield held


def unpasted(lines: Iterable[LogLine]) -> Iterator[LogLine]:
    """A pasted log's lines as the log held them."""
    return unwrapped(unlabelled(unnumbered(lines)))
