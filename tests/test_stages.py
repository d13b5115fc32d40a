"""The stage machine on hand-made sequences: what counts, what does not, and incidents."""

from __future__ import annotations

import io

from exporter.logs.formats import LogLine
from exporter.logs.stages import LogAnalyzer
from exporter.simulate.logs import APP_READY, log_line, stats_message
from exporter.triage import triage_stream
from tests.helpers import fixture_text

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 80 GiB"
READY = APP_READY
START = "(APIServer pid=1) INFO 08-16 12:00:00 [api_server.py:1] vLLM API server version 0.27.1"
STATS = log_line("APIServer pid=1", "INFO", "loggers.py:1", stats_message(1, 0, 0.05, 0.0, 1.0, 1.0))


def feed(lines: list[str]) -> LogAnalyzer:
    a = LogAnalyzer()
    for i, text in enumerate(lines, 1):
        a.feed(LogLine(i, text))
    return a


def test_user_prompt_with_oom_words_is_not_an_oom():
    a = feed(
        [
            START,
            READY,
            f"(APIServer pid=1) INFO 08-16 12:00:05 [logger.py:40] Received request x: prompt: '{OOM}', params: ...",
            "(APIServer pid=1) INFO 08-16 12:00:05 [logger.py:40] Received request y: prompt: 'out of memory'",
            f"(EngineCore_DP0 pid=2) ERROR 08-16 12:00:06 [dump_input.py:79] Dumping scheduler output for model "
            f"execution: SchedulerOutput(scheduled_new_reqs=[NewRequestData(req_id=z,prompt='{OOM}')])",
        ]
    )
    assert a.first_oom is None and a.counts["oom"] == 0


def test_look_alikes_are_not_ooms():
    lines = [
        START,
        READY,
        "(EngineCore_DP0 pid=2) ERROR 08-16 12:00:06 [core.py:1] RuntimeError: CUDA error: an illegal memory access was encountered",
        "[rank0]:[E816 12:00:07.1 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(...)",
        "(EngineCore_DP0 pid=2) ERROR 08-16 12:00:06 [core.py:1] ImportError: libcudart.so.13: cannot open shared object file",
        "WARNING 08-16 12:00:08 scheduler.py:1491] Sequence group 7 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.",
        "ERROR 08-16 12:00:09 [serving_chat.py:1] ValueError: This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
    ]
    a = feed(lines)
    assert a.counts["oom"] == 0
    assert a.counts["illegal_memory_access"] == 1 and a.counts["comm_error"] == 1
    assert a.counts["preemption"] == 1 and a.counts["context_rejected"] == 1


def test_one_failure_printed_by_many_ranks_is_one_incident():
    lines = [START, "(Worker_TP0 pid=5) INFO 08-16 12:00:01 [gpu_model_runner.py:1] Starting to load model m..."]
    for rank in range(8):
        lines += [
            f"(Worker_TP{rank} pid={10 + rank}) ERROR 08-16 12:00:02 [x.py:1] Traceback (most recent call last):",
            f"(Worker_TP{rank} pid={10 + rank}) ERROR 08-16 12:00:02 [x.py:1] {OOM}",
        ]
    lines.append("(EngineCore_DP0 pid=3) ERROR 08-16 12:00:03 [core.py:1] EngineCore failed to start.")
    a = feed(lines)
    assert a.counts["oom"] == 1
    assert a.events[0].kind == "oom" and a.events[0].repeats == 7
    assert a.events[0].stage == "weight_loading" and a.events[0].phase == "loading"
    assert a.epoch.engine_stage == "crashed"


def test_two_runtime_ooms_separated_by_health_count_twice():
    a = feed(
        [START, READY, f"ERROR 08-16 12:01:00 [core.py:1] {OOM}", STATS, f"ERROR 08-16 12:02:00 [core.py:1] {OOM}"]
    )
    assert a.counts["oom"] == 2
    assert all(ev.phase == "runtime" and ev.stage == "runtime_unknown" for ev in a.events if ev.kind == "oom")


