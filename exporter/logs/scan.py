"""Candidate lines of a whole read block, found in one pass: what lets the tailer skip the lines that cannot matter.

Most lines of a busy vLLM log (access lines, request logs, the scheduler's chatter) change nothing in the stage
machine once it has seen the server serving and no failure is open (`LogAnalyzer.quiescent`). Feeding them one
by one through Python costs ~10 µs a line, about what Debian's mtail spends on the whole job. Instead, one
Aho-Corasick pass in compiled code (the `ahocorasick_rs` package) finds every place where a word the analyzer
reacts to stands in the raw block (`stages.TRIGGER_WORDS`, the literals `prefilter.needed_literals` reads out of
`stages.TRIGGER_PATTERNS`, the `name(` of a frame function); the tailer feeds those lines, and the lines around
them while the analyzer is not quiescent, and only counts the rest. Without the package the tailer feeds every
line, as before: same answers, slower.

The words are searched in the raw bytes. A word in a line's message is in its raw line too: a plain line's
message is the end of its text, a CRI record's message is its text after the runtime's prefix, unescaped; the
lines whose text the tailer changes before the analyzer reads it (ANSI colour codes, a trailing `\\r`, a NUL hole,
a line cut at `max_line_bytes`) are candidates themselves. Docker's json-file escapes what it wraps, so it keeps
the line-by-line path.
"""

from __future__ import annotations

import re

from exporter.logs import patterns as P
from exporter.logs import stages
from exporter.logs.prefilter import needed_literals
from exporter.logs.records import VLLM_PREFIX as _VLLM_PREFIX  # parse_record's first match
from exporter.logs.records import parse_record

try:
    import ahocorasick_rs
except ImportError:  # an install without it: the tailer reads every line
    ahocorasick_rs = None  # type: ignore[assignment]

# What the tailer itself acts on before the analyzer: colour codes, the NUL hole a copytruncate leaves, and CRI's
# partial records (`P`), which must be joined with what follows.
TAILER_WORDS = ("\x1b", "\x00", "stdout P", "stderr P")


def trigger_literals() -> tuple[str, ...] | None:
    """Every literal whose absence from a line (with no OOM_HINT word start at its end) lets it be skipped, or None
    when some pattern the analyzer tries has no literal every match of it contains."""
    words: set[str] = set(stages.TRIGGER_WORDS) | set(TAILER_WORDS)
    for pattern in stages.TRIGGER_PATTERNS:
        found = needed_literals(pattern)
        if found is None:
            return None
        words.update(found)
    words.update(name + "(" for name in stages.TRIGGER_CALLS)
    if stages.OOM_WORD_STARTS is None:
        return None
    words.update(start + "\n" for start in stages.OOM_WORD_STARTS)  # a line ending in the start of an OOM word
    return tuple(sorted(w for w in words if w))


# Words the tailer or `LogAnalyzer.feed` read in the whole line, vLLM's prefix included (the rest are read in the
# message only): a line holding one of them is fed, wherever it stands.
WHOLE_LINE_WORDS = frozenset(TAILER_WORDS) | {"\r"} | set(needed_literals(P.HTML_ENTITY) or ())


def open_frame_literals() -> tuple[str, ...] | None:
    """The literals of stages.OPEN_FRAME_PATTERNS: what else counts while a traceback is open."""
    words: set[str] = set()
    for pattern in stages.OPEN_FRAME_PATTERNS:
        found = needed_literals(pattern)
        if found is None:
            return None
        words.update(found)
    return tuple(sorted(words))


# vLLM V1's engine process tag at a line's start, `(EngineCore_DP0 pid=7) `, holds the trigger word `Engine`; the
# tag is always read as the line's prefix (records.VLLM_PREFIX, else records._peel's process tag), never as its
# message, so the word is hidden from the search: same length, so offsets hold (see BlockScanner.hits).
_ENGINE_TAG = re.compile(rb"\n\(Engine(?=[^()\n]{0,75}? pid=\d+\))")
_ENGINE_HIDDEN = b"\n(ENGINE"


