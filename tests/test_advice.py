"""The next move follows the guide: loading never says lower concurrency, runtime never new hardware first."""

from __future__ import annotations

import io

import pytest

from exporter.advice import next_move
from exporter.triage import triage_stream
from tests.helpers import fixture_names, fixture_text


@pytest.mark.parametrize("stage", ["weight_loading", "graph_capture", "kv_cache_alloc", "warmup", "loading_unknown"])
def test_loading_move_checks_environment_and_never_lowers_concurrency(stage):
    text = next_move({"stage": stage, "phase": "loading"}, {"tensor_parallel_size": 8}, {})
    assert "lowering concurrency does not help" in text
    lowered = text.lower().replace("lowering concurrency does not help", "")
    assert "concurrency" not in lowered and "max_num_seqs" not in lowered
    for word in ("image", "driver", "hardware", "topology", "TP=8"):
        assert word in text


@pytest.mark.parametrize("stage", ["prefill", "decode", "runtime_unknown"])
def test_runtime_move_reduces_load_first_and_scales_last(stage):
    text = next_move({"stage": stage, "phase": "runtime"}, {"max_model_len": 1048576}, {})
    for word in ("context", "concurrency", "cache retention", "replay the same request set"):
        assert word in text
    assert text.index("Reduce") < text.index("Scale out")
    assert "hardware" not in text and "driver" not in text


def test_moves_on_fixtures_match_their_phase():
    for name in fixture_names():
        report = triage_stream(name, io.BytesIO(fixture_text(name).encode()))
        first = report["first_oom"]
        if first is None:
            assert report["next_move"].startswith("No memory failure")
        elif first["phase"] == "loading":
            assert report["next_move"].startswith("Loading-stage OOM")
        else:
            assert report["next_move"].startswith("Runtime OOM")


def test_a_guessed_phase_is_said_to_be_a_guess_with_the_other_reading():
    """When nothing said whether the engine was ready, the advice says so and what to do if the reading is wrong:
    the two phases call for opposite first moves."""
    base = {"stage": "runtime_unknown", "phase": "runtime", "stage_evidence": "frame", "confidence": "medium"}
    assert "after the engine was ready" in next_move(base, {}, {})
    assert "whether the engine was ready" not in next_move(base, {}, {})
    guess = next_move(dict(base, stage_evidence="none", confidence="low"), {}, {})
    assert guess.startswith("The log does not show whether the engine was ready")
    assert "after the engine was ready" not in guess and "loading-stage OOM: check the image" in guess
    loading = dict(base, stage="loading_unknown", phase="loading", stage_evidence="allocator", confidence="low")
    said = next_move(loading, {}, {})
    assert "no CUDA-graph memory" in said and "treat it as a runtime OOM" in said
    assert "before the engine was ready" not in said
