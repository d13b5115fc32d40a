"""Property tests: the parser and the log reader never crash, agree with their peers, never invent an OOM.

CI runs a short profile; `make fuzz` (HYPOTHESIS_PROFILE=long) runs 25,000 inputs per property, 10^5 in all.
"""

from __future__ import annotations

import io
import math
import os
import re

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition_parser import parse
from exporter.logs.formats import LogLine
from exporter.logs.stages import LogAnalyzer
from exporter.triage import triage_stream

settings.register_profile("ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=25_000, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

NAME = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
LABEL = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True).filter(lambda s: not s.startswith("__"))
VALUE = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
NUMBER = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**12), 10**12).map(float))


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(x)


@st.composite
def exposition(draw):
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        name = draw(NAME)
        labels = draw(st.dictionaries(LABEL, VALUE, max_size=4))
        block = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        value = _fmt(draw(NUMBER))
        lines.append(f"{name}{{{block}}} {value}" if labels or draw(st.booleans()) else f"{name} {value}")
    return "\n".join(lines) + "\n"


def _key(v: float):
    return "nan" if math.isnan(v) else v


METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


@given(st.text(max_size=400))
def test_parser_never_crashes_on_any_text(text):
    expo = parse(text)
    assert len(expo.samples) + expo.errors <= text.count("\n") + 1  # at most one sample or one error a line
    assert (expo.errors == 0) == (expo.first_error is None)
    assert all(isinstance(s.value, float) and METRIC_NAME.match(s.name) for s in expo.samples)


@given(exposition())
def test_parser_agrees_with_prometheus_client_where_both_accept(text):
    try:
        theirs = sorted(
            (s.name, tuple(sorted(s.labels.items())), _key(s.value))
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        )
    except Exception:
        assume(False)
    ours = parse(text)
    assert ours.errors == 0
    assert sorted((s.name, s.labels, _key(s.value)) for s in ours.samples) == theirs


@given(st.binary(max_size=3000))
def test_log_reader_never_crashes_on_any_bytes(data):
    report = triage_stream("fuzz", io.BytesIO(data))
    assert report["lines"] <= data.count(b"\n") + 1  # never more lines than the bytes hold


@given(st.lists(st.binary(max_size=300).map(lambda b: b.replace(b"\n", b"")), max_size=30))
def test_the_tailer_accounts_for_every_line_of_any_bytes(tmp_path_factory, lines):
    from exporter.config import LogSource
    from exporter.logs.tailer import LogTailer

    path = tmp_path_factory.mktemp("fuzz") / "v.log"
    data = b"".join(line + b"\n" for line in lines)
    path.write_bytes(data)
    t = LogTailer("s", LogSource(str(path), "plain"), None)
    t.poll()  # never raises
    assert t.health.lines_read + t.health.read_errors == len(lines)  # each line analysed, or counted as an error
    assert t._safe == (len(data), len(lines))  # and the offset that would be saved is past all of them


OOM_WORDS = (
    "outofmemory",
    "out of memory",
    "alloc_failed",
    "memoryallocation",
    "no available memory",
    "to serve at least one request",
    "stored in kv cache",
    "free memory on device",
)
PREFIXES = (
    "",
    "(EngineCore_DP0 pid=7) ",
    "(APIServer pid=1) INFO 08-16 12:00:01 [api_server.py:1] ",
    "ERROR 08-16 12:00:01 [core.py:396] ",
    "(Worker_TP3 pid=90) ERROR 08-16 12:00:01 [x.py:1] ",
    "WARNING 10-01 09:05:02 scheduler.py:1491] ",
    "2026-08-16T12:00:01.1Z stderr F ",
)
REAL = (
    "Traceback (most recent call last):",
    '  File "/v/vllm/v1/worker/gpu_model_runner.py", line 1, in execute_model',
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "EngineCore failed to start.",
    "Sequence group 3 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.",
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)",
    "Application startup complete.",
    "Received request x: prompt: 'why does my GPU say CUDA out of memory?'",
)


@given(
    st.lists(st.tuples(st.sampled_from(PREFIXES), st.one_of(st.sampled_from(REAL), st.text(max_size=120))), max_size=40)
)
def test_no_oom_is_ever_reported_for_text_that_has_none(lines):
    a = LogAnalyzer()
    for i, (prefix, body) in enumerate(lines, 1):
        text = prefix + body
        if "prompt:" not in text:
            assume(not any(w in text.lower().replace("\n", " ") for w in OOM_WORDS))
        a.feed(LogLine(i, text))
    assert a.counts["oom"] == 0
