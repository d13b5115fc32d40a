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
import functools
import html
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

from exporter.logs import patterns as P
from exporter.logs.formats import LogLine
from exporter.logs.prefilter import alternatives
from exporter.logs.records import Record, parse_record

EVIDENCE_CHARS = 240
MAX_FRAMES = 64
MAX_PROCESSES = 256
MAX_EPOCHS = 64
RELAY_LINES = 200  # how far below a traceback an error relaying it may stand and still use its frames
ALLOCATOR_RETRY_LINES = 20  # how soon after the caching allocator's OOM warning an error says its retry failed too
# A memory failure with no startup line, frame or serving sign around it (a bare excerpt): the stage we say. A failed
# startup leaves its lines or frames. In the real corpus's dev split (tests/fixtures/real/, 511 excerpts at the time of
# writing), 46 failures were placed by nothing but a guess, 27 of them startup failures. PyTorch's own report splits
# them: no memory in CUDA-graph pools (P.NO_GRAPH_POOLS) in 18, 17 of them at startup, so those read as loading_unknown
# ("allocator"); of the 28 others (graph pools in use, or no such report), 18 had hit while serving: this default.
UNDECIDED_STAGE = "runtime_unknown"
# What a failure nothing placed was read from: the prior, or the allocator's report (P.NO_GRAPH_POOLS). Any later
# evidence (the engine's words, serving going on, a traceback's frames) overrides either.
GUESSES = ("none", "allocator")
_LOADING_FRAME_TAGS = ("weight_loading", "graph_capture", "kv_cache_alloc", "warmup", "sampler", "compile")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b")
# What `_feed_text` reacts to beyond counting, for the block scanner (exporter/logs/scan.py), which skips lines holding
# none of it while `LogAnalyzer.quiescent()`: the words of its fast paths, the patterns it tries (their literals),
# and the function names a code line under a frame is read for (`name(`). A new check in `_feed_text` needs its
# word here; tests/test_scan.py compares scanning with feeding every line on every fixture and real log.
TRIGGER_WORDS = ("\r", "File ", "Avg prompt throughput", P.TRACEBACK_START, P.TT_PREFILL, *P.OFFLINE_PROGRESS)
TRIGGER_PATTERNS = (
    P.ANY_HINT.regex,
    P.HTML_ENTITY,
    P.CUT_OOM,
    P.MODEL_INPUT_DUMP,
    P.CAPTURE_CODE,
    P.RPC_CODE,
    P.OFFLINE_CALL,
    P.ENGINE_HEADER,
    P.LAUNCH_COMMAND,
    P.SCHEDULER_DUMP,
)
TRIGGER_CALLS = (*P.FRAME_FUNCS, *P.STEP_FUNCS, *P.SERVING_PREFILL_FUNCS, *P.ENGINE_CONSTRUCTORS)
# What else counts while a traceback's frames are open: the exception line that closes them.
OPEN_FRAME_PATTERNS = (_EXCEPTION_LINE,)
# Messages `_feed_text` returns on, whatever words they hold, unless they hold TRACEBACK_START: users' prompts.
QUIET_MESSAGES = ("Received request", "Generated response")
# Proper starts of every OOM_HINT word: a wrap tail ending in one may join the next line into a failure.
_OOM_WORDS = alternatives(P.OOM_HINT)
OOM_WORD_STARTS = None if _OOM_WORDS is None else tuple({w[:i] for w in _OOM_WORDS for i in range(1, len(w))})
# A traceback header alone on its line, which `_feed_text` only opens frames for (no OOM_HINT word in it).
_BARE_TRACEBACK = None if P.OOM_HINT.search(P.TRACEBACK_START + ":") else P.TRACEBACK_START + ":"
# LogAnalyzer.quick_frames: the effects of traceback bodies seen, and the vLLM prefix its scratch analyzer reads them under.
_BODIES: dict[str, tuple[tuple[str, ...], bool] | tuple[()]] = {}
_BODY_CACHE_ENTRIES, _BODY_CACHE_CHARS = 256, 16_384  # at most ~4 MB held
_SHAPED = "(Scratch pid=1) ERROR 01-01 00:00:00 [x.py:1] "
_SHAPED_KEY = "Scratch pid=1"


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
    stage_evidence: str | None = None  # what decided the stage: message, frame, scheduler_dump, readiness, marker, ...
    confidence: str | None = None  # high | medium | low

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"line": self.line, "time": self.time, "kind": self.kind}
        for key in ("stage", "phase", "stage_evidence", "confidence", "cause", "process", "evidence"):
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

    def __init__(self, max_events: int = 500, undecided_stage: str = UNDECIDED_STAGE) -> None:
        self.max_events = max_events
        self.undecided_stage = undecided_stage  # the prior for a failure nothing places (a setting, not state)
        self.events: list[Event] = []
        self.counts: Counter[str] = Counter()
        self.oom_counts: Counter[tuple[str, str]] = Counter()
        self.first_oom: Event | None = None
        self.first_oom_epoch: Epoch | None = None
        self.epochs: list[Epoch] = [Epoch(0, 1, None, started=False)]
        self.lines = 0
        self.line_errors = 0  # lines the analyzer could not read (counted, skipped)
        self.recovered: list[Event] = []
        self._frames: dict[str | None, list[str]] = {}
        self._recent_frames: tuple[int, list[str]] = (0, [])  # the last traceback's frames, for relayed errors
        self._tail: str = ""  # the end of the last long line, for lines a terminal wrapped
        self._partial_frame: str | None = None  # a frame line wrapped before its function name
        self._kv_negative: Event | None = None
        self._kv_negative_followed = False  # a line with words in it came after it
        self._allocator_oom: tuple[int, Event] | None = None  # (line count, event) of ALLOCATOR_OOM's warning
        self._pending: Event | None = None  # an OOM whose stage nothing around it decided yet (see _count_oom)
        self._cut: Event | None = None  # a last line cut inside an OOM phrase: counted only if nothing follows it
        self._last_frame_key: str | None = None
        self._pending_since = 0
        self._last_step: dict[int | None, str] = {}
        self._step_said_by = "scheduler_dump"  # what said the latest of them (see _note_step)
        self._open: dict[str, Event] = {}
        self._saw_runtime = False
        self._cold_tail: str | None = None  # the last `_tail` found unable to complete a wrapped failure
        self._header: tuple[int, bool] | None = None  # (line, the engine never started) of ENGINE_HEADER's words

    @property
    def epoch(self) -> Epoch:
        return self.epochs[-1]

    @property
    def pending(self) -> Event | None:
        """A failure not counted yet: one whose stage waits for what follows, a line cut at the log's end, or the
        negative KV-cache budget the log ends on."""
        return self._pending or self._cut or self._kv_negative_at_end()

    @pending.setter
    def pending(self, ev: Event | None) -> None:
        self._pending = ev

    # -- hooks for the block scanner (exporter/logs/scan.py) ---------------------------------------

    def quiescent(self) -> int:
        """2 when a line holding none of TRIGGER_WORDS, TRIGGER_PATTERNS' literals or `name(` of TRIGGER_CALLS, and not
        ending in the start of an OOM_HINT word, would change nothing here but `lines`: no failure pending or cut,
        no frame half read, no incident open, no step a line said began, serving seen (an access line's `_healthy` is a
        no-op), and a wrap tail that cannot complete a failure; 1 when so but a traceback's frames are open, so that a
        line holding a literal of OPEN_FRAME_PATTERNS counts too (an exception line closes them, `_end_traceback`); 0
        when any line may count. Read `_feed_text` with these in hand to check."""
        ep = self.epochs[-1]
        if (
            self._pending is not None
            or self._cut is not None
            or self._allocator_oom is not None
            or self._partial_frame is not None
            or self._open
            or (self._step_said_by == "message" and self._last_step)  # a serving line would end that step
            or not self._saw_runtime
            or not (ep.ready or ep.crashed)
            or OOM_WORD_STARTS is None
        ):
            return 0
        tail = self._tail
        if tail is not self._cold_tail:
            if P.OOM_HINT.search(tail[-160:]) or tail.endswith(OOM_WORD_STARTS):
                return 0
            self._cold_tail = tail
        return 1 if self._frames else 2

    def skip(self, lines: int) -> None:
        """`lines` lines that `quiescent` said change nothing: counted, not read."""
        self.lines += lines
        if self._kv_negative is not None:
            self._kv_negative_followed = True

    def quick(self, key: str | None, msg: str) -> bool:
        """What `_feed_text` does with the message of a record vLLM-shaped or wrapped (process `key`, no `&` entity
        or `\\r` in the line) while `quiescent()`, for three shapes a failing or busy server repeats: a frame line,
        a bare traceback header, a stats line; the line is not counted (the block scanner counts it with the lines
        it skips). False, with nothing done, for any other message: then it is fed."""
        first = msg[:1]
        try:
            if first == " " or first == "\t":
                if 'File "' not in msg:
                    return False
                self._frame_line(key, msg)
            elif msg == _BARE_TRACEBACK:
                self._frames_for(key).clear()
            elif "Avg prompt throughput" in msg and not (
                (first.isdigit() and "HTTP/" in msg)
                or msg.startswith(("File ", "Received request"))
                or P.TRACEBACK_START in msg
            ):
                m = P.STATS_LINE.search(msg)
                if m is None:
                    return False
                self._stats(m)
            else:
                return False
        except (ValueError, OverflowError, RecursionError, TypeError, KeyError, IndexError):
            self.line_errors += 1  # as `feed` counts it
        return True

    def quick_frames(self, key: str | None, body: str) -> bool:
        """What `_feed_text` does with the indented lines right after a bare traceback header that `quick` read (a
        traceback's frames and their code: the messages of vLLM-shaped records of process `key`, joined by `\n`)
        while `quiescent()`; the lines are not counted. Their effect (the frames' tags) is worked out once per
        distinct body, by feeding it to a scratch analyzer: a failing server repeats its tracebacks. False, with
        nothing done, when the body leaves a frame line half read (then its lines go their usual way)."""
        effect = _BODIES.get(body)
        if effect is None:
            scratch = LogAnalyzer()
            try:
                for msg in body.split("\n"):
                    scratch._feed_text(LogLine(0, _SHAPED + msg))
                found = scratch._frames.get(_SHAPED_KEY, [])
                effect = (tuple(found), scratch._last_frame_key is not None) if scratch._partial_frame is None else ()
            except (ValueError, OverflowError, RecursionError, TypeError, KeyError, IndexError):
                effect = ()
            if len(body) <= _BODY_CACHE_CHARS:  # bounded: at most _BODY_CACHE_ENTRIES bodies of a traceback's size
                if len(_BODIES) >= _BODY_CACHE_ENTRIES:
                    _BODIES.clear()
                _BODIES[body] = effect
        if not effect:
            return False
        tags, touched = effect
        if touched:  # frames[key] was just cleared by the header: the scratch's list, from empty, is the answer
            self._frames_for(key).extend(tags)
            self._last_frame_key = key
        return True

    # -- the per-line entry point -----------------------------------------------------------------

    def feed(self, line: LogLine) -> list[Event]:
        """Never raises: a line the analyzer cannot read is counted in `line_errors` and skipped."""
        self.lines += 1
        text = line.text
        if self._cut is not None and text.strip():
            self._cut = None  # a line follows: the one that looked cut was whole, whatever it said
        if self._pending is not None and self.lines - self._pending_since > RELAY_LINES:
            self.flush()
        if self._allocator_oom is not None and self.lines - self._allocator_oom[0] > ALLOCATOR_RETRY_LINES:
            self._allocator_recovered()
        try:
            if "&" in text and P.HTML_ENTITY.search(text):  # copied out of a web page
                text = html.unescape(text)
                line = LogLine(line.number, text, line.time, line.truncated)
            if "\r" in text:  # tqdm progress bars redraw with carriage returns: read each frame of the bar
                out: list[Event] = []
                for part in text.split("\r"):
                    if part.strip():
                        out.extend(self._feed_text(LogLine(line.number, part, line.time, line.truncated)))
                return out
            return self._feed_text(line)
        except (ValueError, OverflowError, RecursionError, TypeError, KeyError, IndexError):
            self.line_errors += 1
            return []

    def _feed_text(self, line: LogLine) -> list[Event]:  # noqa: C901  the stage machine's one ordered dispatch
        rec = parse_record(line.text)
        msg = rec.message
        if not msg or msg.isspace():
            return []
        # (armed further down this method: set here, it stood on an earlier line)
        if self._kv_negative is not None and not P.KV_BUDGET_ECHO.search(msg):
            if _EXCEPTION_LINE.match(msg) and not self._kv_negative_followed:
                self._kv_negative_raised()  # what vLLM raises right after a budget below zero
            self._kv_negative_followed = True
        key = rec.process
        first = msg[0]
        if first == " " or first == "\t" or msg.startswith('File "'):
            if first != "F" and not (rec.wrapped or rec.vllm_shaped):
                # The whole excerpt may be indented (a markdown code block, a list, a quoted mail): a line that
                # starts like a line of its own under the indentation is read as one.
                text = line.text.lstrip()
                if len(line.text) - len(text) <= 8 and P.LINE_START.match(text):
                    return self._feed_text(LogLine(line.number, text, line.time, line.truncated))
            if ("memory failed" in msg or "EL0004" in msg or "for memory" in msg) and P.CANN_OOM.search(msg):
                body = msg.lstrip()  # a line of the device runtime's message, not a traceback's source line
                return self._memory_failure(rec, line, body, body)
            if 'File "' in msg:
                self._frame_line(key, msg if first in " \t" else " " + msg)
            elif "graph" in msg and P.CAPTURE_CODE.search(msg):  # the source line of the frame above
                self._tag(key, "graph_capture")
            elif "_r" in msg and (rpc := P.RPC_CODE.search(msg)) is not None:
                tag = P.FRAME_FUNCS.get(rpc.group("method"))
                if tag is not None:
                    self._tag(key, tag)
            elif "(" in msg:
                self._code_calls(key, msg)
            return []
        if self._partial_frame is not None:
            partial, self._partial_frame = self._partial_frame, None
            if not rec.wrapped and not rec.vllm_shaped:  # the rest of a frame line a terminal wrapped
                self._frame_line(key, partial + msg)
                return []
        if first == "F" and msg.startswith("File ") and (ipy := P.IPYTHON_FRAME.match(msg)) is not None:
            self._frame(key, ipy.group("path"), ipy.group("func"))
            return []
        traceback_start = P.TRACEBACK_START in msg
        if traceback_start:  # also `EngineCore hit an exception: Traceback (most recent call last):`
            if self._allocator_oom is not None:  # an error right after the allocator's warning: its retry failed
                self._count_oom(self._allocator_oom[1])
            self._frames_for(key).clear()
            if 'File "' in msg:
                self._inline_frames(key, msg)
            if not P.OOM_HINT.search(msg):
                return []
        # The bulk of a busy log, on fast paths: request logs (users' prompts: never analysed), access lines
        # and the periodic stats line.
        if msg.startswith(QUIET_MESSAGES):  # a prompt, a model's answer (--enable-log-outputs)
            if self._pending is not None:  # the API server took a request after a failure nothing placed: serving
                self._keep_provisional(serving="low")
            return []
        if first.isdigit() and "HTTP/" in msg:
            if P.ENGINE_ANSWERED_OK.search(msg):
                self._healthy()
            else:
                # an error answer, or an answer the API server gives without its engine (/metrics, /v1/models:
                # the daemon's own scrapes among them): the server was serving, the incident is not over
                self._serving()
            return []
        if "Avg prompt throughput" in msg:
            m = P.STATS_LINE.search(msg)
            if m:
                self._stats(m)
                return []
        if not traceback_start and 'File "' in msg:
            self._inline_frames(key, msg)
        if self._pending is not None:
            self._engine_words(msg, rec.source)
        elif "EngineCore" in msg and (header := P.ENGINE_HEADER.search(msg)) is not None:
            self._header = (self.lines, header.group("never") is not None)
        if rec.level is None and "vllm" in msg and P.LAUNCH_COMMAND.search(msg):  # not a line vLLM logged
            return self._marker(line, line.time or rec.time, "server_start")
        if " out" in msg[-12:] and P.CUT_OOM.match(msg):
            self._hold_cut(rec, line)
        if first in "MP":  # shapes read at the message start, cheaper here than in the hints below
            if msg.startswith(P.OFFLINE_PROGRESS):
                # a bar drawn after a failure nothing placed: tqdm redraws it as the failure unwinds (close on
                # exit), so generation was under way when it hit
                if self._pending is not None and self._pending.stage_evidence in GUESSES:
                    self._keep_provisional(serving="low")
                return self._marker(line, line.time or rec.time, "ready")
            if P.MODEL_INPUT_DUMP.match(msg):
                self._model_input_dump(rec, msg)
                return []
            if msg.startswith(P.TT_PREFILL):
                self._note_step(rec, "prefill", "message")
                return []
        tail, self._tail = self._tail, (msg if len(line.text) >= 60 else "")
        if not P.ANY_HINT.search(msg):
            if tail and not (rec.wrapped or rec.vllm_shaped) and P.OOM_HINT.search(joined := tail[-160:] + msg):
                return self._memory_failure(rec, line, joined, msg)  # a failure split by a terminal's wrap
            self._end_traceback(key, msg)
            return []
        when = line.time or rec.time
        new: list[Event] = []
        if rec.source is not None and rec.source.startswith(P.SERVING_SOURCES):
            self._serving()
        if P.OOM_HINT.search(msg):
            new += self._memory_failure(rec, line, msg, msg)
        if not new and P.EVENT_HINT.search(msg):
            for pattern, kind in P.EVENT_PATTERNS:
                if pattern.search(msg):
                    if kind == "engine_crash" and not (rec.vllm_shaped or _EXCEPTION_LINE.match(msg)):
                        break  # the name quoted in some other program's line: not vLLM's own crash
                    new += self._event(rec, line, when, kind)
                    break
        if P.MARKER_HINT.search(msg):
            for pattern, what in P.MARKERS:
                if pattern.search(msg):
                    new += self._marker(line, when, what)
                    break
        if P.FACT_HINT.search(msg):
            self._facts(msg)
            new += self._check_kv_negative(rec, line, when)
        if "NPU function error" in msg and (npu := P.NPU_FUNCTION_ERROR.search(msg)) is not None:
            self._frame(key, "torch_npu", npu.group("func"))
        if "SchedulerOutput(" in msg and P.SCHEDULER_DUMP.match(msg):
            self._scheduler_dump(rec, msg)
        self._end_traceback(key, msg)
        return new

    def _memory_failure(self, rec: Record, line: LogLine, text: str, msg: str) -> list[Event]:
        """A memory failure at the start of the message, or relayed inside it; never one quoted from users' text."""
        when = line.time or rec.time
        for pattern, hint, cause in P.OOM_PATTERNS:
            if pattern.match(text):
                return self._oom(rec, line, when, hint, cause, msg)
        m = P.OOM_SIGNATURE.search(text)
        if m is None:
            if "failed with OOM" in text and (a := P.ALLOCATOR_OOM.search(text)) is not None:
                if not P.USER_TEXT.search(text, 0, a.start()):
                    self._hold_allocator_oom(rec, line, msg)
            return []
        if P.USER_TEXT.search(text, 0, m.start()):
            return []
        level = rec.level or rec.foreign_level
        if level is None and " - " in text[: m.start()]:
            foreign = P.FOREIGN_LEVEL.search(text, 0, m.start())
            level = foreign.group(1) if foreign is not None else None
        if level in ("INFO", "DEBUG", "WARNING", "WARN", "TRACE", "SUCCESS"):
            if P.RECOVERED.search(text):
                return self._emit(
                    Event(
                        line.number,
                        when,
                        "oom_recovered",
                        evidence=_evidence(msg),
                        process=rec.process,
                        cause="device_oom",
                    )
                )
            if P.ADVISORY.search(text, 0, m.start()):
                return []  # advice that mentions the words, not a failure
        named = next((hint_cause for group, hint_cause in P.SIGNATURE_CAUSES.items() if m.group(group)), None)
        if named is None:
            named = ("sampler", "sampler_warmup_oom") if "warming up sampler" in text else (None, "device_oom")
        hint, cause = named
        return self._oom(rec, line, when, hint, cause, msg)

    def _engine_words(self, msg: str, source: str | None, ev: Event | None = None) -> None:
        """vLLM says in its own words whether the engine had been built (P.ENGINE_NEVER_STARTED / _WAS_RUNNING): the
        phase of a failure nothing else placed (the pending one, or `ev` relayed in the same line). It stays
        pending: the traceback logged under these words may name the step."""
        ev = ev or self._pending
        if ev is None or ev.stage_evidence not in GUESSES:
            return
        if P.ENGINE_NEVER_STARTED.search(msg):
            ev.stage, ev.phase = "loading_unknown", "loading"
        elif P.ENGINE_WAS_RUNNING.search(msg) or (
            source is not None and source.startswith(P.V0_ENGINE_SOURCE) and P.V0_ENGINE_LOOP_REPR.match(msg)
        ):
            ev.stage, ev.phase = self._step_of(ev), "runtime"
        elif (method := P.METHOD_WORDS.search(msg)) is not None and (
            stage := _method_stage(method.group(0), self.epoch)
        ):
            ev.stage, ev.phase = stage, P.phase_of(stage)
        else:
            return
        ev.stage_evidence = "message"

    def _hold_cut(self, rec: Record, line: LogLine) -> None:
        """`RuntimeError: CUDA out of`: a paste cut the excerpt's last line inside the failure. Classified now, with
        the frames above it, and counted only if the log ends here (`flush`)."""
        stage, why, confidence = self._classify(rec, None)
        self._cut = Event(
            line.number,
            line.time or rec.time,
            "oom",
            stage,
            P.phase_of(stage),
            _evidence(rec.message),
            rec.process,
            "device_oom",
            stage_evidence=why,
            confidence=confidence,
        )

    def _hold_allocator_oom(self, rec: Record, line: LogLine, msg: str) -> None:
        """PyTorch's caching allocator found no device memory and will free its cache and try again (ALLOCATOR_OOM):
        the failure, classified now, if an error follows soon (a traceback, the engine dying); a recovered memory
        event if serving goes on, the lines pass or the log ends first."""
        if self._allocator_oom is None:
            stage, why, confidence = self._classify(rec, None)
            ev = Event(line.number, line.time or rec.time, "oom", stage, P.phase_of(stage), _evidence(msg), rec.process)
            ev.cause, ev.stage_evidence, ev.confidence = "device_oom", why, confidence
            self._allocator_oom = (self.lines, ev)

    def _allocator_recovered(self) -> None:
        held, self._allocator_oom = self._allocator_oom, None
        if held is not None:
            ev = held[1]
            self._emit(
                Event(ev.line, ev.time, "oom_recovered", evidence=ev.evidence, process=ev.process, cause=ev.cause)
            )

    def _code_calls(self, key: str | None, msg: str) -> None:
        """A source line under a frame: the function it calls is the next frame, which the excerpt may cut off."""
        if P.OFFLINE_CALL.search(msg, 0, 400):
            self._tag(key, "runtime")
            return
        for m in P.CODE_CALL.finditer(msg, 0, 400):
            func = m.group("func")
            if func in P.GENERIC_STEP_FUNCS:
                continue
            if func in P.FRAME_FUNCS or func in P.STEP_FUNCS or func in P.SERVING_PREFILL_FUNCS:
                self._frame(key, "", func)
                return
            if func in P.ENGINE_CONSTRUCTORS:
                self._tag(key, "startup")
                return

    def _inline_frames(self, key: str | None, msg: str) -> None:
        """Frames run together on one line (a paste that lost the traceback's newlines)."""
        for m in P.INLINE_FRAME.finditer(msg, 0, 20000):
            self._frame(key, m.group("path"), m.group("func"))

    def _end_traceback(self, key: str | None, msg: str) -> None:
        """The exception line closes its traceback; its frames stay at hand for errors that relay it, and may
        decide a failure logged above them."""
        if _EXCEPTION_LINE.match(msg):
            frames = self._frames.pop(key, None)
            if frames:
                self._recent_frames = (self.lines, frames)
                if self._pending is not None:
                    self._decide_by_frames(frames)

    def _check_kv_negative(self, rec: Record, line: LogLine, when: str | None) -> list[Event]:
        """`Available KV cache memory: -3.2 GiB` (vllm-ascend: `Available memory: 0, total memory: N`): the cache cannot
        be allocated; the failure follows."""
        if P.NO_GPU_BLOCKS.match(rec.message) and not self.epoch.ready and "oom" not in self._open:
            # V0 sized the cache at zero blocks: the worker raises "No available memory for the cache blocks" next
            ev = Event(line.number, when, "oom", "kv_cache_alloc", "loading", _evidence(rec.message), rec.process)
            ev.cause, ev.stage_evidence, ev.confidence = "kv_cache_insufficient", "message", "high"
            return self._count_oom(ev)
        ep = self.epoch
        if self._kv_negative is not None and (
            ep.kv_sized or ep.startup.get("engine_init_s") is not None or ep.startup.get("graph_capture_s") is not None
        ):
            # the cache was sized after all (a model without attention layers needs none: vLLM checks the memory only
            # for a KV-cache spec, vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory): no failure to come
            self._kv_negative = None
        kv = ep.facts.get("kv_cache_memory_gib")
        negative = isinstance(kv, (int, float)) and kv <= 0
        if (
            self._kv_negative is None
            and negative
            and (
                "KV cache memory" in rec.message
                or "for KV Cache" in rec.message
                or P.KV_MEMORY_BYTES.match(rec.message)
            )
        ):
            self._kv_negative = Event(
                line.number,
                when,
                "oom",
                evidence=_evidence(rec.message),
                process=rec.process,
                cause="kv_cache_negative",
            )
            self._kv_negative_followed = False
        return []

    def _kv_negative_below_zero(self) -> Event | None:
        neg = self._kv_negative
        kv = self.epoch.facts.get("kv_cache_memory_gib")
        if neg is None or self.epoch.ready or not isinstance(kv, (int, float)):
            return None
        # below zero, or printed as "-0.0" (vLLM >= 0.20 rounds to two places): zero itself is left armed
        return neg if kv < 0 or (kv == 0 and "memory: -" in (neg.evidence or "")) else None

    def _kv_negative_at_end(self) -> Event | None:
        return None if self._kv_negative_followed else self._kv_negative_below_zero()

    def _kv_negative_raised(self) -> None:
        """An exception straight after a KV-cache budget below zero (nothing between but other workers' budgets):
        vLLM's refusal of it (check_enough_kv_cache_memory; forks word it their own way)."""
        if "oom" not in self._open:
            self._count_kv_negative(self._kv_negative_below_zero(), "high")

    def _kv_negative_last(self) -> None:
        """The log ends (or went quiet) on a negative KV-cache budget: vLLM raises next for any model with a KV-cache
        spec (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory, `available_memory <= 0`), so the failure
        is there though its error is not yet, or was cut off by the paste. Zero is left armed: vllm-ascend logs it
        for models that need no cache."""
        self._count_kv_negative(self._kv_negative_at_end(), "medium")

    def _count_kv_negative(self, neg: Event | None, confidence: str) -> list[Event]:
        """The armed budget line counted as the KV-cache allocation failure it led to."""
        if neg is None:
            return []
        self._kv_negative = None
        neg.stage, neg.phase, neg.stage_evidence, neg.confidence = "kv_cache_alloc", "loading", "message", confidence
        return self._count_oom(neg)

    # -- tracebacks and runtime steps ----------------------------------------------------------------

    def _frames_for(self, key: str | None) -> list[str]:
        frames = self._frames.get(key)
        if frames is None:
            if len(self._frames) >= MAX_PROCESSES:
                self._frames.pop(next(iter(self._frames)))
            frames = self._frames[key] = []
        return frames

    def _frame_line(self, key: str | None, text: str) -> None:
        m = P.FRAME.match(text)
        if m is None:
            if ", line " not in text or ", in " not in text:
                self._partial_frame = text  # the function name may be on the next line
            return
        self._frame(key, m.group("path"), m.group("func"))

    def _frame(self, key: str | None, path: str, func: str) -> None:
        if func in P.SERVING_PREFILL_FUNCS:  # a real prompt being computed: serving, and a prefill step
            frames = self._frames_for(key)
            if len(frames) < MAX_FRAMES - 1:
                frames += ["runtime", "prefill"]
            self._last_frame_key = key
            return
        ruled = _file_rule(path, func)
        if ruled is not None:  # what this function says in this file, whatever its name says elsewhere
            tag = ruled[0]
        else:
            tag = _ascend_mask_tag(func, path, self._frames.get(key)) if func in _ASCEND_MASK_FUNCS else None
            if tag is None:
                tag = _name_tag(path, func)
        if tag is not None:
            self._tag(key, tag)

    def _tag(self, key: str | None, tag: str) -> None:
        self._last_frame_key = key
        frames = self._frames_for(key)
        if len(frames) < MAX_FRAMES:
            frames.append(tag)

    def _scheduler_dump(self, rec: Record, msg: str) -> None:
        """V1's SchedulerOutput of the failing step: a new request, or a cached one scheduled for more tokens than a
        decode step takes, is a prefill; no new request and every cached one at a decode step's count is a decode.
        A dump cut before its counts (or inside them, all small so far) says neither."""
        step = "unknown"
        if P.NEW_REQUEST in msg:
            step = "prefill"
        else:
            m = P.SCHEDULED_TOKENS.search(msg)
            if m:
                counts = [int(v) for v in re.findall(r":\s*(\d+)", m.group("body"))]
                if counts and max(counts) > P.DECODE_MAX_TOKENS:
                    step = "prefill"
                elif counts and m.group("end"):
                    step = "decode"
        self._note_step(rec, step)
        # dumped only by a step of EngineCore's busy loop (vllm/v1/engine/core.py execute_model_with_error_logging),
        # never by the startup's dummy runs: the engine was serving
        self._serving()

    def _model_input_dump(self, rec: Record, msg: str) -> None:
        """V0's model input of the failing step: any prefill in it makes it a prefill step; none, with decode
        tokens, a decode step."""
        prefills = P.V0_NUM_PREFILLS.search(msg)
        decodes = P.V0_NUM_DECODE_TOKENS.search(msg)
        step = "unknown"
        if prefills is not None and int(prefills.group(1)) > 0:
            step = "prefill"
        elif prefills is not None and decodes is not None and int(decodes.group(1)) > 0:
            step = "decode"
        self._note_step(rec, step)

    def _note_step(self, rec: Record, step: str, said_by: str = "scheduler_dump") -> None:
        """The step under way, from a dump of it (`scheduler_dump`) or a line saying it started (`message`)."""
        if rec.dp_rank not in self._last_step and len(self._last_step) > MAX_PROCESSES:
            self._last_step.clear()  # a log naming more DP ranks than any deployment has: keep memory bounded
        self._last_step[rec.dp_rank] = step
        self._last_step[-1] = step  # the latest of any rank
        self._step_said_by = said_by

    def _runtime_step(self, dp_rank: int | None, frames: list[str]) -> tuple[str, str, str]:
        """Prefill or decode: the scheduler's dump of the failing step, else frames on one path only."""
        step = self._last_step.get(dp_rank) if dp_rank is not None else None
        if step is None:
            step = self._last_step.get(-1)
        said_by = self._step_said_by
        if step in ("prefill", "decode") and said_by == "scheduler_dump":
            return step, said_by, "high"
        for tag in reversed(frames):
            if tag in ("prefill", "decode"):
                return tag, "frame", "medium"
        if step in ("prefill", "decode"):  # a line that said the step began: below a frame of the failing step
            return step, said_by, "medium"
        return "runtime_unknown", "", ""

    def _step_of(self, ev: Event) -> str:
        """Prefill or decode for a failure found to be a runtime one after it was logged: the scheduler's dump of
        the step, else the step frames of its traceback (still open, or just closed)."""
        return self._runtime_step(None, self._current_frames(ev.process))[0]

    def _current_frames(self, process: str | None) -> list[str]:
        """The frames of the process's traceback under way, else those of one that just closed."""
        frames = self._frames.get(process)
        if frames:
            return frames
        at, recent = self._recent_frames
        return recent if recent and self.lines - at <= RELAY_LINES else []

    def _classify(self, rec: Record, hint: str | None) -> tuple[str, str, str]:
        """(stage, what decided it, confidence). Readiness first, then the message, frames, markers."""
        ep = self.epoch
        frames = self._current_frames(rec.process)
        if ep.ready:  # after readiness a failure is a runtime one, whatever the frames
            stage, why, conf = self._runtime_step(rec.dp_rank, frames)
            return stage, why or "readiness", conf or "medium"
        if hint == "sampler":  # the sampler's dummy run serves memory profiling too, before the cache is sized
            stage, conf = _sampler_stage(frames, ep)
            if stage == "kv_cache_alloc":
                return stage, "frame" if conf == "high" else "marker", conf
            return stage, "message", conf
        if hint is not None:
            return hint, "message", "high"
        decided = _stage_from_frames(frames, ep)
        named_tags = _named_methods(rec.message) if decided is None else []
        if decided is None:
            named = _stage_from_frames(named_tags, ep)
            decided = (named[0], "message", named[2]) if named else _stage_from_words(rec.message)
        if decided is not None:
            return decided
        if "runtime" in frames or "runtime" in named_tags or (not ep.started and self._saw_runtime):
            step, why, conf = self._runtime_step(rec.dp_rank, frames)
            if not why:
                why = "frame" if "runtime" in frames else "message" if "runtime" in named_tags else "serving"
            return step, why, conf or "medium"
        if P.NOTHING_ALLOCATED.search(rec.message):  # the process had nothing on the device yet
            return ("weight_loading" if "module_move" in frames else "loading_unknown"), "message", "medium"
        if "sampler_code" in frames:  # the sampler with nothing saying serving: its dummy run at startup
            return _sampler_stage(frames, ep)[0], "frame", "medium"
        if "startup" in frames:  # the engine being built: a startup step the frames do not name
            return "loading_unknown", "frame", "medium"
        if ep.started:
            if ep.stage in P.LOADING_STAGES and ep.stage != "loading_unknown":
                return ep.stage, "marker", "medium"
            return "loading_unknown", "marker", "low"
        return self._by_header(rec, frames)

    def _by_header(self, rec: Record, frames: list[str]) -> tuple[str, str, str]:
        """What the engine core wrote above the traceback (ENGINE_HEADER), else the prior: not evidence, and what
        follows may still decide (_engine_words)."""
        header = self._header
        if header is not None and self.lines - header[0] <= RELAY_LINES:
            if header[1]:
                return "loading_unknown", "message", "medium"
            step, _why, conf = self._runtime_step(rec.dp_rank, frames)
            return step, "message", conf or "medium"
        msg = rec.message
        if "Error code: 5" in msg and P.SERVER_ANSWER.search(msg):  # the server answered a request with it
            step, _why, conf = self._runtime_step(rec.dp_rank, frames)
            return step, "message", conf or "medium"
        if P.NO_GRAPH_POOLS.search(msg) and not P.NO_POOL_CLAUSE_EVER.search(msg):
            return "loading_unknown", "allocator", "low"  # no CUDA graph yet: a startup, unless the engine ran eagerly
        return self.undecided_stage, "none", "low"

    def _oom(
        self, rec: Record, line: LogLine, when: str | None, hint: str | None, cause: str, msg: str | None = None
    ) -> list[Event]:
        stage, why, confidence = self._classify(rec, hint)
        ev = Event(
            line.number,
            when,
            "oom",
            stage,
            P.phase_of(stage),
            _evidence(msg or rec.message),
            rec.process,
            cause,
            stage_evidence=why,
            confidence=confidence,
        )
        if why in GUESSES:
            self._engine_words(msg or rec.message, rec.source, ev)
        if cause in ("kv_cache_insufficient", "max_model_len_too_large", "mamba_cache_insufficient"):
            self._kv_facts(msg or rec.message)
        if self._pending is not None and why in ("message", "frame"):
            # the error relaying an undecided failure names its step (`CUDA out of memory occurred when warming
            # up sampler`, re-raised from torch's error by _dummy_sampler_run): the same failure, now placed
            self._decide_pending(stage, why, confidence)
        return self._count_oom(ev)

    def _count_oom(self, ev: Event) -> list[Event]:
        self._allocator_oom = None  # the failure the allocator's warning foretold, or that warning itself
        out = self._emit(ev)
        if out:
            if ev.confidence == "low" or ev.stage_evidence == "marker":
                # Little above the failure says when it hit (a marker only names the last step announced, and
                # V1 sizes, allocates and warms up after one line); what follows often does (a traceback logged
                # after its message, an error relaying it in words, serving going on, a restart). Counted once
                # decided, or at the next quiet moment with what was known when it was logged.
                self._pending, self._pending_since = ev, self.lines
                return out
            self._tally(ev)
        return out

    def _tally(self, ev: Event) -> None:
        assert ev.stage is not None and ev.phase is not None
        self.oom_counts[(ev.stage, ev.phase)] += 1
        if self.first_oom is None:
            self.first_oom = ev
            self.first_oom_epoch = self.epoch
        if ev.phase == "loading" and ev.stage_evidence not in GUESSES:
            self.epoch.crashed = True  # a failed startup never serves (a guess is not enough to say it failed)

    def _decide_pending(self, stage: str, why: str, confidence: str) -> None:
        ev, self._pending = self._pending, None
        if ev is not None:
            ev.stage, ev.phase, ev.stage_evidence, ev.confidence = stage, P.phase_of(stage), why, confidence
            self._tally(ev)

    def flush(self) -> None:
        """The log went quiet (or ended): a failure still undecided takes what the traceback under way says
        (an excerpt may stop before its last line), else the stage said when nothing decides."""
        cut, self._cut = self._cut, None
        if cut is not None:  # nothing followed the cut line: it was the failure, cut by the paste
            self._count_oom(cut)
        self._kv_negative_last()
        self._allocator_recovered()
        if self._pending is None:
            return
        frames = self._frames.get(self._last_frame_key) or []
        if not self._decide_by_frames(frames):
            self._keep_provisional()

    def _keep_provisional(self, serving: str | None = None) -> None:
        """Count the pending failure as it was classified when logged; `serving` (a confidence): serving went on
        after it, which says runtime when nothing at all had said when it hit."""
        ev = self._pending
        if ev is None:
            return
        if serving is not None and ev.stage_evidence in GUESSES:
            self._decide_pending(self._step_of(ev), "serving", serving)
        else:
            assert ev.stage is not None and ev.stage_evidence is not None and ev.confidence is not None
            # the engine's own words placed it (see _engine_words): better than nothing, short of a frame
            confidence = "medium" if ev.stage_evidence == "message" else ev.confidence
            stage = self._step_of(ev) if ev.stage == "runtime_unknown" else ev.stage  # a step frame says which
            self._decide_pending(stage, ev.stage_evidence, confidence)

    def _decide_by_frames(self, frames: list[str]) -> bool:
        decided = _stage_from_frames(frames, self.epoch)
        if decided is not None:
            self._decide_pending(*decided)
        elif "runtime" in frames:
            self._decide_pending(self._runtime_step(None, frames)[0], "frame", "medium")
        elif "startup" in frames and (self._pending is None or self._pending.stage_evidence in GUESSES):
            self._decide_pending("loading_unknown", "frame", "medium")  # not over the engine's own words
        else:
            return False
        return True

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
        m = P.MAMBA_BLOCKS.search(msg)
        if m:
            facts["max_num_seqs"] = int(m.group(1))
            facts["mamba_cache_blocks"] = int(m.group(2))

    def _event(self, rec: Record, line: LogLine, when: str | None, kind: str) -> list[Event]:
        out: list[Event] = []
        if kind == "engine_crash" and self._allocator_oom is not None:
            out += self._count_oom(self._allocator_oom[1])
        if kind == "engine_crash" and not self.epoch.ready and "oom" not in self._open:
            # the engine died after vLLM found no memory left for the KV cache: that is the memory failure
            out += self._count_kv_negative(self._kv_negative, "high")
        ev = Event(line.number, when, kind, evidence=_evidence(rec.message), process=rec.process)
        out += self._emit(ev)
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
        if ev.kind == "oom_recovered" and len(self.recovered) < self.max_events:
            self.recovered.append(ev)
        return [ev]

    def _serving(self) -> None:
        """The API server answered a request (an error, maybe): the engine had been ready."""
        self._saw_runtime = True
        self._keep_provisional(serving="medium")
        ep = self.epoch
        if not ep.ready and not ep.crashed:  # the API server takes requests only once the engine is up
            ep.ready = True

    def note_serving(self) -> None:
        """The server answered a scrape of its /metrics, and every line it logged so far has been read. vLLM's
        API server binds its port early but listens only once the engine is built (vllm/entrypoints/openai/
        api_server.py run_server_worker: `serve_http` runs inside `async with build_async_engine_client(...)`,
        which returns after the engine core's ready handshake), so the run under way is serving, also when its log
        holds no readiness line (rotated away) and no serving signs (stats and access logs turned off).

        Heard only for a run whose start this log did not show (vLLM logs its readiness before it listens, so a
        start without a readiness line answered by a scrape is another process: a second server under the same
        glob, replicas behind one URL) and while no failure is open or undecided: the API server goes on answering
        /metrics for a while after its engine died (vllm/entrypoints/launcher.py watchdog_loop, every 5 s; never
        with VLLM_KEEP_ALIVE_ON_ENGINE_DEATH), so an answer says nothing of what just failed."""
        ep = self.epoch
        if ep.started or ep.ready or ep.crashed or self._open or self._pending is not None or self._cut is not None:
            return
        self._saw_runtime = True
        ep.ready = True

    def _healthy(self) -> None:
        """Serving signs that may also close the incidents under way: a request answered, a stats line. Not once
        the engine died in this run (an engine_crash): its API server may log stats until the watchdog stops it,
        and the relays of the failure that follow are the same incident."""
        self._saw_runtime = True
        self._keep_provisional(serving="low")
        if self._step_said_by == "message":  # a step a line said began: a request answered or stats since, it ended
            self._last_step.clear()
        if self._allocator_oom is not None:
            self._allocator_recovered()
        ep = self.epoch
        if self._open and not ep.crashed:
            self._open.clear()
        if not ep.ready and not ep.crashed:
            ep.ready = True  # serving (the readiness line may be cut out of the excerpt, or before the log began)

    def _stats(self, m: re.Match[str]) -> None:
        self._healthy()
        facts = self.epoch.facts
        # the four groups in one call: a busy log's stats lines are many
        running, waiting, kv, hit = m.group("running", "waiting", "kv", "hit")
        if kv is not None:
            facts["kv_cache_usage_peak_ratio"] = max(float(kv) / 100.0, facts.get("kv_cache_usage_peak_ratio", 0.0))
        if hit is not None:
            facts["prefix_cache_hit_rate_last_ratio"] = float(hit) / 100.0
        if running is not None:
            facts["running_peak_reqs"] = max(int(running), facts.get("running_peak_reqs", 0))
        if waiting is not None:
            facts["waiting_peak_reqs"] = max(int(waiting), facts.get("waiting_peak_reqs", 0))

    # -- startup ----------------------------------------------------------------------------------

    def _new_epoch(self, line: LogLine, when: str | None) -> None:
        self.flush()  # a failure before this start belongs to the run before
        old = self.epoch
        if not old.started and not (old.events or old.facts or old.ready):
            self.epochs.pop()  # nothing happened before the first startup line
        self.epochs.append(Epoch(old.index + 1, line.number, when, started=True))
        if len(self.epochs) > MAX_EPOCHS:
            del self.epochs[0]
        self._open.clear()
        self._last_step.clear()
        self._frames.clear()
        self._kv_negative = None
        self._header = None
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
        if ep.ready and what == "weight_loading" and line.text.find("Starting to load model") >= 0:
            self._new_epoch(line, when)  # a restart whose first lines the excerpt does not hold
            ep = self.epoch
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
        if not ep.started:  # the log begins in the middle of a startup: it is under way all the same
            ep.started, ep.start_line, ep.start_time = True, line.number, when
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
        if self._pending is not None:  # the startup was under way around an undecided failure (progress bars)
            self._decide_pending(ep.stage if ep.stage != "loading_unknown" else stage, "marker", "medium")
        self._note_stage(stage, line, when)
        return []

    def _facts(self, msg: str) -> None:  # noqa: C901  one flat list of fact patterns, tried in order
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
        for name, pattern in P.ENV_FACTS.items():
            m = pattern.search(msg)
            if m:
                facts.setdefault(name, P.number(m.group(1)) if name.endswith("_gib") else m.group(1).strip())
        if "GiB" in msg:
            for split in (P.PROFILE_SPLIT, P.PROFILE_SPLIT_V0):
                for name, pattern in split.items():
                    f = pattern.search(msg)
                    if f:
                        facts[name] = P.number(f.group(1))

    def snapshot(self) -> dict[str, Any]:
        """What the daemon persists beside a log offset, so a restart neither loses nor repeats an event."""
        ep = self.epoch
        return {
            "counts": dict(self.counts),
            "oom_counts": [[s, p, n] for (s, p), n in self.oom_counts.items()],
            "lines": self.lines,
            "line_errors": self.line_errors,
            "epoch": {
                "index": ep.index,
                "start_line": ep.start_line,
                "start_time": ep.start_time,
                "started": ep.started,
                "stage": ep.stage,
                "ready": ep.ready,
                "crashed": ep.crashed,
                "kv_sized": ep.kv_sized,
                "events": ep.events,
                "facts": ep.facts,
                "startup": ep.startup,
            },
            "open": sorted(self._open),
            "last_step": [[k, v] for k, v in self._last_step.items()],
            "step_said_by": self._step_said_by,
            "frames": [[k, v] for k, v in self._frames.items()],
            "saw_runtime": self._saw_runtime,
            "pending": None
            if self._pending is None
            else {
                "line": self._pending.line,
                "time": self._pending.time,
                "cause": self._pending.cause,
                "evidence": self._pending.evidence,
                "stage": self._pending.stage,
                "stage_evidence": self._pending.stage_evidence,
            },
        }

    @classmethod
    def restore(
        cls, data: dict[str, Any], max_events: int = 500, undecided_stage: str = UNDECIDED_STAGE
    ) -> LogAnalyzer:
        """The inverse of `snapshot`; raises KeyError/TypeError/ValueError on a damaged state."""
        a = cls(max_events, undecided_stage)
        a.counts = Counter({str(k): int(v) for k, v in data["counts"].items()})
        a.oom_counts = Counter({(str(s), str(p)): int(n) for s, p, n in data["oom_counts"]})
        a.lines = int(data["lines"])
        a.line_errors = int(data.get("line_errors", 0))
        e = data["epoch"]
        ep = Epoch(
            int(e["index"]),
            int(e["start_line"]),
            e["start_time"],
            bool(e["started"]),
            str(e["stage"]),
            bool(e["ready"]),
            crashed=bool(e["crashed"]),
            kv_sized=bool(e["kv_sized"]),
            events=int(e["events"]),
            facts=dict(e["facts"]),
            startup={str(k): float(v) for k, v in e["startup"].items()},
        )
        a.epochs = [ep]
        for kind in data["open"]:
            a._open[str(kind)] = Event(0, None, str(kind))
        a._last_step = {(None if k is None else int(k)): str(v) for k, v in data["last_step"]}
        a._step_said_by = str(data.get("step_said_by") or "scheduler_dump")
        a._frames = {(None if k is None else str(k)): [str(x) for x in v] for k, v in data["frames"]}
        a._saw_runtime = bool(data["saw_runtime"])
        pending = data.get("pending")
        if pending:
            stage = pending.get("stage") if pending.get("stage") in P.STAGES else undecided_stage
            a.pending = Event(
                int(pending["line"]),
                pending.get("time"),
                "oom",
                stage,
                P.phase_of(stage),
                pending.get("evidence"),
                cause=pending.get("cause"),
                stage_evidence=str(pending.get("stage_evidence") or "none"),
                confidence="low",
            )
        return a


