"""Every fixture log, in every wrapping, gives the stage, phase and facts its header expects."""

from __future__ import annotations

import io
import json

import pytest

from exporter.logs.patterns import EVENT_KINDS, STAGES, phase_of
from exporter.triage import triage_stream
from tests.helpers import expectations, fixture_names, fixture_text, wrap_cri, wrap_docker

NAMES = fixture_names()


def _check(report: dict, expect: dict[str, str], name: str) -> None:
    first = report["first_oom"]
    for key, want in expect.items():
        if key == "exit":
            continue
        if key == "first_oom":
            assert want == "null" and first is None, f"{name}: expected no OOM, got {first}"
        elif key.startswith("first_oom."):
            assert first is not None, f"{name}: expected an OOM"
            assert str(first[key.split(".", 1)[1]]) == want, f"{name}: {key} is {first[key.split('.', 1)[1]]}"
        elif key == "ready_before_first_oom":
            assert str(report[key]).lower() == want, name
        elif key == "ready":
            assert (report["event_counts"].get("engine_ready", 0) > 0) == (want == "true"), name
        elif key.endswith("_count"):
            kind = key[: -len("_count")]
            assert report["event_counts"].get(kind, 0) == int(want), f"{name}: {kind} count {report['event_counts']}"
        elif key == "starts":
            assert report["starts"] == int(want), name
        else:
            got = report["facts"].get(key)
            assert got is not None and float(got) == float(want), f"{name}: fact {key} is {got!r}, expected {want}"


def test_there_are_enough_fixtures():
    stages = {expectations(n).get("first_oom.stage") for n in NAMES}
    assert {"weight_loading", "graph_capture", "kv_cache_alloc", "warmup", "prefill", "decode"} <= stages
    assert sum(1 for n in NAMES if expectations(n).get("first_oom") == "null") >= 3


@pytest.mark.parametrize("name", NAMES)
def test_plain(name):
    report = triage_stream(name, io.BytesIO(fixture_text(name).encode()))
    assert report["format"] == "plain"
    _check(report, expectations(name), name)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    "fmt,wrap,piece",
    [("cri", wrap_cri, 0), ("cri", wrap_cri, 37), ("docker", wrap_docker, 0), ("docker", wrap_docker, 50)],
)
def test_wrapped(name, fmt, wrap, piece):
    """The same log in a container runtime's wrapping, long lines split into partials: the same report."""
    plain = triage_stream(name, io.BytesIO(fixture_text(name).encode()))
    report = triage_stream(name, io.BytesIO(wrap(fixture_text(name), piece)))
    assert report["format"] == fmt
    _check(report, expectations(name), name)
    assert report["facts"] == plain["facts"]
    assert report["event_counts"] == plain["event_counts"]
    if plain["first_oom"]:
        assert report["first_oom"]["stage"] == plain["first_oom"]["stage"]
        assert report["first_oom"]["evidence"] == plain["first_oom"]["evidence"]
        assert report["first_oom"]["time"].startswith("2026-11-20T")  # the runtime's full timestamp wins


@pytest.mark.parametrize("name", NAMES)
def test_json_contract(name):
    report = triage_stream(name, io.BytesIO(fixture_text(name).encode()))
    for key in ("file", "format", "first_oom", "ready_before_first_oom", "events", "startup", "facts", "next_move"):
        assert key in report
    for key in (
        "vllm_version",
        "model",
        "tensor_parallel_size",
        "max_model_len",
        "gpu_memory_utilization",
        "enable_prefix_caching",
        "kv_cache_tokens",
        "max_concurrency",
    ):
        assert key in report["facts"]
    assert "weight_loading_s" in report["startup"] and "graph_capture_s" in report["startup"]
    assert json.loads(json.dumps(report)) == report  # plain JSON, nothing that only Python can print
    assert report["format"] in ("plain", "cri", "docker") and isinstance(report["ready_before_first_oom"], bool)
    assert isinstance(report["recovered_memory_events"], list) and isinstance(report["next_move"], str)
    assert report["next_move"] and report["lines"] > 0
    first = report["first_oom"]
    assert (first is None) == (expectations(name).get("first_oom") == "null")
    if first is not None:
        assert set(first) >= {"line", "time", "stage", "phase", "evidence", "stage_evidence", "confidence"}
        assert first["stage"] in STAGES and first["phase"] == phase_of(first["stage"])
        assert first["stage_evidence"] in (
            "message",
            "frame",
            "scheduler_dump",
            "readiness",
            "marker",
            "serving",
            "allocator",
            "none",
        )
        assert first["confidence"] in ("high", "medium", "low")
        # the evidence is the matched line's message and nothing else of the log
        line = fixture_text(name).split("\n")[first["line"] - 1]
        assert first["evidence"].rstrip("…") in line
    for ev in report["events"]:
        assert {"line", "time", "kind"} <= set(ev) and ev["kind"] in EVENT_KINDS
