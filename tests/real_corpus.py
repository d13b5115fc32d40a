"""Score `triage` on the real-log corpus: excerpts users pasted into public threads, labelled by hand.

`tests/fixtures/real/labels.yaml` lists every excerpt with the stage and phase its evidence shows, whether
the engine was ready before the failure, the source thread and why. Each excerpt belongs to one split:
`dev` (what the analyzer was tuned on), `heldout` (scored only at the end, never tuned on) or `reserve` (gathered
and labelled like a held-out set, never scored nor read: the next held-out set, scored first when it becomes one).
Each held-out set is scored once, when its entries are added or promoted; tuning on it afterwards makes it dev.

    python -m tests.real_corpus            # both splits, with the misses of the dev split
    python -m tests.real_corpus --split heldout --quiet
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.triage import triage_path

CORPUS = Path(__file__).parent / "fixtures" / "real"
LABELS = CORPUS / "labels.yaml"
SPLITS = ("dev", "heldout")  # the splits scored
RESERVE = "reserve"
STAGES = (
    "weight_loading",
    "graph_capture",
    "kv_cache_alloc",
    "warmup",
    "loading_unknown",
    "prefill",
    "decode",
    "runtime_unknown",
    "none",
)
PHASES = ("loading", "runtime", "none")


@dataclass
class Score:
    """What one split scored: counts, and each excerpt triage got wrong."""

    split: str
    total: int = 0
    phase_ok: int = 0
    stage_ok: int = 0
    failures: int = 0  # excerpts labelled with a memory failure
    missed: int = 0  # ... that triage reported none for
    negatives: int = 0
    false_ooms: int = 0  # negatives that triage reported a memory failure for
    ready_ok: int = 0
    wrong: list[dict[str, Any]] = field(default_factory=list)
    # confidence triage gave a memory failure it found -> [found, phase right, stage right]: is "high" worth more?
    by_confidence: dict[str, list[int]] = field(default_factory=dict)

    @property
    def phase_accuracy(self) -> float:
        return self.phase_ok / self.total if self.total else 0.0

    @property
    def stage_accuracy(self) -> float:
        return self.stage_ok / self.total if self.total else 0.0

    def line(self) -> str:
        if not self.total:
            return f"{self.split:8} {0:4} excerpts"
        return (
            f"{self.split:8} {self.total:4} excerpts: phase {self.phase_accuracy:6.1%}  stage "
            f"{self.stage_accuracy:6.1%}  missed {self.missed}/{self.failures} failures  false OOMs "
            f"{self.false_ooms}/{self.negatives} negatives  ready-before {self.ready_ok}/{self.total}"
        )

    def calibration(self) -> str:
        """How often each confidence triage gave was right, on the failures it found."""
        parts = []
        for conf in ("high", "medium", "low"):
            n, phase, stage = self.by_confidence.get(conf, (0, 0, 0))
            if n:
                parts.append(f"{conf} {n}: phase {phase / n:.0%}, stage {stage / n:.0%}")
        return f"{'':8} by confidence: " + ("; ".join(parts) or "no failures found")


def load_labels(path: Path = LABELS) -> list[dict[str, Any]]:
    """The labels, checked: every entry names an existing file, a known stage, a phase that fits it, a split."""
    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a list of entries")
    seen = set()
    for i, e in enumerate(entries):
        where = f"{path}: entry {i} ({e.get('file')!r})"
        if e.get("stage") not in STAGES or e.get("phase") not in PHASES or e.get("split") not in (*SPLITS, RESERVE):
            raise ValueError(f"{where}: stage, phase or split is not one of the known values")
        expected_phase = (
            "none"
            if e["stage"] == "none"
            else "runtime"
            if e["stage"] in ("prefill", "decode", "runtime_unknown")
            else "loading"
        )
        if e["phase"] != expected_phase:
            raise ValueError(f"{where}: phase {e['phase']} does not fit stage {e['stage']}")
        if not (path.parent / e["file"]).is_file() or e["file"] in seen:
            raise ValueError(f"{where}: file missing or listed twice")
        seen.add(e["file"])
    return entries


def score(split: str, entries: list[dict[str, Any]] | None = None) -> Score:
    result = Score(split)
    for e in entries if entries is not None else load_labels():
        if e["split"] != split:
            continue
        report = triage_path(str(CORPUS / e["file"]))
        first = report["first_oom"]
        stage = first["stage"] if first else "none"
        phase = first["phase"] if first else "none"
        result.total += 1
        result.phase_ok += phase == e["phase"]
        result.stage_ok += stage == e["stage"]
        result.ready_ok += bool(report["ready_before_first_oom"]) == bool(e.get("ready_before")) or e["stage"] == "none"
        if e["stage"] == "none":
            result.negatives += 1
            result.false_ooms += first is not None
        else:
            result.failures += 1
            result.missed += first is None
            if first is not None:
                counts = result.by_confidence.setdefault(first["confidence"], [0, 0, 0])
                counts[0] += 1
                counts[1] += phase == e["phase"]
                counts[2] += stage == e["stage"]
        if stage != e["stage"]:
            result.wrong.append(
                {
                    "file": e["file"],
                    "label": e["stage"],
                    "got": stage,
                    "decided_by": first and first["stage_evidence"],
                    "line": first and first["line"],
                }
            )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=SPLITS + ("both",), default="both")
    parser.add_argument("--quiet", action="store_true", help="figures only, no list of misses")
    args = parser.parse_args(argv)
    entries = load_labels()
    for split in SPLITS if args.split == "both" else (args.split,):
        s = score(split, entries)
        print(s.line())
        print(s.calibration())
        if not args.quiet and split == "dev":
            for w in s.wrong:
                print(f"    {w['file']}: label {w['label']}, got {w['got']} (by {w['decided_by']}, line {w['line']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
