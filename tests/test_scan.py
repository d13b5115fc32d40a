"""Block scanning (exporter/logs/scan.py) against feeding every line: the same events, stages, counters and offsets.

Every fixture and real-corpus log is read twice by the tailer, once skipping the lines the analyzer is promised
to ignore and once feeding them all, as written and in variants that keep the analyzer quiescent for long runs
(a serving preamble, request logs whose prompts hold trigger words, the kubelet's CRI wrapping with lines split
into partial records, small read chunks so lines straddle blocks). A check added to the stage machine without its
word in stages.TRIGGER_WORDS/PATTERNS makes these differ.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from exporter.config import LogSource
from exporter.logs import scan, stages
from exporter.logs import tailer as tailer_module
from exporter.logs.prefilter import needed_literals
from exporter.logs.tailer import LogTailer

FIXTURES = Path(__file__).parent / "fixtures"
LOGS = sorted(p for p in FIXTURES.rglob("*.log") if p.is_file())
SERVING = [
    "(APIServer pid=1) INFO 11-20 10:00:00 [api_server.py:1] vLLM API server version 0.11.0",
    "(APIServer pid=1) INFO 11-20 10:00:01 [launcher.py:1] Application startup complete.",
    '(APIServer pid=1) INFO:     10.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
]
PROMPT = (
    "(APIServer pid=1) INFO 11-20 10:00:02 [logger.py:40] Received request chatcmpl-1: prompt: 'my job ran out of "
    "memory; Engine said KV cache; took 3 s; Tried to allocate 2 GiB', params: SamplingParams(n=1)."
)
ACCESS = '(APIServer pid=1) INFO:     10.0.0.2:5001 - "POST /v1/completions HTTP/1.1" 200 OK'
ADDED = "(EngineCore_DP0 pid=212) INFO 11-20 10:00:02 [scheduler.py:512] Added request chatcmpl-1 to the waiting queue."


class _NoScan:
    available = False


def _read(path: Path, fmt: str, scanning: bool, chunk: int, cap: int | None) -> dict:
    kwargs = {"max_line_bytes": cap} if cap else {}
    t = LogTailer("t", LogSource(str(path), fmt), None, **kwargs)
    if not scanning:
        t._scanner = _NoScan()  # type: ignore[assignment]
    saved = tailer_module.READ_CHUNK
    tailer_module.READ_CHUNK = chunk
    try:
        fed = t.poll()
        fed += t.poll()
    finally:
        tailer_module.READ_CHUNK = saved
    a = t.analyzer
    return {
        "fed": fed,
        "snapshot": a.snapshot(),
        "events": [e.to_dict() | {"epoch": e.epoch, "ready_before": e.ready_before} for e in a.events],
        "recovered": [e.to_dict() for e in a.recovered],
        "epochs": [(e.index, e.start_line, e.stage, e.ready, e.crashed, e.timeline) for e in a.epochs],
        "pending": None if a.pending is None else a.pending.to_dict(),
        "health": dataclasses.replace(t.health, last_read=None),
        "position": (t._line_no, t._offset, t._safe),
    }


def _same(path: Path, fmt: str = "auto", chunk: int = tailer_module.READ_CHUNK, cap: int | None = None) -> dict:
    fast = _read(path, fmt, True, chunk, cap)
    slow = _read(path, fmt, False, chunk, cap)
    for key in slow:
        assert fast[key] == slow[key], f"{path.name} ({fmt}, chunk {chunk}): {key} differs"
    return fast


def _cri(lines: list[str], split: int = 0) -> list[str]:
    """The kubelet's CRI wrapping; lines longer than `split` (when set) written as partial `P` records."""
    out = []
    for n, line in enumerate(lines):
        stamp = f"2026-11-20T10:00:00.{n:09d}Z stdout"
        if split and len(line) > split:
            parts = [line[i : i + split] for i in range(0, len(line), split)]
            out += [f"{stamp} P {p}" for p in parts[:-1]] + [f"{stamp} F {parts[-1]}"]
        else:
            out.append(f"{stamp} F {line}")
    return out


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8", errors="surrogateescape")
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def test_scanner_is_available_and_every_pattern_has_literals():
    assert scan.scanner().available, "ahocorasick_rs is a dependency: without it the tailer reads every line"
    for pattern in stages.TRIGGER_PATTERNS:
        assert needed_literals(pattern), pattern.pattern
    assert stages.OOM_WORD_STARTS and "out of memor" in stages.OOM_WORD_STARTS


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name)
def test_every_fixture_log_reads_the_same(path, tmp_path):
    _same(path)
    lines = _lines(path)
    served = _write(tmp_path / "served.log", SERVING + [x for line in lines for x in (line, PROMPT, ACCESS, ADDED)])
    _same(served)
    _same(served, chunk=257)
    _same(_write(tmp_path / "cri.log", _cri(SERVING + lines)))
    _same(_write(tmp_path / "cri-split.log", _cri(SERVING + [x for line in lines for x in (line, ACCESS)], 40)))


