"""Triage on real logs users pasted into public threads, and the daemon's counter agreeing with it.

The figures are printed by `make triage-score` (python -m tests.real_corpus). The dev split (what the analyzer was
tuned on) must meet the issue's bar: phase >= 97 %, stage >= 90 %, no false OOM. A held-out split is scored once
and never tuned on; until ho19 each was then moved into dev. Eighteen held-out sets have been scored so: `ho-` (40
excerpts: phase 90.0 %, stage 85.0 %), `ho2-` (33: 90.9 %, 90.9 %), `ho3-` (39: 82.1 %, 74.4 %, 1/23 failures
missed), `ho4-` (30: 96.7 %, 83.3 %, 1/17 missed), `ho5-` (23: 87.0 %, 87.0 %, 1/11 missed),
`ho6-` (23: 100.0 %, 95.7 %), `ho7-` (26: 80.8 %,
80.8 %), `ho8-` (22: 86.4 %, 81.8 %, 2/6 missed), `ho9-` (30: 80.0 %, 80.0 %), `ho10-` (35: 88.6 %, 85.7 %, 1/14
missed), `ho11-` (33: 81.8 %, 81.8 %), `ho12-` (30: 90.0 %, 90.0 %, 1/10 missed) and `ho13-` (36: 94.4 %, 91.7 %),
scored together at 2d0997d (66: 92.4 %, 90.9 %), and `ho14-` (33, at 714b90d: 90.9 %, 87.9 %, 1/15 missed, and 1/18
false OOMs, the only one so far), and `ho15-` (25, 15 of them from repositories' files rather than threads, at
a0797d9: 88.0 %, 88.0 %, 3/8 missed), and `ho16-` in two parts (24 at 3e21bfa: 91.7 %, 83.3 %, 1/11 missed; 11 from
repositories' files at 4d26e80: 100 %, 100 %), `ho17-` (21 from repositories' files, at a487b49: 95.2 %, 90.5 %,
1/6 missed) and `ho18-` (22, most from repositories' files and notes, at bd9569f: 95.5 %, 90.9 %, 1/10 missed).
All eighteen pooled (536 excerpts): phase 89.4 %, stage 86.0 %. One met the bar (`ho6-`), and the second part of
`ho16-`; five more met its stage (`ho2-`, `ho12-`, `ho13-`, `ho17-`, `ho18-`). All are in dev now. The nineteenth,
`ho19-` (36 excerpts, 14 memory failures, gathered from vLLM's and downstream projects' threads, web pages and
repositories' files), was scored once at 4d5e41b: phase 97.2 %, stage 97.2 %, 1/14 missed, 0/22 false OOMs. It met
the bar and stays the held-out split, never tuned on, held to the issue's bar (BAR["heldout"]). Nineteen pooled
(572): phase 89.9 %, stage 86.7 %.
"""

from __future__ import annotations

import io
import re
import shutil

import pytest

from exporter.config import LogSource
from exporter.logs.formats import read_lines
from exporter.logs.pastes import find_wrap, reads_as_line, unpasted
from exporter.logs.tailer import LogTailer
from exporter.triage import triage_path, triage_stream
from tests.real_corpus import CORPUS, SPLITS, load_labels, score

ENTRIES = load_labels()
BAR = {"dev": (0.97, 0.90), "heldout": (0.97, 0.90)}  # (phase, stage): the bar on both splits


def test_the_corpus_is_large_and_varied_enough_to_mean_something():
    assert len(ENTRIES) >= 80
    negatives = [e for e in ENTRIES if e["stage"] == "none"]
    assert len(negatives) >= 30
    heldout = sum(e["split"] == "heldout" for e in ENTRIES)
    assert heldout == 0 or heldout >= 20, "a held-out split of fewer than 20 excerpts says little"
    assert len({e["stage"] for e in ENTRIES}) >= 7
    assert all(e.get("source", "").startswith("http") and e.get("why") for e in ENTRIES)


