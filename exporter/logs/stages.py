"""The stage machine: follows one vLLM server's log and tags every memory failure with its stage.

One log is one server. The machine tracks startups ("epochs": a restart begins a new one), the startup
stage from vLLM's own markers, traceback frames per process, and the last scheduler step dumped before a
runtime failure. A failure prints its exception many times (once per rank, once per traceback, again as
EngineDeadError); those lines form one *incident*, counted once, until a sign of health (a stats line, a
2xx access line, readiness) or a new startup closes it. Both `triage` and the daemon feed it line by
line, so an OOM is counted the moment its line arrives.
"""

from __future__ import annotations

import calendar
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from exporter.logs import patterns as P
from exporter.logs.formats import LogLine
from exporter.logs.records import Record, parse_record

EVIDENCE_CHARS = 240
MAX_FRAMES = 64
MAX_PROCESSES = 256
MAX_EPOCHS = 64
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b")


@dataclass(slots=True)
class Event:
    """Something the log says happened. `evidence` is the matched line's message, cut short."""

    line: int
    time: str | None
    kind: str
    stage: str | None = None
    phase: str | None = None
    evidence: str | None = None
    process: str | None = None
    cause: str | None = None
    repeats: int = 0
    ready_before: bool = False
    epoch: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"line": self.line, "time": self.time, "kind": self.kind}
        for key in ("stage", "phase", "cause", "process", "evidence"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.repeats:
            out["repeats"] = self.repeats
        return out


@dataclass(slots=True)
class Epoch:
    """One start of the server, from its first startup line to the next start."""

    index: int
    start_line: int
    start_time: str | None
    started: bool  # False for the part of a log written before any startup line
    stage: str = "loading_unknown"
    ready: bool = False
    crashed: bool = False
    kv_sized: bool = False
    events: int = 0
    facts: dict[str, Any] = field(default_factory=dict)
    startup: dict[str, float] = field(default_factory=dict)
    timeline: list[dict[str, Any]] = field(default_factory=list)

    @property
    def engine_stage(self) -> str:
        if self.crashed:
            return "crashed"
        if self.ready:
            return "ready"
        if not self.started:
            return "unknown"
        return self.stage

    def is_fresh(self) -> bool:
        return self.started and self.stage == "loading_unknown" and not (self.ready or self.crashed or self.events)


class LogAnalyzer:
    """Feed it a server's log lines in order; it returns the events each line adds."""

    def __init__(self, max_events: int = 500) -> None:
        self.max_events = max_events
        self.events: list[Event] = []
        self.counts: Counter[str] = Counter()
        self.oom_counts: Counter[tuple[str, str]] = Counter()
        self.first_oom: Event | None = None
        self.first_oom_epoch: Epoch | None = None
        self.epochs: list[Epoch] = [Epoch(0, 1, None, started=False)]
        self.lines = 0
        self._frames: dict[str | None, list[str]] = {}
        self._last_step: dict[int | None, str] = {}
        self._open: dict[str, Event] = {}
        self._saw_runtime = False

    @property
    def epoch(self) -> Epoch:
        return self.epochs[-1]

    # -- the per-line entry point -----------------------------------------------------------------

    def feed(self, line: LogLine) -> list[Event]:
        self.lines += 1
        text = line.text
        if "\r" in text:  # tqdm progress bars redraw with carriage returns: read each frame of the bar
            out: list[Event] = []
            for part in text.split("\r"):
                if part.strip():
                    out.extend(self._feed_text(LogLine(line.number, part, line.time, line.truncated)))
            return out
        return self._feed_text(line)

    def _feed_text(self, line: LogLine) -> list[Event]:
        rec = parse_record(line.text)
        msg = rec.message
        if not msg or msg.isspace():
            return []
        key = rec.process
        first = msg[0]
        if first == " " or first == "\t" or msg.startswith('File "'):
            if 'File "' in msg:
                m = P.FRAME.match(msg if first in " \t" else " " + msg)
                if m:
                    self._frame(key, m.group("path"), m.group("func"))
            return []
        if msg.startswith(P.TRACEBACK_START):
            self._frames_for(key).clear()
            return []
        # The bulk of a busy log, on fast paths: request logs (users' prompts: never analysed), access lines
        # and the periodic stats line.
        if msg.startswith("Received request"):
            return []
        if first.isdigit() and "HTTP/" in msg:
            if P.ACCESS_OK.search(msg):
                self._healthy()
            return []
        if "Avg prompt throughput" in msg:
            m = P.STATS_LINE.search(msg)
            if m:
                self._stats(m)
                return []
        if not P.ANY_HINT.search(msg):
            if _EXCEPTION_LINE.match(msg):
                self._frames.pop(key, None)
            return []
        when = line.time or rec.time
        new: list[Event] = []
        if P.OOM_HINT.search(msg):
            for pattern, hint, cause in P.OOM_PATTERNS:
                if pattern.match(msg):
                    new += self._oom(rec, line, when, hint, cause)
                    break
        if not new and P.EVENT_HINT.search(msg):
            for pattern, kind in P.EVENT_PATTERNS:
                if pattern.search(msg):
                    new += self._event(rec, line, when, kind)
                    break
        if P.MARKER_HINT.search(msg):
            for pattern, what in P.MARKERS:
                if pattern.search(msg):
                    new += self._marker(line, when, what)
                    break
        if P.FACT_HINT.search(msg):
            self._facts(msg)
        if "SchedulerOutput(" in msg and P.SCHEDULER_DUMP.match(msg):
            self._scheduler_dump(rec, msg)
        if _EXCEPTION_LINE.match(msg):  # the exception line closes its traceback
            self._frames.pop(key, None)
        return new

    # -- tracebacks and runtime steps ----------------------------------------------------------------

    def _frames_for(self, key: str | None) -> list[str]:
        frames = self._frames.get(key)
        if frames is None:
            if len(self._frames) >= MAX_PROCESSES:
                self._frames.pop(next(iter(self._frames)))
            frames = self._frames[key] = []
        return frames

    def _frame(self, key: str | None, path: str, func: str) -> None:
        tag = P.FRAME_FUNCS.get(func)
        if tag is None and any(p in path for p in P.COMPILE_PATHS):
            tag = "compile"
        if tag is not None:
            frames = self._frames_for(key)
            if len(frames) < MAX_FRAMES:
                frames.append(tag)

    def _scheduler_dump(self, rec: Record, msg: str) -> None:
        step = "decode"
        if P.NEW_REQUEST in msg:
            step = "prefill"
        else:
            m = P.SCHEDULED_TOKENS.search(msg)
            if m:
                counts = [int(v) for v in re.findall(r":\s*(\d+)", m.group("body"))]
                if counts and max(counts) > P.DECODE_MAX_TOKENS:
                    step = "prefill"
        self._last_step[rec.dp_rank] = step
        self._last_step[-1] = step  # the latest of any rank

    def _runtime_step(self, rec: Record) -> str:
        step = self._last_step.get(rec.dp_rank) if rec.dp_rank is not None else None
        return step or self._last_step.get(-1) or "runtime_unknown"

    # -- memory failures ----------------------------------------------------------------------------

    def _classify(self, rec: Record, hint: str | None) -> str:
        ep = self.epoch
        frames = self._frames.get(rec.process) or []
        tag = hint or (frames[-1] if frames else None)
        if tag == "sampler":  # the sampler's dummy run serves both memory profiling and warm-up
            if "kv_cache_alloc" in frames:
                tag = "kv_cache_alloc"
            elif ep.kv_sized or ep.stage in ("graph_capture", "warmup"):
                tag = "warmup"
            else:
                tag = "kv_cache_alloc"
        elif tag == "compile":
            tag = "graph_capture"
        if ep.ready:  # after readiness a failure is a runtime one, whatever the frames
            return self._runtime_step(rec)
        if tag == "runtime":
            if not ep.started:
                return self._runtime_step(rec)
            tag = None  # a step before readiness: trust the markers
        if tag is not None:
            return tag
        if not ep.started:
            return self._runtime_step(rec) if self._saw_runtime else "runtime_unknown"
        return ep.stage if ep.stage in P.LOADING_STAGES else "loading_unknown"

    def _oom(self, rec: Record, line: LogLine, when: str | None, hint: str | None, cause: str) -> list[Event]:
        stage = self._classify(rec, hint)
        ev = Event(line.number, when, "oom", stage, P.phase_of(stage), _evidence(rec.message), rec.process, cause)
        if cause in ("kv_cache_insufficient", "max_model_len_too_large"):
            self._kv_facts(rec.message)
        out = self._emit(ev)
        if out:
            self.oom_counts[(stage, ev.phase)] += 1
            if self.first_oom is None:
                self.first_oom = ev
                self.first_oom_epoch = self.epoch
            if ev.phase == "loading":
                self.epoch.crashed = True  # a failed startup never serves
        return out

    def _kv_facts(self, msg: str) -> None:
        """What vLLM's own KV-cache error states: what one request needs, what is there, what would fit."""
        facts = self.epoch.facts
        m = P.KV_NEEDED.search(msg)
        if m:
            facts["kv_cache_needed_gib"] = P.number(m.group(1))
            facts["kv_cache_memory_gib"] = P.number(m.group(2))
        m = P.KV_ESTIMATED_LEN.search(msg)
        if m:
            facts["estimated_max_model_len"] = int(m.group(1))
        m = P.KV_V0_TOKENS.search(msg)
        if m:
            facts.setdefault("kv_cache_tokens", int(m.group(1)))

    def _event(self, rec: Record, line: LogLine, when: str | None, kind: str) -> list[Event]:
        ev = Event(line.number, when, kind, evidence=_evidence(rec.message), process=rec.process)
        out = self._emit(ev)
        if kind == "engine_crash":
            self.epoch.crashed = True
        return out

    def _emit(self, ev: Event) -> list[Event]:
        ep = self.epoch
        if ev.kind in P.INCIDENT_KINDS:
            open_ev = self._open.get(ev.kind)
            if open_ev is not None:
                open_ev.repeats += 1
                return []
            self._open[ev.kind] = ev
        ev.ready_before = ep.ready
        ev.epoch = ep.index
        ep.events += 1
        self.counts[ev.kind] += 1
        if len(self.events) < self.max_events:
            self.events.append(ev)
        return [ev]

    def _healthy(self) -> None:
        self._saw_runtime = True
        if self._open:
            self._open.clear()
        ep = self.epoch
        if not ep.started and not ep.ready:
            ep.ready = True  # the log began while the server was already serving

    def _stats(self, m: re.Match[str]) -> None:
        self._healthy()
        facts = self.epoch.facts
        if m.group("kv") is not None:
            kv = float(m.group("kv")) / 100.0
            facts["kv_cache_usage_peak_ratio"] = max(kv, facts.get("kv_cache_usage_peak_ratio", 0.0))
        if m.group("hit") is not None:
            facts["prefix_cache_hit_rate_last_ratio"] = float(m.group("hit")) / 100.0
        if m.group("running") is not None:
            facts["running_peak_reqs"] = max(int(m.group("running")), facts.get("running_peak_reqs", 0))
        if m.group("waiting") is not None:
            facts["waiting_peak_reqs"] = max(int(m.group("waiting")), facts.get("waiting_peak_reqs", 0))

    # -- startup ----------------------------------------------------------------------------------

    def _new_epoch(self, line: LogLine, when: str | None) -> None:
        old = self.epoch
        if not old.started and not (old.events or old.facts or old.ready):
            self.epochs.pop()  # nothing happened before the first startup line
        self.epochs.append(Epoch(old.index + 1, line.number, when, started=True))
        if len(self.epochs) > MAX_EPOCHS:
            del self.epochs[0]
        self._open.clear()
        self._last_step.clear()
        self._frames.clear()
        self._note_stage("loading_unknown", line, when)

    def _note_stage(self, stage: str, line: LogLine, when: str | None) -> None:
        ep = self.epoch
        if ep.timeline and ep.timeline[-1]["stage"] == stage:
            return
        ep.stage = stage if stage in P.LOADING_STAGES else ep.stage
        ep.timeline.append({"stage": stage, "line": line.number, "time": when})

    def _marker(self, line: LogLine, when: str | None, what: str) -> list[Event]:
        ep = self.epoch
        if what == "server_start":
            if not ep.is_fresh():
                self._new_epoch(line, when)
            return []
        if what == "engine_start":
            if not ep.started or ep.ready or ep.crashed:
                self._new_epoch(line, when)
            return []
        if ep.ready:
            return []
        if what == "ready":
            ep.ready = True
            self._note_stage("ready", line, when)
            started = _parse_time(ep.start_time)
            ready_at = _parse_time(when)
            if started is not None and ready_at is not None and ready_at >= started:
                ep.startup["time_to_ready_s"] = round(ready_at - started, 3)
            self._open.clear()
            return self._emit(Event(line.number, when, "engine_ready"))
        if ep.crashed:
            return []
        stage = {
            "weight_loading": "weight_loading",
            "weights_loaded": "kv_cache_alloc",  # memory profiling (and torch.compile) follow the weights
            "compile": "graph_capture",
            "compiled": "kv_cache_alloc",
            "kv_cache_alloc": "kv_cache_alloc",
            "graph_capture": "graph_capture",
            "graph_captured": "warmup",
            "engine_initialized": "warmup",
        }[what]
        if what in ("graph_capture", "graph_captured"):
            ep.kv_sized = True  # capture runs on an allocated cache
        self._note_stage(stage, line, when)
        return []

    def _facts(self, msg: str) -> None:
        ep = self.epoch
        facts, startup = ep.facts, ep.startup
        m = P.VERSION.search(msg)
        if m:
            facts["vllm_version"] = m.group(1) or m.group(2)
        m = P.ENGINE_CONFIG.search(msg)
        if m:
            cfg = m.group("cfg")
            for name, pattern in P.CONFIG_FIELDS.items():
                f = pattern.search(cfg)
                if f:
                    facts.setdefault(name, _value(f.group(1)))
        for args, pair in ((P.NON_DEFAULT_ARGS, P.ARG_PAIR), (P.NAMESPACE_ARGS, P.NAMESPACE_PAIR)):
            m = args.search(msg)
            if m:
                for name, raw in pair.findall(m.group("body")):
                    if name in P.ARG_FACTS:
                        facts[name] = _value(raw.strip())
        for pattern, fields in _SIMPLE_FACTS:
            m = pattern.search(msg)
            if m is None:
                continue
            for group, where, key, convert, keep_first in fields:
                raw = m.group(group)
                if raw is None:
                    continue
                target = facts if where == "facts" else startup
                if keep_first and key in target:
                    continue
                target[key] = convert(raw)
                if key in _SIZES_THE_CACHE:
                    ep.kv_sized = True
        if "GiB" in msg:
            for split in (P.PROFILE_SPLIT, P.PROFILE_SPLIT_V0):
                for name, pattern in split.items():
                    f = pattern.search(msg)
                    if f:
                        facts[name] = P.number(f.group(1))


def _int(text: str) -> int:
    return int(P.number(text))


# (pattern, ((group, "facts"|"startup", key, convert, keep the first value), ...)): one line, one or more facts.
_SIMPLE_FACTS = [
    (P.START_LOAD, ((1, "facts", "model", str, True),)),
    (P.MODEL_LOADING, ((1, "facts", "model_loading_gib", P.number, False),
                       (2, "startup", "weight_loading_s", P.number, False))),
    (P.MODEL_LOADING_V0, ((1, "facts", "model_loading_gib", P.number, False),)),
    (P.LOADING_WEIGHTS, ((1, "startup", "weight_loading_s", P.number, True),)),
    (P.TORCH_COMPILE, ((1, "startup", "torch_compile_s", P.number, False),)),
    (P.PROFILE_TIME, ((1, "startup", "memory_profiling_s", P.number, False),)),
    (P.KV_MEMORY, ((1, "facts", "kv_cache_memory_gib", P.number, False),)),
    (P.KV_TOKENS, ((1, "facts", "kv_cache_tokens", _int, False),)),
    (P.MAX_CONCURRENCY, ((1, "facts", "max_model_len", _int, True), (2, "facts", "max_concurrency", P.number, False))),
    (P.GPU_BLOCKS, ((1, "facts", "gpu_blocks", int, False),)),
    (P.GRAPH_CAPTURE, ((1, "startup", "graph_capture_s", P.number, False),
                       (2, "facts", "graph_memory_gib", P.number, False))),
    (P.ENGINE_INIT, ((1, "startup", "engine_init_s", P.number, False),)),
]
_SIZES_THE_CACHE = frozenset({"kv_cache_tokens", "max_concurrency", "gpu_blocks"})  # the cache is sized by now


def _evidence(message: str) -> str:
    text = "".join(ch if ch.isprintable() else " " for ch in message[: EVIDENCE_CHARS + 1])
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


def _value(raw: str) -> Any:
    """A Python literal as vLLM prints it in its config lines: int, float, bool, None or a string."""
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    if raw in ("True", "False"):
        return raw == "True"
    if raw == "None":
        return None
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


_VLLM_TIME = re.compile(r"^(?:(\d{4})-)?(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")
_RFC3339 = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?")


def _parse_time(text: str | None) -> float | None:
    """Seconds for ordering and differences; vLLM's own stamps have no year, so one is assumed."""
    if not text:
        return None
    m = _RFC3339.match(text)
    if m and m.group(8):
        y, mo, d, h, mi, s, frac, tz = m.groups()
        base = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s), 0, 0, 0))
        if tz and tz != "Z":
            sign = 1 if tz[0] == "+" else -1
            base -= sign * (int(tz[1:3]) * 3600 + int(tz[4:6]) * 60)
        return base + (float("0." + frac) if frac else 0.0)
    m = _VLLM_TIME.match(text)
    if m:
        y, mo, d, h, mi, s, frac = m.groups()
        year = int(y) if y else 2001  # not a leap year: Feb 29 without a year is rare enough
        try:
            base = calendar.timegm((year, int(mo), int(d), int(h), int(mi), int(s), 0, 0, 0))
        except (ValueError, OverflowError):
            return None
        return base + (float("0." + frac) if frac else 0.0)
    return None


