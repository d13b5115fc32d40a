"""vLLM's line shape: the process tag of V1 multi-process logs, then level, time and source.

`(EngineCore_DP1 pid=78) ERROR 08-16 12:00:01 [core.py:396] <message>`: every part but the message is
optional, because tracebacks written straight to stderr carry only the process tag, and uvicorn's access
lines have a shape of their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PROC = re.compile(r"\((?P<proc>[A-Za-z][^()\n]{0,63}?) pid=(?P<pid>\d+)\)\s?")
_PREFIX = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
    r"(?P<time>(?:\d{4}-)?\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\s+"
    r"\[?(?P<src>[^\]\s]{1,120}:\d+)\]\s?"
)
_UVICORN = re.compile(r"(?P<level>INFO|WARNING|ERROR):\s+")
_DP = re.compile(r"DP(\d+)")


@dataclass(slots=True)
class Record:
    """A vLLM log line split into its parts."""

    process: str | None  # e.g. "EngineCore_DP0", "APIServer", "VllmWorker TP0"
    dp_rank: int | None  # from the process tag, when it names one
    level: str | None
    time: str | None  # vLLM's own timestamp text
    source: str | None  # "core.py:396"
    message: str


def parse_record(text: str) -> Record:
    """Split one unwrapped line. Never fails: an unknown shape is all message."""
    pos = 0
    process = None
    dp_rank = None
    if text.startswith("("):
        m = _PROC.match(text)
        if m:
            process = m.group("proc")
            d = _DP.search(process)
            if d:
                dp_rank = int(d.group(1))
            pos = m.end()
    level = time = source = None
    m = _PREFIX.match(text, pos)
    if m:
        level = m.group("level")
        time = m.group("time")
        source = m.group("src")
        pos = m.end()
    else:
        m = _UVICORN.match(text, pos)
        if m:
            level = m.group("level")
            pos = m.end()
    return Record(process, dp_rank, level, time, source, text[pos:])
