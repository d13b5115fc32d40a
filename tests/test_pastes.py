"""What a paste adds (a viewer's line numbers, a collector's label, a terminal's hard wraps) is taken off; a log's own
lines are not."""

from __future__ import annotations

from exporter.logs.formats import LogLine
from exporter.logs.pastes import common_label, find_wrap, unnumbered, unpasted

PREFIX = "(EngineCore_DP0 pid=7) ERROR 01-01 00:00:00 [core.py:1] "
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 1.06 GiB is free."
)


def lines(texts: list[str]) -> list[LogLine]:
    return [LogLine(i, t) for i, t in enumerate(texts, 1)]


def texts(got: object) -> list[str]:
    return [line.text for line in got]  # type: ignore[attr-defined]


def test_numbers_that_do_not_count_up_are_the_lines_own():
    own = ["3 GPUs found", "INFO 01-01 00:00:00 [core.py:1] 12 requests", "7 workers", "8 tasks"]
    assert texts(unnumbered(lines(own))) == own
    assert texts(unnumbered(lines([f"{i + 40}  {t}" for i, t in enumerate(own)]))) == own


def test_a_wrapped_traceback_is_joined_and_its_line_numbers_kept():
    log = [
        PREFIX + "Traceback (most recent call last):",
        PREFIX + '  File "/usr/lib/python3/site-packages/vllm/v1/worker/gpu_model_runner.py", line 9, in profile_run',
        PREFIX + "    self._dummy_run(self.max_num_tokens)",
        PREFIX + OOM,
        "INFO 01-01 00:00:01 [launcher.py:2] Shutting down",
    ]
    width = 90
    cut = [line[i : i + width] for line in log for i in range(0, len(line), width)]
    got = list(unpasted(lines(cut)))
    assert texts(got) == log
    starts = [i + 1 for i, piece in enumerate(cut) if piece.startswith(("(", "INFO"))]
    assert [line.number for line in got] == starts


def test_lines_of_one_template_are_as_wide_as_each_other_but_not_wrapped():
    """Repeated lines whose numbers have as many digits are exactly as wide; each next line begins like the rest."""
    bar = "[AutoTuner]: Tuning fp8_gemm:  86%|████ | 18/21 [00:00<00:00, 22.{:02d}profile/s] falling back to default"
    log = [bar.format(i) if i % 2 else "[AutoTuner]: Tuning fp8_gemm: 100%|█████| 21/21" for i in range(8)]
    assert find_wrap(log) is None
    assert texts(unpasted(lines(log))) == log


def test_one_line_repeated_word_for_word_is_not_a_wrap():
    log = [PREFIX + OOM, "tail of something", PREFIX + OOM, "tail of something"]
    assert find_wrap(log) is None


def test_a_long_line_followed_by_its_indented_code_is_not_joined():
    frame = '  File "/usr/lib/python3/site-packages/vllm/model_executor/model_loader/default_loader.py", line 1, in f'
    log = [frame, "    load()", frame.replace("in f", "in g"), "    go()", "RuntimeError: boom"]
    assert texts(unpasted(lines(log))) == log


def test_a_fixed_width_table_is_not_a_wrapped_paste():
    """nvidia-smi's rows are all as wide; a traceback line as wide as them must not swallow the exception below."""
    smi = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  |   00000000:07:00.0 Off |                    0 |
| N/A   34C    P0             62W /  400W |   78211MiB /  81920MiB |      0%      Default |
|                                         |                        |             Disabled |
+-----------------------------------------+------------------------+----------------------+"""
    code = "    hidden_states = model_executable(input_ids=input_ids, positions=positions, kv_caches=kv"
    assert {len(line) for line in smi.split("\n")} == {len(code)}
    log = [*smi.split("\n"), "Traceback (most recent call last):", code, "RuntimeError: CUDA error: out of memory"]
    assert find_wrap(log) is None
    assert texts(unpasted(lines(log))) == log


TRACEBACK = [
    f"{PREFIX}Traceback (most recent call last):",
    '  File "/x/vllm/v1/engine/core.py", line 1, in run_busy_loop',
    "    self._process_engine_step()",
    OOM,
]


def test_a_collectors_label_on_every_line_is_found_up_to_its_end():
    for label in ("vllm-7d9f8b7c5-x2x4z vllm ", "node-3: ", "\t", "    "):
        assert common_label([label + t for t in TRACEBACK]) == label
    # nine lines in ten carry it: a line the user typed above the log does not stop it
    labelled = ["$ kubectl logs vllm-0", *(["node-3: " + t for t in TRACEBACK] * 3)]
    assert common_label(labelled) == "node-3: "
    assert texts(unpasted(lines(labelled)))[1:5] == TRACEBACK


def test_vllms_own_prefix_a_timestamp_or_a_minoritys_label_is_never_taken():
    own = [f"{PREFIX}{t.strip()}" for t in TRACEBACK]
    assert common_label(own) is None  # a process tag and a level: vLLM's, read by the record parser
    ranks = [f"[rank0]: {t}" for t in TRACEBACK]
    assert common_label(ranks) is None
    stamped = [f"2025-05-09T15:30:{10 + i}Z {t}" for i, t in enumerate(TRACEBACK)]
    assert common_label(stamped) is None  # cut at its ':' the time would stop the lines reading
    few = ["node-3: " + TRACEBACK[0], *TRACEBACK[1:], *TRACEBACK]
    assert common_label(few) is None
    prose = ["see below", "it fails", "after a while"]
    assert common_label(["node-3: " + t for t in prose]) is None  # nothing reads either way: nothing says it is a label


def test_two_lines_under_a_collectors_label_are_read_too():
    """A two-line paste (a KV-sizing line and the failed start) carries its collector's label as surely as a long
    one: both lines read as log lines only without it."""
    two = [
        "vllm-7d9f8b7c5-x2x4z vllm (EngineCore_DP0 pid=7) INFO 01-15 06:47:41 [worker_v1.py:270] Available memory: 0",
        "vllm-7d9f8b7c5-x2x4z vllm (EngineCore_DP0 pid=7) ERROR 01-15 06:47:41 [core.py:843] EngineCore failed to start.",
    ]
    assert common_label(two) == "vllm-7d9f8b7c5-x2x4z vllm "
    assert common_label(["node-3: see below", "node-3: it fails"]) is None  # nothing reads either way
    assert common_label([two[0], "node-3 vllm " + two[1][26:]]) is None  # both lines must carry it


def test_a_label_the_parser_takes_off_some_lines_is_taken_off_all():
    """On lines that lost vLLM's prefix, a label the record parser peels only before a line start it knows (Slurm's
    `0: `, a launcher's `[service] `) stays in the message of the others: on every line, it is taken off all."""
    bare = ["Available KV cache memory: -1.01 GiB", "ValueError: This number can not be negative ..."]
    for label in ("0: ", "[mineru] "):
        assert common_label([label + t for t in bare]) == label
        assert texts(unpasted(lines([label + t for t in bare]))) == bare
    assert common_label(["[Gloo] Rank 0 is connected", "[Gloo] Rank 1 is connected"]) is None  # peeled nowhere
    assert common_label(["0: " + bare[0], bare[1]]) is None  # not on every line