def _sampler_stage(frames: list[str], ep: Epoch) -> tuple[str, str]:
    """(stage, confidence) of a failure in the sampler's dummy run. `_dummy_sampler_run` serves memory profiling
    (profile_run) and, since vLLM PR #13776, the warm-up after the KV cache is allocated
    (gpu_worker.compile_or_warm_up_model), outside the memory budget and where it runs out: the warm-up unless
    profiling is shown under way."""
    if "kv_cache_alloc" in frames:
        return "kv_cache_alloc", "high"
    if ep.started and not ep.kv_sized and ep.stage == "kv_cache_alloc" and "warmup" not in frames:
        return "kv_cache_alloc", "medium"
    sure = "warmup" in frames or ep.kv_sized or ep.stage in ("graph_capture", "warmup")
    return "warmup", "high" if sure else "medium"


def _stage_from_frames(frames: list[str], ep: Epoch) -> tuple[str, str, str] | None:
    """The innermost startup step in the traceback (capture inside warm-up is capture), or None."""
    for tag in reversed(frames):
        if tag in _LOADING_FRAME_TAGS:
            if tag == "compile":
                return "graph_capture", "frame", "high"
            if tag == "sampler":
                stage, conf = _sampler_stage(frames, ep)
                return stage, "frame", conf
            return tag, "frame", "high"
    if "construction" in frames and "runtime" not in frames:
        return "weight_loading", "frame", "medium"
    return None


