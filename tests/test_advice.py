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
