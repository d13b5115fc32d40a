"""vLLM's line shape, under whatever the line was wrapped in on its way to us.

`(EngineCore_DP1 pid=78) ERROR 08-16 12:00:01 [core.py:396] <message>` is vLLM's own shape; every part but
the message is optional, because tracebacks written straight to stderr carry only the process tag, and
uvicorn's access lines have a shape of their own. Logs that people actually have add more in front: Ray's
`(RayWorkerWrapper pid=5, ip=10.0.0.2)`, torch's `[rank0]:`, nested process tags, docker compose's
`vllm-1  | `, kubectl's or journald's timestamps, a `> ` quote marker or a pastebin line number, a Rust
launcher's `tracing` prefix (Dynamo's `DEBUG dynamo_run::subprocess: `). Those
wrappers are peeled first, in any order, so the message underneath reads the same everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)"
# vLLM's `LEVEL MM-DD HH:MM:SS [file.py:N]` (older releases: `file.py:N]` without the bracket, some a year or
# milliseconds) or uvicorn's `LEVEL:`.
_LEVEL_PREFIX = re.compile(
    r"(?P<level>" + _LEVEL + r")"
    r"(?:\s+(?P<time>(?:\d{4}-)?\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\s+\[?(?P<src>[^\]\s]{1,120}:\d+)\]\s?"
    r"|:\s+)"
)
_PROCESS = re.compile(r"\(?(?:(?P<proc>[A-Za-z][^()\n]{0,80}?) )?pid=(?P<pid>\d+)(?:, ip=[^)\s]{1,64})?\)\s?")
_RANK = re.compile(r"\[rank(?P<rank>\d{1,5})\]:\s?")
# docker compose's service column (`vllm-1  | `); podman-compose brackets the name (`[vllm]          | `)
COMPOSE_COLUMN = r"(?:[A-Za-z0-9][\w.-]{0,62}|\[[A-Za-z0-9][\w.-]{0,62}\])[ \t]*\| "
# Wrappers that say nothing we keep: each is tried at the start of what is left, until none matches.
_WRAPPERS = re.compile(
    r">+ ?"  # a quote marker of a pasted reply
    r"|(?:\^\[|\x1b)?\[[0-9;]{1,12}m ?"  # a colour code whose escape was pasted as ^[ or lost
    # Dynamo's format for the vLLM it runs, `TIME LEVEL module.function: ` (the level kept as another logger's)
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?Z?[ \t]+(?P<dynamo>"
    + _LEVEL
    + r")[ \t]+[A-Za-z_][\w<>]*(?:\.[\w<>]+)+: "
    r"|[ \t]*\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?\s+"  # kubectl, docker, CI times
    r"|[ \t]*\| "  # a CI runner's or a table's bare column
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.-]+ [\w./-]+(?:\[\d+\])?: "  # journald / syslog
    r"|[\w.-]{1,64} [\w./@-]{1,64}\[\d+\]: "  # journald's host and unit after an ISO time (`-o short-iso`)
    r"|\[pod/[\w.-]{1,253}/[\w.-]{1,63}\] "  # `kubectl logs --prefix`
    # a service's name in brackets that a launcher or supervisor put in front (`[mineru] `), before a vLLM line start
    r"|\[[A-Za-z][\w.-]{0,62}\] (?=(?:\^\[|\x1b)?\[[0-9;]{1,12}m|\(\w[^()\n]{0,80}? pid=\d|" + _LEVEL + r"\s|Traceback"
    r"|\s*File \"|[\w.]*(?:Error|Exception)\b)"
    r"|\[\d{1,5},\d{1,5}\]<std(?:out|err)>: ?"  # `mpirun --tag-output`
    # a Rust `tracing` logger relaying a child's lines, its level and target (`DEBUG dynamo_run::subprocess: `)
    r"|(?:TRACE|DEBUG|INFO|WARN|ERROR)[ \t]+[A-Za-z_]\w*(?:::\w+)+: "
    # another library's logger in vLLM's processes: loguru's `LEVEL    | module:function:line - ` (tt-metal's
    # Python side), tt-metal's C++ `critical |          Always | ` (level, then the log type padded to the left)
    r"|(?P<foreign>(?i:TRACE|DEBUG|INFO|SUCCESS|WARNING|ERROR|CRITICAL|FATAL))[ \t]*\|[ \t]+(?:[A-Z][A-Za-z]{1,15}[ \t]*\| )?"
    r"(?:[A-Za-z_][\w.]{0,120}:[\w<>]{1,80}:\d{1,6} - )?"
    + "|"
    + COMPOSE_COLUMN
    + r"|\[[\w./-]{1,120}\.py:\d+\] "  # vLLM's source tag, its level and time cut off by the paste
    r"|[ \t]{0,4}\d{1,5}(?:[ \t]*[|:][ \t]?|[ \t]+)"  # a pastebin line number ...
    r"(?=" + _LEVEL + r"\b|\(|\[rank|Traceback|\s*File \"|[\w.]*(?:Error|Exception)\b)"  # ... before a line start
)
# The shape of nearly every line of a busy log, read in one match: `(Proc pid=N) LEVEL MM-DD HH:MM:SS [src] `.
VLLM_PREFIX = re.compile(r"(?:\((?P<proc>[A-Za-z][^()\n]{0,80}?) pid=(?P<pid>\d+)\) ?)?" + _LEVEL_PREFIX.pattern)
_DP = re.compile(r"DP(\d+)")
_KEYS: dict[tuple[str | None, str], tuple[str, int | None]] = {}
_MAX_PEELS = 8


@dataclass(slots=True)
class Record:
    """A vLLM log line split into its parts."""

    process: str | None  # e.g. "EngineCore_DP0 pid=7", "VllmWorker TP0 pid=9", or "rank0" from torch's tag
    dp_rank: int | None  # from the process tag, when it names one
    level: str | None
    time: str | None  # vLLM's own timestamp text
    source: str | None  # "core.py:396"
    message: str
    wrapped: bool = False  # a tag or wrapper stood in front: the line is a line start, not a continuation
    foreign_level: str | None = None  # the level another library's logger wrote (loguru's, tt-metal's), upper case

    @property
    def vllm_shaped(self) -> bool:
        """The line carries vLLM's own prefix (a level or a process tag), not just free text."""
        return self.level is not None or self.process is not None