_IDENTIFIER = re.compile(r"\b[a-z_][a-z0-9_]{5,60}\b")


def _named_methods(message: str) -> list[str]:
    """Stage tags of the vLLM methods a message names (`... while processing method determine_num_available_blocks:
    CUDA out of memory`)."""
    tags = []
    for name in _IDENTIFIER.findall(message[:2000]):
        tag = P.FRAME_FUNCS.get(name)
        if tag is not None:
            tags.append(tag)
    return tags


_ASCEND_MASK_FUNCS = frozenset(P.ASCEND_SPLITFUSE[:2])


@functools.lru_cache(maxsize=4096)  # pure in its arguments; a failing server repeats the same frames
def _file_rule(path: str, func: str) -> tuple[str | None] | None:
    """PATH_FUNCS' word on this function in this file: (tag,), the tag None when the frame says no stage; None when
    no rule names it."""
    for parts, funcs, tag in P.PATH_FUNCS:
        if func in funcs and any(p in path for p in parts):
            return (tag,)
    return None


def _name_tag(path: str, func: str) -> str | None:
    """The tag of a frame by its function's name (the step names other code uses too only on vLLM's attention paths),
    else by where it stands."""
    tag = P.FRAME_FUNCS.get(func)
    if tag is None and (func not in P.GENERIC_STEP_FUNCS or any(p in path for p in P.GENERIC_STEP_PATHS)):
        tag = P.STEP_FUNCS.get(func)
    if tag is None and "repack" in func:
        tag = "weight_loading"  # quantized weights rearranged for a kernel, once, after loading
    return tag if tag is not None else _path_tag(path, func)


