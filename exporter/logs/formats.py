"""Physical log lines -> vLLM lines: plain files, Kubernetes CRI and docker json-file wrapping.

A container runtime wraps each line the program wrote; a long line may be split into partial pieces
(CRI's `P` tag, docker's pieces without a trailing newline) that must be joined before the vLLM text can
be read. Lines are capped so a runaway line (a base64 blob, a binary file by mistake) costs bounded
memory, and bytes are decoded leniently: a log with broken UTF-8 is still a log.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import BinaryIO, Iterator

FORMATS = ("plain", "cri", "docker")
DEFAULT_MAX_LINE_BYTES = 64 * 1024

CRI_RECORD = re.compile(
    rb"^(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) "
    rb"(?P<stream>stdout|stderr) (?P<tag>[FP])(?: (?P<msg>.*))?$",
    re.S,
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(slots=True)
class LogLine:
    """One line as vLLM wrote it, unwrapped from its container format."""

    number: int  # 1-based physical line number where this line starts
    text: str
    time: str | None = None  # the runtime's RFC 3339 timestamp, when the format has one
    truncated: bool = False


def detect_format(sample: bytes) -> str:
    """Guess the wrapping from the first non-empty line of a file."""
    for raw in sample.splitlines():
        raw = raw.strip()
        if not raw:
            continue
        if CRI_RECORD.match(raw):
            return "cri"
        if raw.startswith(b"{"):
            try:
                obj = json.loads(raw)
            except RecursionError:  # a record nested thousands deep says nothing of the format: look further
                continue
            except ValueError:
                return "plain"
            if isinstance(obj, dict) and isinstance(obj.get("log"), str):
                return "docker"
        return "plain"
    return "plain"


def clean_text(raw: bytes | str) -> str:
    """Decode leniently and drop ANSI colour codes and trailing line ends."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    text = text.rstrip("\r\n")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    return text


class LineDecoder:
    """Unwraps physical lines of one format, joining partial pieces; keeps state between feeds.

    The daemon's tailer and `triage` both feed it, so a log reads the same in both.
    """

    def __init__(self, fmt: str, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown log format {fmt!r}; expected one of {', '.join(FORMATS)}")
        self.format = fmt
        self.max_line_bytes = max_line_bytes
        self._pending: list[bytes] = []
        self._pending_len = 0
        self._pending_start = 0
        self._pending_time: str | None = None
        self._pending_truncated = False
        self.undecodable = 0  # records of the format that could not be read (kept as plain text, counted)

    def feed(self, raw: bytes, number: int, truncated: bool = False) -> LogLine | None:
        """Take one physical line (without or with its newline); return a whole line when one ends."""
        if self.format == "plain":
            return self._finish_one(raw, number, None, truncated)
        if self.format == "cri":
            m = CRI_RECORD.match(raw.rstrip(b"\r\n"))
            if m is None:  # not wrapped after all (a line written by hand): keep it as it is
                return self._finish_one(raw, number, None, truncated)
            time = m.group("time").decode("ascii")
            msg = m.group("msg") or b""
            if m.group("tag") == b"P":
                self._add_piece(msg, number, time, truncated)
                return None
            return self._finish_piece(msg, number, time, truncated)
        return self._feed_docker(raw, number, truncated)

    @property
    def pending(self) -> bool:
        """A partial line is waiting for its end."""
        return bool(self._pending)

    def flush(self) -> LogLine | None:
        """Return a partial line still waiting for its end (the file ended mid-line)."""
        if not self._pending:
            return None
        return self._take_pending()

    # -- internals ---------------------------------------------------------------------------

    def _feed_docker(self, raw: bytes, number: int, truncated: bool) -> LogLine | None:
        try:
            obj = json.loads(raw)
            piece = obj["log"]
            time = obj.get("time")
            if not isinstance(piece, str):
                raise TypeError
        except (ValueError, KeyError, TypeError, RecursionError):
            # A garbled or cut record (or one nested thousands deep, which json refuses with RecursionError):
            # keep what can be read rather than lose the line, and count it unless it was cut on purpose.
            if not truncated:
                self.undecodable += 1
            return self._finish_one(raw, number, None, True)
        data = piece.encode("utf-8", errors="replace")
        time = time if isinstance(time, str) else None
        if data.endswith(b"\n"):
            return self._finish_piece(data, number, time, truncated)
        self._add_piece(data, number, time, truncated)
        return None

    def _add_piece(self, piece: bytes, number: int, time: str | None, truncated: bool) -> None:
        if not self._pending:
            self._pending_start = number
            self._pending_time = time
        room = self.max_line_bytes - self._pending_len
        if len(piece) > room:
            piece = piece[: max(room, 0)]
            truncated = True
        if piece:
            self._pending.append(piece)
            self._pending_len += len(piece)
        self._pending_truncated |= truncated

    def _finish_piece(self, piece: bytes, number: int, time: str | None, truncated: bool) -> LogLine:
        if not self._pending:
            return self._finish_one(piece, number, time, truncated)
        self._add_piece(piece, number, time, truncated)
        return self._take_pending()

    def _take_pending(self) -> LogLine:
        raw = b"".join(self._pending)
        line = self._finish_one(raw, self._pending_start, self._pending_time, self._pending_truncated)
        self._pending = []
        self._pending_len = 0
        self._pending_truncated = False
        return line

    def _finish_one(self, raw: bytes, number: int, time: str | None, truncated: bool) -> LogLine:
        if len(raw) > self.max_line_bytes:
            raw = raw[: self.max_line_bytes]
            truncated = True
        return LogLine(number, clean_text(raw), time, truncated)


def physical_lines(stream: BinaryIO, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[tuple[bytes, bool]]:
    """Yield (line, truncated) from a binary stream, never holding more than the cap of one line.

    The rest of an over-long line is read and dropped in chunks, so a multi-gigabyte line without a
    newline costs no more memory than a normal one.
    """
    while True:
        raw = stream.readline(max_line_bytes + 1)
        if not raw:
            return
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            while True:
                rest = stream.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
            yield raw[:max_line_bytes], True
        else:
            yield raw, False


def read_lines(
    stream: BinaryIO, fmt: str = "auto", max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> tuple[str, Iterator[LogLine]]:
    """Detect the format of a whole stream (unless given) and iterate its unwrapped lines."""
    lines = physical_lines(stream, max_line_bytes)
    first: list[tuple[bytes, bool]] = []
    if fmt == "auto":
        for item in lines:
            first.append(item)
            if item[0].strip():
                break
        fmt = detect_format(b"".join(raw for raw, _ in first))
    decoder = LineDecoder(fmt, max_line_bytes)

    def gen() -> Iterator[LogLine]:
        number = 0
        for source in (first, lines):
            for raw, truncated in source:
                number += 1
                line = decoder.feed(raw, number, truncated)
                if line is not None:
                    yield line
        tail = decoder.flush()
        if tail is not None:
            yield tail

    return fmt, gen()