def test_a_failure_a_terminal_wrapped_across_skipped_lines(tmp_path):
    """The wrap tail: a long line ending inside an OOM phrase, the rest on a bare line, with request logs and
    access lines (which do not touch the tail) between them and before."""
    head = "(EngineCore_DP0 pid=7) ERROR 11-20 10:00:03 [core.py:1] the worker failed with a CUDA out of mem"
    counted = []
    for between in ([], [PROMPT], [ACCESS, PROMPT], [ACCESS, PROMPT, ADDED]):
        lines = SERVING + [ACCESS] * 50 + [ADDED, head, *between, "ory"] + [ACCESS] * 50
        counted.append(_same(_write(tmp_path / "wrap.log", lines))["snapshot"]["counts"].get("oom", 0))
    assert counted == [1, 1, 1, 0]  # the scheduler's line between takes the tail's place: nothing to join


def test_lines_cut_at_the_cap_are_counted_when_skipped(tmp_path):
    long = ACCESS + " " + "x" * 5000
    lines = SERVING + [ACCESS] * 20 + [long] * 3 + [ACCESS] * 20 + [PROMPT, long + " out of memory", ACCESS]
    got = _same(_write(tmp_path / "long.log", lines), cap=1024)
    assert got["health"].lines_cut == 4 and got["health"].bytes_skipped > 4 * 4000
    _same(_write(tmp_path / "long-cri.log", _cri(lines)), cap=1024)


def test_the_tailers_own_bytes_and_the_analyzers_whole_line_words(tmp_path):
    odd = [
        "\x00\x00" + ACCESS,  # the hole a copytruncate leaves
        "\x1b[32m(APIServer pid=1) INFO\x1b[0m 11-20 10:00:04 [x.py:1] CUDA out of memory",
        ACCESS + "\r",
        "(APIServer pid=1) INFO 11-20 10:00:05 [x.py:1] File &quot;/x.py&quot;, line 3, in load_model",
        "(APIServer pid=1) INFO 11-20 10:00:06 [logger.py:40] Received request x: Traceback (most recent call last)",
        "    return self.model_runner.load_model(x)",
        "(EngineCore_DP0 pid=212) INFO 11-20 10:00:07 [core.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        "Avg generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 50.0%",
        "(EngineCore_DP0 foo) INFO 11-20 10:00:08 [core.py:1] EngineCore looks like a tag but is not one",
        "caf\xe9 " + PROMPT,
    ]
    for extra in odd:
        lines = SERVING + [ACCESS, PROMPT, ADDED] * 5 + [extra] + [ACCESS, PROMPT, ADDED] * 5
        _same(_write(tmp_path / "odd.log", lines))
        _same(_write(tmp_path / "odd-cri.log", _cri(lines)))


def test_the_benchmark_shapes_read_the_same(tmp_path):
    from benchmarks.bench_logs import SHAPES, generate

    for shape in SHAPES:
        path = tmp_path / f"{shape}.log"
        want = generate(str(path), 3000, seed=3, shape=shape)
        got = _same(path, "cri" if shape == "cri" else "plain", chunk=65536)
        assert got["snapshot"]["counts"].get("oom", 0) == want["oom"]
        assert got["health"].lines_read == want["lines"]