def _process(proc: str | None, pid: str) -> tuple[str, int | None]:
    """The innermost process tag names the process (Ray gives every worker the same name, so the pid stays),
    with the DP rank it names; cached, since a log has few processes and many lines."""
    known = _KEYS.get((proc, pid))
    if known is None:
        if len(_KEYS) > 4096:
            _KEYS.clear()
        key = f"{proc} pid={pid}" if proc else f"pid={pid}"
        known = _KEYS[(proc, pid)] = (key, _dp_rank(key))
    return known


def _dp_rank(process: str | None) -> int | None:
    if process is not None and "DP" in process:
        d = _DP.search(process)
        if d:
            return int(d.group(1))
    return None


def parse_record(text: str) -> Record:
    """Split one unwrapped line. Never fails: an unknown shape is all message."""
    m = VLLM_PREFIX.match(text)
    if m is not None:  # vLLM's own shape, nothing around it: one match
        end = m.end()
        if not text.startswith(("[rank", "("), end):
            proc, pid, level, time, src = m.groups()
            if pid is None:
                return Record(None, None, level, time, src, text[end:], False)
            process, dp_rank = _process(proc, pid)
            return Record(process, dp_rank, level, time, src, text[end:], True)
    return _peel(text)


def _peel(text: str) -> Record:
    """The careful path: wrappers and tags in any order, then vLLM's prefix."""
    pos = 0
    process: str | None = None
    rank: str | None = None
    foreign: str | None = None
    peeled = False
    tagged = "pid=" in text[:400]
    for _ in range(_MAX_PEELS):
        m = _PROCESS.match(text, pos) if tagged else None
        if m is not None:
            process = _process(m.group("proc"), m.group("pid"))[0]
        else:
            m = _RANK.match(text, pos)
            if m is not None:
                rank = "rank" + m.group("rank")
            else:
                m = _WRAPPERS.match(text, pos)
                if m is None or m.end() == pos:
                    break
                if m.group("foreign") or m.group("dynamo"):
                    foreign = (m.group("foreign") or m.group("dynamo")).upper()
        pos = m.end()
        peeled = True
    level = time = source = None
    m = _LEVEL_PREFIX.match(text, pos)
    if m is not None:
        level, time, source = m.group("level"), m.group("time"), m.group("src")
        pos = m.end()
        # A process tag or rank may follow the level on some launchers' lines.
        for _ in range(2):
            t = (_PROCESS.match(text, pos) if tagged else None) or _RANK.match(text, pos)
            if t is None:
                break
            if t.re is _PROCESS:
                process = _process(t.group("proc"), t.group("pid"))[0]
            else:
                rank = "rank" + t.group("rank")
            pos = t.end()
    if process is None:
        process = rank
    return Record(process, _dp_rank(process), level, time, source, text[pos:], peeled, foreign)