def _ascend_mask_tag(func: str, path: str, frames: list[str] | None) -> str | None:
    """vllm-ascend's SplitFuse mask: a prefill step when built right under the model runner's choice of mask (up to
    v0.12), no step when every step's metadata builds it (v0.13 on); see patterns.ASCEND_SPLITFUSE."""
    _, chooser, where = P.ASCEND_SPLITFUSE
    if func == chooser:
        return "mask_choice" if where in path else None
    return "prefill" if frames and frames[-1] == "mask_choice" else None


@functools.lru_cache(maxsize=4096)  # pure in its arguments; a failing server repeats the same frames
def _path_tag(path: str, func: str) -> str | None:
    """The tag of a frame whose function name alone says nothing: by where it stands (and what it is called there)."""
    if func == "<module>":
        return "startup" if path.endswith(P.SERVER_ENTRY_POINTS) else None
    step = next((s for p, s in P.STEP_PATHS if p in path), None)
    if step is not None:
        return step
    if func == P.V0_CAPTURE[0] and P.V0_CAPTURE[1] in path:
        return "graph_capture"
    if func in P.MODULE_MOVE[1] and P.MODULE_MOVE[0] in path:
        return "module_move"
    if any(p in path for p in P.WARMUP_PATHS):
        return "warmup"
    if any(p in path for p in P.V1_SAMPLER_PATHS):
        return "sampler_code"
    if any(p in path for p in P.COMPILE_PATHS):
        return "compile"
    if any(p in path for p in P.CAPTURE_PATHS):
        return "graph_capture"
    if any(p in path for p in P.SERVING_PATHS):
        return "runtime"
    if func == "__init__" and any(p in path for p in P.MODEL_PATHS):
        return "weight_loading"  # a model class being built
    if func == "__init__" and any(p in path for p in P.ENGINE_PATHS):
        return "startup"
    if any(p in path for p in P.CONSTRUCTION_PATHS):
        return "construction"
    return None