@pytest.mark.parametrize("split", SPLITS)
def test_triage_holds_on_real_logs(split):
    if not any(e["split"] == split for e in ENTRIES):
        pytest.skip(f"no {split} excerpts in labels.yaml")
    s = score(split, ENTRIES)
    # The held-out split is scored, never read: its misses are counted, not named, so nobody tunes on them.
    misses = "\n".join(f"{w['file']}: label {w['label']}, got {w['got']}" for w in s.wrong) if split == "dev" else ""
    min_phase, min_stage = BAR[split]
    assert s.false_ooms == 0, misses
    assert s.phase_accuracy >= min_phase, f"{s.line()}\n{misses}"
    assert s.stage_accuracy >= min_stage, f"{s.line()}\n{misses}"


def test_the_daemons_counter_agrees_with_triage_on_every_real_log(tmp_path):
    """Fed through the tailer as the daemon reads it, each log counts OOMs under the stages triage names. A paste's own
    marks (a viewer's line numbers, a terminal's wraps, an indent or label on every line) are taken off by triage's
    paste reader before its analyzer; a live log the daemon follows has none, so such an excerpt is fed to the tailer
    as the paste reader reads it."""
    disagreements = []
    for e in ENTRIES:
        path = tmp_path / e["file"]
        shutil.copyfile(CORPUS / e["file"], path)
        with open(CORPUS / e["file"], "rb") as f:
            fmt, raw_lines = read_lines(f)
            lines = list(raw_lines)
        read = [line.text for line in unpasted(lines)]
        if fmt == "plain" and read != [line.text for line in lines]:
            path.write_text("\n".join(read), encoding="utf-8")
        with open(path, "ab") as f:  # a live log's last line counts once its newline is written
            if path.stat().st_size and path.read_bytes()[-1:] != b"\n":
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


@pytest.mark.parametrize("style", ["{n:>4} {line}", "{n}: {line}", "{n:>6}\t{line}", "{n} | {line}"])
def test_a_paste_with_its_viewers_line_numbers_reads_as_without(style):
    """Numbered pastes (a pastebin's view, `cat -n`): every dev log of 3 lines or more, numbered, triages the same."""
    changed = []
    for e in ENTRIES:
        if e["split"] != "dev":
            continue
        text = (CORPUS / e["file"]).read_text(encoding="utf-8", errors="replace")
        lines = text.split("\n")
        if len(lines) < 3:
            continue
        numbered = "\n".join(style.format(n=n, line=line) for n, line in enumerate(lines, 1))
        plain, pasted = (triage_stream("-", io.BytesIO(t.encode())) for t in (text, numbered))
        got = [(r["first_oom"] or {}).get("stage") for r in (plain, pasted)]
        if got[0] != got[1] or plain["oom_by_stage"] != pasted["oom_by_stage"]:
            changed.append(f"{e['file']}: {got[0]} -> {got[1]}")
    assert not changed, "\n".join(changed)


@pytest.mark.parametrize(
    "label",
    [
        "[pod/vllm-7d9f8b7c5-x2x4z/vllm] ",  # kubectl logs --prefix
        "vllm-7d9f8b7c5-x2x4z vllm ",  # stern
        "0: ",  # srun --label
        "2025-05-09T15:30:16+0000 gpu-node-1 vllm[1234]: ",  # journalctl -o short-iso
        "[1,0]<stdout>:",  # mpirun --tag-output
        "(task, pid=12345) ",  # SkyPilot
        "[mineru] ",  # a service's name a launcher put in front
        "vllm-server-1  | ",  # docker compose's service column
        "2025-03-01T12:00:07.123456789Z ",  # kubectl logs --timestamps
        "> ",  # quoted in a reply
        "\t",  # the whole excerpt indented inside a list
    ],
)
def test_a_paste_a_collector_labelled_reads_as_without(label):
    """Every line labelled alike by what collected the log: every dev log of two lines or more triages the same, but
    for a paste a terminal wrapped (a collector labels lines before any terminal cuts them) and one in which no line reads as a log line
    either way (nothing tells the label from the text)."""
    changed, tried = [], 0
    for e in ENTRIES:
        if e["split"] != "dev":
            continue
        lines = (CORPUS / e["file"]).read_text(encoding="utf-8", errors="replace").split("\n")
        if sum(bool(line.strip()) for line in lines) < 2:
            continue  # one line: an indented one may be a source line (a label is sought over 2 lines or more)
        if find_wrap(lines) is not None or not any(reads_as_line(line) for line in lines):
            continue
        tried += 1
        labelled = [label + line if line else line for line in lines]
        plain, pasted = (triage_stream("-", io.BytesIO("\n".join(t).encode())) for t in (lines, labelled))
        got = [(r["first_oom"] or {}).get("stage") for r in (plain, pasted)]
        if got[0] != got[1] or plain["oom_by_stage"] != pasted["oom_by_stage"]:
            changed.append(f"{e['file']}: {got[0]} -> {got[1]}")
    assert tried >= 250 and not changed, "\n".join(changed)


