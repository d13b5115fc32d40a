"""`vllm-headroom triage`: read a vLLM log and say when memory ran out and what to do next."""

from __future__ import annotations

import gzip
import io
import sys
import zlib
from typing import Any, BinaryIO

from exporter.advice import STAGE_LABELS, next_move
from exporter.logs.formats import read_lines
from exporter.logs.pastes import unpasted
from exporter.logs.stages import LogAnalyzer

STARTUP_KEYS = (
    "weight_loading_s",
    "torch_compile_s",
    "memory_profiling_s",
    "graph_capture_s",
    "engine_init_s",
    "time_to_ready_s",
)
FACT_KEYS = (
    "vllm_version",
    "model",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "max_model_len",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "kv_cache_tokens",
    "max_concurrency",
)


class UnreadableInput(Exception):
    """A log that cannot be opened or read at all (exit code 2)."""


GZIP_MAGIC = b"\x1f\x8b"
SNIFF_BYTES = 64 * 1024


def triage_stream(name: str, stream: BinaryIO, fmt: str = "auto") -> dict[str, Any]:
    """Analyse one whole log; the report follows the `triage --json` contract (README)."""
    detected, lines = read_lines(stream, fmt)
    analyzer = LogAnalyzer()
    truncated = 0
    for line in unpasted(lines):
        truncated += line.truncated
        analyzer.feed(line)
    analyzer.flush()
    return build_report(name, detected, analyzer, truncated)


def _open_log(name: str, raw: BinaryIO) -> BinaryIO:
    """The log's text stream: gzip (how rotated logs sit) is read transparently; binary data is refused."""
    head = raw.peek(SNIFF_BYTES)[:SNIFF_BYTES] if isinstance(raw, io.BufferedReader) else b""
    stream: BinaryIO = raw
    if head.startswith(GZIP_MAGIC):
        stream = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
        head = stream.peek(SNIFF_BYTES)[:SNIFF_BYTES]  # type: ignore[attr-defined]
    if _looks_binary(head):
        raise UnreadableInput(
            f"{name}: not a text log (binary data in its first bytes); give the log file itself "
            f"(plain, CRI, docker json, or gzip of one of these)"
        )
    return stream


def _looks_binary(head: bytes) -> bool:
    """NUL bytes, or mostly bytes that are neither text nor UTF-8, in the first block. A leading run of NULs is
    the hole copytruncate leaves in a log, not binary data."""
    head = head.lstrip(b"\x00")
    if not head:
        return False
    if b"\x00" in head:
        return True
    text = head.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") + sum(1 for ch in text if ch < " " and ch not in "\t\n\r\x1b\x0c")
    return bad > len(text) * 0.1


def triage_path(path: str, fmt: str = "auto") -> dict[str, Any]:
    try:
        if path == "-":
            return triage_stream("-", _open_log("-", sys.stdin.buffer), fmt)
        with open(path, "rb") as raw:
            return triage_stream(path, _open_log(path, raw), fmt)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise UnreadableInput(f"{path}: the gzip data is damaged or cut short ({exc})") from exc
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UnreadableInput(f"{path}: cannot read this log: {reason}") from exc


def build_report(name: str, fmt: str, analyzer: LogAnalyzer, truncated: int = 0) -> dict[str, Any]:
    first = analyzer.first_oom
    epoch = analyzer.first_oom_epoch or analyzer.epoch
    first_oom = None
    if first is not None:
        first_oom = {
            "line": first.line,
            "time": first.time,
            "stage": first.stage,
            "phase": first.phase,
            "evidence": first.evidence,
            "cause": first.cause,
            "stage_evidence": first.stage_evidence,
            "confidence": first.confidence,
        }
    facts: dict[str, Any] = {key: epoch.facts.get(key) for key in FACT_KEYS}
    facts.update({k: v for k, v in sorted(epoch.facts.items()) if k not in facts})
    startup: dict[str, Any] = {key: epoch.startup.get(key) for key in STARTUP_KEYS}
    counts = dict(sorted(analyzer.counts.items()))
    return {
        "file": name,
        "format": fmt,
        "first_oom": first_oom,
        "recovered_memory_events": [ev.to_dict() for ev in analyzer.recovered],
        "ready_before_first_oom": bool(first is not None and first.ready_before),
        "events": [ev.to_dict() for ev in analyzer.events],
        "event_counts": counts,
        "oom_by_stage": {f"{stage}/{phase}": n for (stage, phase), n in sorted(analyzer.oom_counts.items())},
        "startup": startup,
        "timeline": list(epoch.timeline),
        "facts": facts,
        "starts": sum(1 for ep in analyzer.epochs if ep.started),
        "lines": analyzer.lines,
        "lines_truncated": truncated,
        "lines_unreadable": analyzer.line_errors,
        "next_move": next_move(first_oom, epoch.facts, counts),
    }


def render_text(report: dict[str, Any]) -> str:
    """The report as an on-call reads it: the verdict first, then the evidence."""
    out = io.StringIO()
    w = out.write
    w(f"== {report['file']} ({report['format']}, {report['lines']} lines")
    if report["lines_truncated"]:
        w(f", {report['lines_truncated']} over-long lines cut")
    w(")\n")
    first = report["first_oom"]
    if first is None:
        w("First memory failure: none\n")
    else:
        when = f" at {first['time']}" if first["time"] else ""
        w(f"First memory failure: line {first['line']}{when}\n")
        w(f"  stage: {first['stage']} ({STAGE_LABELS.get(first['stage'], '')}), phase: {first['phase']}\n")
        w(f"  engine ready before it: {'yes' if report['ready_before_first_oom'] else 'no'}\n")
        w(f"  decided by: {first['stage_evidence']} (confidence {first['confidence']})\n")
        w(f"  evidence: {first['evidence']}\n")
    if report["recovered_memory_events"]:
        w(
            f"Recovered memory events (vLLM caught them and went on): {len(report['recovered_memory_events'])}, "
            f"first at line {report['recovered_memory_events'][0]['line']}\n"
        )
    w(f"\nNext move: {report['next_move']}\n")
    if report["timeline"]:
        w("\nStartup timeline:\n")
        for step in report["timeline"]:
            when = f"  {step['time']}" if step["time"] else ""
            w(f"  line {step['line']:>7}{when}  {step['stage']}\n")
    durations = {k: v for k, v in report["startup"].items() if v is not None}
    if durations:
        w("Startup durations: " + ", ".join(f"{k[:-2]} {v:g} s" for k, v in durations.items()) + "\n")
    facts = {k: v for k, v in report["facts"].items() if v is not None}
    if facts:
        w("\nFacts stated by the log:\n")
        for key, value in facts.items():
            w(f"  {key}: {value}\n")
    if report["event_counts"]:
        w("\nEvents: " + ", ".join(f"{k} {v}" for k, v in report["event_counts"].items()) + "\n")
        for ev in report["events"]:
            if ev["kind"] == "engine_ready":
                continue
            tag = f" [{ev['stage']}/{ev['phase']}]" if "stage" in ev else ""
            rep = f" (+{ev['repeats']} repeated lines)" if ev.get("repeats") else ""
            w(f"  line {ev['line']:>7}  {ev['kind']}{tag}{rep}\n")
    return out.getvalue()