def test_frames_without_a_traceback_header(tmp_path):
    """An excerpt's frame and code lines under no `Traceback` line still tag frames, skipped or not."""
    frames = [
        '  File "/usr/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", line 342, in execute_model',
        "    output = self.model_runner.capture_model()",
        "    self.model_runner.load_model(x)",
        "    return func(*args, **kwargs)",
        "KeyError: 'the exception line closes the traceback'",
        "(EngineCore_DP0 pid=7) ERROR 11-20 10:00:09 [core.py:1] torch.OutOfMemoryError: CUDA out of memory.",
    ]
    header = "(EngineCore_DP0 pid=7) ERROR 11-20 10:00:09 [core.py:1] Traceback (most recent call last):"
    for n in range(len(frames)):
        lines = SERVING + [ACCESS, PROMPT, ADDED] * 5 + [header, ACCESS, *frames[n:]] + [ACCESS, PROMPT, ADDED] * 5
        _same(_write(tmp_path / "open.log", lines))
        _same(_write(tmp_path / "open-cri.log", _cri(lines)))
    for n in range(len(frames)):
        lines = SERVING + [ACCESS, PROMPT, ADDED] * 5 + frames[n:] + [ACCESS, PROMPT, ADDED] * 5
        _same(_write(tmp_path / "frames.log", lines))
        _same(_write(tmp_path / "frames-cri.log", _cri(lines)))


def test_needed_literals_read_the_parse_tree():
    import re

    from exporter.logs.prefilter import alternatives

    cases = {
        r"&(?:quot|lt);": ("&lt;", "&quot;"),
        r"^(?:[\w.]+\.)?(?:Error|Exception): (?:CUDA|HIP) out\s*$": (
            "Error: CUDA out",
            "Error: HIP out",
            "Exception: CUDA out",
            "Exception: HIP out",
        ),
        r"\b(?:collective_rpc|_run_workers)\(\s*[\"'](?P<m>\w+)": ("_run_workers(", "collective_rpc("),
        r"abc|x+yz\d": ("abc", "yz"),
    }
    for pattern, want in cases.items():
        assert needed_literals(re.compile(pattern)) == want, pattern
    assert needed_literals(re.compile(r"a|\d+")) is None  # the second branch needs no literal at all
    assert alternatives(re.compile(r"foo|ba(?:r|z)")) == ("bar", "baz", "foo")
    assert alternatives(re.compile(r"foo|ba\w")) is None