@pytest.mark.parametrize("width", [80, 120, 160, 200])
def test_a_paste_a_terminal_hard_wrapped_reads_as_unwrapped(width):
    """Copied out of a terminal, every line longer than the window is cut into window-wide pieces (and colour codes
    are left behind). Every dev log with
    at least two lines to cut triages the same cut (with one, a wrap cannot be told from a long line: left as is)."""
    changed, tried = [], 0
    for e in ENTRIES:
        if e["split"] != "dev":
            continue
        lines = (CORPUS / e["file"]).read_text(encoding="utf-8", errors="replace").split("\n")
        if sum(len(line) > width for line in lines) < 2:
            continue
        tried += 1
        # copied out of a terminal: its colours are not (and a window's width counts what shows, not escapes)
        shown = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in lines]
        cut = [line[i : i + width] for line in shown for i in range(0, max(len(line), 1), width)]
        plain, pasted = (triage_stream("-", io.BytesIO("\n".join(t).encode())) for t in (lines, cut))
        got = [(r["first_oom"] or {}).get("stage") for r in (plain, pasted)]
        if got[0] != got[1] or plain["oom_by_stage"] != pasted["oom_by_stage"]:
            changed.append(f"{e['file']}: {got[0]} -> {got[1]}")
    assert tried >= 20 and not changed, "\n".join(changed)


def test_the_held_out_split_is_scored_apart_when_it_has_entries(capsys):
    """The machinery scores a held-out split apart from dev (shown on dev entries relabelled, so that the real
    held-out split is never read here), and `make triage-score` prints both."""
    from tests.real_corpus import main

    base = [e for e in ENTRIES if e["split"] == "dev"]  # the real held-out split stays unread here
    moved = [dict(e, split="heldout") if i % 4 == 0 else e for i, e in enumerate(base)]
    held, dev = score("heldout", moved), score("dev", moved)
    totals = (held.total, held.total + dev.total, held.negatives + held.failures)  # numbers only: no names
    assert totals == (len(base[::4]), len(base), held.total)
    assert main(["--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("dev") and out[2].startswith("heldout")
    # each split's line is followed by how often each confidence was right
    assert all(line.split() and line.split()[:2] == ["by", "confidence:"] for line in (out[1], out[3]))
    conf = held.by_confidence
    assert sum(n for n, _, _ in conf.values()) == held.failures - held.missed
    assert all(n >= phase >= 0 and n >= stage >= 0 for n, phase, stage in conf.values())


def test_a_reserved_set_is_never_scored():
    """The next held-out set waits in `reserve`, labelled but unscored (shown on dev entries relabelled)."""
    base = [e for e in ENTRIES if e["split"] == "dev"][:10]
    moved = [dict(e, split="reserve") if i % 2 else e for i, e in enumerate(base)]
    assert (score("dev", moved).total, score("heldout", moved).total) == (5, 0)
    assert load_labels() == ENTRIES  # reserve entries pass the same checks as the others
