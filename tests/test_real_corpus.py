"""Triage on real logs users pasted into public threads, and the daemon's counter agreeing with it.

The figures are printed by `make triage-score` (python -m tests.real_corpus). The dev split (what the analyzer
was tuned on) must meet the bar: phase >= 97 %, stage >= 90 %. The held-out split was scored once, after tuning,
and is never tuned on: it must show no false OOM, and the floors below are what it measured then (phase 90.0 %,
stage 85.0 % on 40 excerpts), kept so a change that makes triage worse on logs it never saw fails here. The
held-out split does not meet the dev bar; the README says so.
"""

from __future__ import annotations

import shutil

import pytest

from exporter.config import LogSource
from exporter.logs.tailer import LogTailer
from exporter.triage import triage_path
from tests.real_corpus import CORPUS, SPLITS, load_labels, score

ENTRIES = load_labels()
BAR = {"dev": (0.97, 0.90), "heldout": (0.875, 0.825)}  # (phase, stage); held-out: measured minus one excerpt


def test_the_corpus_is_large_and_varied_enough_to_mean_something():
    assert len(ENTRIES) >= 80
    negatives = [e for e in ENTRIES if e["stage"] == "none"]
    assert len(negatives) >= 30
    assert sum(e["split"] == "heldout" for e in ENTRIES) >= 20
    assert len({e["stage"] for e in ENTRIES}) >= 7
    assert all(e.get("source", "").startswith("http") and e.get("why") for e in ENTRIES)


@pytest.mark.parametrize("split", SPLITS)
def test_triage_holds_on_real_logs(split):
    s = score(split, ENTRIES)
    # The held-out split is scored, never read: its misses are counted, not named, so nobody tunes on them.
    misses = "\n".join(f"{w['file']}: label {w['label']}, got {w['got']}" for w in s.wrong) if split == "dev" else ""
    min_phase, min_stage = BAR[split]
    assert s.false_ooms == 0, misses
    assert s.phase_accuracy >= min_phase, f"{s.line()}\n{misses}"
    assert s.stage_accuracy >= min_stage, f"{s.line()}\n{misses}"


def test_the_daemons_counter_agrees_with_triage_on_every_real_log(tmp_path):
    """Fed through the tailer as the daemon reads it, each log counts OOMs under the stages triage names."""
    disagreements = []
    for e in ENTRIES:
        path = tmp_path / e["file"]
        shutil.copyfile(CORPUS / e["file"], path)
        with open(path, "ab") as f:  # a live log's last line counts once its newline is written
            if path.stat().st_size and (CORPUS / e["file"]).read_bytes()[-1:] != b"\n":
                f.write(b"\n")
        tailer = LogTailer("s", LogSource(str(path)), None)
        while tailer.poll():
            pass
        report = triage_path(str(CORPUS / e["file"]))
        counted = {f"{stage}/{phase}": n for (stage, phase), n in tailer.analyzer.oom_counts.items()}
        first = tailer.analyzer.first_oom
        if counted != report["oom_by_stage"] or (first and first.stage) != (report["first_oom"] or {}).get("stage"):
            disagreements.append(f"{e['file']}: daemon {counted}, triage {report['oom_by_stage']}")
        tailer.close()
    assert not disagreements, "\n".join(disagreements)