__all__ = ["Event", "Epoch", "LogAnalyzer"]


def snapshot(a: LogAnalyzer) -> dict[str, Any]:
    """What the daemon persists beside a log offset, so a restart neither loses nor repeats an event."""
    ep = a.epoch
    return {
        "counts": dict(a.counts),
        "oom_counts": [[s, p, n] for (s, p), n in a.oom_counts.items()],
        "lines": a.lines,
        "epoch": {"index": ep.index, "start_line": ep.start_line, "start_time": ep.start_time, "started": ep.started,
                  "stage": ep.stage, "ready": ep.ready, "crashed": ep.crashed, "kv_sized": ep.kv_sized,
                  "events": ep.events, "facts": ep.facts, "startup": ep.startup},
        "open": sorted(a._open),
        "last_step": [[k, v] for k, v in a._last_step.items()],
        "frames": [[k, v] for k, v in a._frames.items()],
        "saw_runtime": a._saw_runtime,
    }


def restore(data: dict[str, Any], max_events: int = 500) -> LogAnalyzer:
    """The inverse of `snapshot`; raises KeyError/TypeError/ValueError on a damaged state."""
    a = LogAnalyzer(max_events)
    a.counts = Counter({str(k): int(v) for k, v in data["counts"].items()})
    a.oom_counts = Counter({(str(s), str(p)): int(n) for s, p, n in data["oom_counts"]})
    a.lines = int(data["lines"])
    e = data["epoch"]
    ep = Epoch(int(e["index"]), int(e["start_line"]), e["start_time"], bool(e["started"]), str(e["stage"]),
               bool(e["ready"]), crashed=bool(e["crashed"]), kv_sized=bool(e["kv_sized"]), events=int(e["events"]),
               facts=dict(e["facts"]), startup={str(k): float(v) for k, v in e["startup"].items()})
    a.epochs = [ep]
    for kind in data["open"]:
        a._open[str(kind)] = Event(0, None, str(kind))
    a._last_step = {(None if k is None else int(k)): str(v) for k, v in data["last_step"]}
    a._frames = {(None if k is None else str(k)): [str(x) for x in v] for k, v in data["frames"]}
    a._saw_runtime = bool(data["saw_runtime"])
    return a
