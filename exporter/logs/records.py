"""vLLM's line shape: the process tag of V1 multi-process logs, then level, time and source.

`(EngineCore_DP1 pid=78) ERROR 08-16 12:00:01 [core.py:396] <message>`: every part but the message is
optional, because tracebacks written straight to stderr carry only the process tag, and uvicorn's access
lines have a shape of their own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One anchored match reads the whole prefix: the process tag, then vLLM's `LEVEL MM-DD HH:MM:SS [file.py:N]`
# (older releases: `file.py:N]` without the bracket) or uvicorn's `LEVEL:`.
_PREFIX = re.compile(
    r"(?:\((?P<proc>[A-Za-z][^()\n]{0,63}?) pid=(?P<pid>\d+)\)\s?)?"
    r"(?:(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)"
    r"(?:\s+(?P<time>(?:\d{4}-)?\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\s+\[?(?P<src>[^\]\s]{1,120}:\d+)\]\s?"
    r"|:\s+))?"
)
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
    m = _PREFIX.match(text)
    process, _pid, level, time, source = m.groups()
    dp_rank = None
    if process is not None and "DP" in process:
        d = _DP.search(process)
        if d:
            dp_rank = int(d.group(1))
    return Record(process, dp_rank, level, time, source, text[m.end():])