def _method_stage(words: str, ep: Epoch) -> str | None:
    """The stage of the method a worker names (`while processing method load_model`), or None."""
    tags = _named_methods(words)
    decided = _stage_from_frames(tags, ep)
    if decided is not None:
        return decided[0]
    if "runtime" in tags:
        return "runtime_unknown"
    return "loading_unknown" if "startup" in tags else None


def _stage_from_words(message: str) -> tuple[str, str, str] | None:
    """`Error while capturing CUDA graphs: CUDA out of memory`: the step a relayed failure names in words."""
    head = message[: max(message.find("out of memory"), 0) or 400]  # the words before the failure's own text
    for pattern, stage in P.MESSAGE_STAGES:
        if pattern.search(head):
            return stage, "message", "medium"
    return None


def _int(text: str) -> int:
    return int(P.number(text))


# (pattern, ((group, "facts"|"startup", key, convert, keep the first value), ...)): one line, one or more facts.
# (pattern, ((group, "facts" or "startup", key, convert, keep the first value), ...))
_SIMPLE_FACTS: list[tuple[re.Pattern[str], tuple[tuple[int, str, str, Callable[[str], Any], bool], ...]]] = [
    (P.START_LOAD, ((1, "facts", "model", str, True),)),
    (
        P.MODEL_LOADING,
        ((1, "facts", "model_loading_gib", P.number, False), (2, "startup", "weight_loading_s", P.number, False)),
    ),
    (P.MODEL_LOADING_V0, ((1, "facts", "model_loading_gib", P.number, False),)),
    (P.LOADING_WEIGHTS, ((1, "startup", "weight_loading_s", P.number, True),)),
    (P.TORCH_COMPILE, ((1, "startup", "torch_compile_s", P.number, False),)),
    (P.PROFILE_TIME, ((1, "startup", "memory_profiling_s", P.number, False),)),
    (P.KV_MEMORY, ((1, "facts", "kv_cache_memory_gib", P.number, False),)),
    (P.KV_MEMORY_BYTES, ((1, "facts", "kv_cache_memory_gib", lambda raw: int(raw) / 2**30, False),)),
    (P.KV_TOKENS, ((1, "facts", "kv_cache_tokens", _int, False),)),
    (P.MAX_CONCURRENCY, ((1, "facts", "max_model_len", _int, True), (2, "facts", "max_concurrency", P.number, False))),
    (P.GPU_BLOCKS, ((1, "facts", "gpu_blocks", int, False),)),
    (
        P.GRAPH_CAPTURE,
        ((1, "startup", "graph_capture_s", P.number, False), (2, "facts", "graph_memory_gib", P.number, False)),
    ),
    (P.ENGINE_INIT, ((1, "startup", "engine_init_s", P.number, False),)),
]
_SIZES_THE_CACHE = frozenset({"kv_cache_tokens", "max_concurrency", "gpu_blocks"})  # the cache is sized by now


def _evidence(message: str) -> str:
    text = message[: EVIDENCE_CHARS + 1]
    if not text.isprintable():  # the common case checked in C first: a failing server logs thousands of these
        text = "".join(ch if ch.isprintable() else " " for ch in text)
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