def test_restart_opens_a_new_epoch_and_stage_follows_markers():
    a = feed(
        [
            START,
            READY,
            f"ERROR 08-16 12:01:00 [core.py:1] {OOM}",
            START,
            "INFO 08-16 12:05:00 [gpu_model_runner.py:1] Model loading took 10.0 GiB and 5.0 seconds",
            f"ERROR 08-16 12:05:01 [core.py:1] {OOM}",
        ]
    )
    assert len([e for e in a.epochs if e.started]) == 2
    ooms = [ev for ev in a.events if ev.kind == "oom"]
    assert [(e.phase, e.stage) for e in ooms] == [("runtime", "runtime_unknown"), ("loading", "kv_cache_alloc")]
    assert a.first_oom is ooms[0]


def test_log_starting_mid_run_reads_as_runtime():
    a = feed([STATS, f"(EngineCore_DP0 pid=2) ERROR 08-16 12:01:00 [core.py:1] {OOM}"])
    assert a.events[0].phase == "runtime"
    assert a.epoch.engine_stage == "ready"  # the OOM alone does not say the engine died ...
    a.feed(LogLine(3, "(EngineCore_DP0 pid=2) ERROR 08-16 12:01:00 [core.py:1] EngineCore encountered a fatal error."))
    assert a.epoch.engine_stage == "crashed"  # ... its fatal-error line does


def test_engine_stage_progresses_through_startup():
    a = LogAnalyzer()
    seen = []
    for i, text in enumerate(fixture_text("healthy_v1_tp8.log").split("\n"), 1):
        a.feed(LogLine(i, text))
        if not seen or seen[-1] != a.epoch.engine_stage:
            seen.append(a.epoch.engine_stage)
    assert seen == [
        "unknown",
        "loading_unknown",
        "weight_loading",
        "kv_cache_alloc",
        "graph_capture",
        "kv_cache_alloc",
        "graph_capture",
        "warmup",
        "ready",
    ]


def test_tqdm_carriage_returns_are_read_as_separate_frames():
    a = feed(
        [
            START,
            "Capturing CUDA graphs (decode, FULL):  10%|#| 1/10\rCapturing CUDA graphs (decode, FULL):  20%|#| 2/10",
        ]
    )
    assert a.epoch.stage == "graph_capture"


def test_evidence_carries_no_other_log_text_and_no_control_characters():
    a = feed([START, f"ERROR 08-16 12:01:00 [core.py:1] {OOM}\x07\x1b]0;title" + "x" * 1000])
    ev = a.events[0]
    assert ev.evidence.startswith("torch.OutOfMemoryError") and len(ev.evidence) <= 240
    assert all(ch.isprintable() for ch in ev.evidence)


def test_garbage_never_crashes_and_never_invents_an_oom():
    import random

    rng = random.Random(7)
    blob = bytes(rng.randrange(256) for _ in range(200_000))
    report = triage_stream("garbage", io.BytesIO(blob))
    assert report["first_oom"] is None and report["lines"] > 0


def test_truncated_log_mid_traceback_still_reports_the_oom():
    text = fixture_text("oom_kv_cache_insufficient.log")
    cut = text[: text.index("larger than the available") + 10]  # the file ends mid-line
    report = triage_stream("cut", io.BytesIO(cut.encode()))
    assert report["first_oom"]["stage"] == "kv_cache_alloc"


def test_events_and_memory_stay_bounded():
    a = LogAnalyzer(max_events=50)
    for i in range(5000):
        a.feed(
            LogLine(
                i,
                "WARNING 08-16 12:00:08 scheduler.py:1] Sequence group 7 is preempted by PreemptionMode.RECOMPUTE mode",
            )
        )
    assert len(a.events) == 50 and a.counts["preemption"] == 5000