class BlockScanner:
    """Finds, in a block of whole lines, where a trigger literal stands."""

    def __init__(self) -> None:
        self.literals = trigger_literals()
        self._ac = None
        self._open_ac = None  # searched only when a block has a traceback open: a second pass, four words
        self.whole_line: frozenset[int] = frozenset()
        self._hide_tags = False
        if ahocorasick_rs is not None and self.literals is not None:
            # A full DFA: twice the speed of the default (contiguous NFA) on 360 words, ~1 MB of tables
            self._ac = ahocorasick_rs.BytesAhoCorasick(
                [w.encode("utf-8") for w in self.literals], implementation=ahocorasick_rs.Implementation.DFA
            )
            self.whole_line = frozenset(i for i, w in enumerate(self.literals) if w in WHOLE_LINE_WORDS)
            # Hiding `Engine` loses only matches that overlap it; they lie inside the tag unless a word reaches
            # past it: holds the line start before it (`\n(`) or its end (`pid=7)`: a digit, then `)`), which none
            # does today; then the tag is left as it is.
            self._hide_tags = not any(re.search(r"\n\(|\d\)", w) for w in self.literals)
            words = open_frame_literals()
            if words:
                self._open_ac = ahocorasick_rs.BytesAhoCorasick([w.encode("utf-8") for w in words])

    def open_frame_hits(self, block: bytes) -> list[int] | None:
        """Start offsets of the open-traceback words, or None when they cannot be told (then such a block is fed)."""
        if self._open_ac is None:
            return None
        return [start for _, start, _ in self._open_ac.find_matches_as_indexes(block)]

    @property
    def available(self) -> bool:
        return self._ac is not None

    def hits(self, block: bytes) -> list[tuple[int, int, int]]:
        """(literal index, start, end) of non-overlapping trigger matches, in order: every line holding a trigger
        has one, and a match never spans two lines (only a line's end, `...\n`, holds a newline). Left out:
        `Engine` in an engine process's tag at a line's start, which the analyzer never reads (a tenth of a busy
        V1 log's lines hold nothing else)."""
        assert self._ac is not None
        if self._hide_tags:
            block = _ENGINE_TAG.sub(_ENGINE_HIDDEN, block)  # the block itself when there is none
        return self._ac.find_matches_as_indexes(block)


_HEADS: dict[bytes, tuple[int, str | None]] = {}


def head_ascii(block: bytes, pos: int, nl: int) -> tuple[int, str | None, bool]:
    """(where its message starts, process, vLLM-shaped or wrapped) of the ASCII line block[pos:nl] as
    `records.parse_record` reads it. vLLM's own shape ends at the first `] ` (`(Proc pid=N) LEVEL MM-DD HH:MM:SS
    [file.py:N] `): that prefix, repeated by every line of the same second and process, is matched once with
    parse_record's own pattern and remembered; any other shape takes parse_record itself."""
    k = block.find(b"] ", pos, nl)
    if k > pos:
        key = block[pos : k + 2]
        head = _HEADS.get(key)
        if head is None:
            if len(_HEADS) >= 4096:
                _HEADS.clear()
            text = key.decode("ascii")
            m = _VLLM_PREFIX.match(text)
            head = _HEADS[key] = (len(text), parse_record(text).process) if m and m.end() == len(text) else (-1, None)
        if head[0] > 0 and not block.startswith((b"[rank", b"("), k + 2):
            return k + 2, head[1], True
    rec = parse_record(block[pos:nl].decode("ascii"))
    return nl - len(rec.message), rec.process, rec.vllm_shaped or rec.wrapped


_QUIET_B = tuple(w.encode("ascii") for w in stages.QUIET_MESSAGES)
_TRACEBACK_B = P.TRACEBACK_START.encode("ascii")
BARE_TRACEBACK = _TRACEBACK_B + b":"  # a traceback header alone on its line: its frames follow


def quiet_message_ascii(block: bytes, start: int, nl: int) -> bool:
    """The message at block[start:nl] (an ASCII line) is one the analyzer returns on unread
    (stages.QUIET_MESSAGES)."""
    return block.startswith(_QUIET_B, start) and block.find(_TRACEBACK_B, start, nl) < 0


_SCANNER: BlockScanner | None = None


def scanner() -> BlockScanner:
    """One automaton per process, built on first use (~ms)."""
    global _SCANNER
    if _SCANNER is None:
        _SCANNER = BlockScanner()
    return _SCANNER