def test_the_quick_shapes_and_their_look_alikes(tmp_path):
    """LogAnalyzer.quick reads frame lines, bare traceback headers and stats lines of a quiescent analyzer without
    the full dispatch: each of them, and lines that only look like them, read the same skipped or fed."""
    head = "(EngineCore_DP0 pid=7) ERROR 11-20 10:00:09 [core.py:1] "
    info = "(APIServer pid=1) INFO 11-20 10:00:09 [loggers.py:123] "
    stats = "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: {} reqs"
    cases = [
        [
            head + "Traceback (most recent call last):",
            head + '  File "/x/vllm/v1/worker/gpu_worker.py", line 1, in execute_model',
            head + "    return self.model_runner.capture_model()",
            head + "KeyError: 'x'",
        ],
        [
            head + "Traceback (most recent call last):",
            head + '  File "/x/vllm/v1/worker/gpu_model_runner.py", line 1,',
            head + "in _dummy_run",
            head + "ValueError: x",
        ],  # a frame line wrapped before its function
        [head + "Traceback (most recent call last): CUDA out of memory", head + "RuntimeError: x"],
        [
            head + 'Traceback (most recent call last):  File "/x/vllm/worker/model_runner.py", line 3, in '
            "capture_model",
            head + "RuntimeError: x",
        ],
        [head + '\tFile "/x/vllm/v1/worker/gpu_worker.py", line 1, in load_model', head + "KeyError: 'x'"],
        [  # a traceback's frames read together (LogAnalyzer.quick_frames), left open so the snapshot shows them
            head + "Traceback (most recent call last):",
            head + '  File "/x/vllm/v1/engine/core.py", line 2, in run_busy_loop',
            head + "    self.model_runner.capture_model()",
            head + "    return func(*args, **kwargs)",
            '(EngineCore_DP0 pid=8) ERROR 11-20 10:00:09 [core.py:1]   File "/x/vllm/v1/worker/w.py", line 4, in '
            "profile_run",  # another process's frame: not this body's
        ],
        [
            head + "Traceback (most recent call last):",
            head + "  File &quot;/x/vllm/worker/worker.py&quot;, line 1, in load_model",
        ],  # read unescaped: fed
        [
            head + "Traceback (most recent call last):",
            head + '  File "/x/' + "y" * 250 + '/worker.py", line 1, in load_model',
        ],  # cut at 300 bytes below: fed
        [
            head + "Traceback (most recent call last):",
            head + '  File "/x/vllm/worker/worker.py", line 1, ',
            "in load_model",
        ],  # a frame line a terminal wrapped: the rest joins it
        [head + '    self.model_runner.profile_run()  # File "x"', head + "KeyError: 'x'"],
        [
            info + "Engine 000: " + stats.format(70),
            info + "Engine 000: " + stats.format(3) + ", GPU KV cache usage: 1.2.3%",
        ],
        [info + stats.format(90) + ", GPU KV cache usage: 99.5%, Prefix cache hit rate: 12.0%"],
        [info + "Received request x: prompt: '" + stats.format(99) + "'", info + "1 " + stats.format(98)],
        [info + 'File "' + stats.format(97) + '"'],
        [info + "Traceback (most recent call last) " + stats.format(96)],
        ['(APIServer pid=1) INFO:     10.0.0.2:5001 - "GET /?' + stats.format(95) + ' HTTP/1.1" 200 OK'],
        ['  (EngineCore_DP0 pid=7)   File "/x/vllm/v1/worker/gpu_worker.py", line 1, in load_model'],  # indented
        [info + "Engine 000: Avg prompt throughput: 1.0 tokens/s, Running: 5 reqs"],  # no STATS_LINE match
    ]
    for n, case in enumerate(cases):
        lines = SERVING + [ACCESS, PROMPT, ADDED] * 5 + case + [ACCESS, PROMPT, ADDED] * 5
        for name, text in (("quick.log", lines), ("quick-cri.log", _cri(lines))):
            got = _same(_write(tmp_path / name, text))
            assert got["health"].lines_read == len(lines), n
            _same(tmp_path / name, cap=300)  # the long frame line cut: fed, not read with the others


def test_engine_tags_hidden_from_the_search_only_where_they_are_tags(tmp_path):
    """`Engine` in an engine process's tag at a line's start is hidden from the search (the analyzer reads the tag
    as the line's prefix); the same word at a line's start in anything parse_record does not read as a tag is not."""
    lines = [
        "(EngineCore_DP0 pid=7) INFO 11-20 10:00:09 [core.py:1] nothing to see",
        "(EngineCore failed to start pid=7) the tag's own words: a prefix, not a message",
        "(EngineCore failed to start.)",  # no pid: not a tag, the whole line is the message
        "(EngineCore_DP0 pid=7)(EngineCore failed to start.)",
        "(EngineCore_DP1 pid=x) EngineCore failed to start.",
    ]
    for line in lines:
        text = SERVING + [ACCESS, ADDED] * 5 + [line] + [ACCESS, ADDED] * 5
        _same(_write(tmp_path / "tag.log", text))
        _same(_write(tmp_path / "tag.log", text), chunk=97)
    scanner = scan.scanner()
    words = [[scanner.literals[i] for i, _, _ in scanner.hits(("\n" + line + "\n").encode())] for line in lines]
    assert words == [[], [], ["Engine"], ["Engine"], ["Engine", "Engine"]]
