"""The shapes real pasted logs come in, one category at a time (the real corpus scores the whole; these say why).

Each case is built the way the category shows up in users' logs: a relayed error inside a line, a launcher's
prefix, a traceback fragment with no startup lines, a failure without the words "out of memory", a memory
error vLLM caught and went on from.
"""

from __future__ import annotations

import gzip
import io
import subprocess
import sys

from exporter.logs.formats import LogLine
from exporter.logs.stages import UNDECIDED_STAGE, LogAnalyzer
from exporter.triage import triage_stream

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.19 GiB of which 1.06 GiB is free."
)
SITE = "/usr/local/lib/python3.12/dist-packages"


def feed(lines: list[str]) -> LogAnalyzer:
    a = LogAnalyzer()
    for i, text in enumerate(lines, 1):
        a.feed(LogLine(i, text))
    return a


def traceback(funcs: list[tuple[str, str]], last: str = OOM, prefix: str = "") -> list[str]:
    """A Python traceback through (file under site-packages, function) frames, outermost first."""
    lines = [f"{prefix}Traceback (most recent call last):"]
    for path, func in funcs:
        lines += [f'{prefix}  File "{SITE}/{path}", line 42, in {func}', f"{prefix}    x = y()"]
    return lines + [f"{prefix}{last}"]


LOAD = [
    ("vllm/v1/engine/core.py", "__init__"),
    ("vllm/v1/worker/gpu_worker.py", "load_model"),
    ("vllm/model_executor/model_loader/base_loader.py", "load_model"),
    ("vllm/model_executor/models/llama.py", "load_weights"),
    ("torch/nn/modules/module.py", "to"),
]
PROFILE = [
    ("vllm/v1/engine/core.py", "_initialize_kv_caches"),
    ("vllm/v1/worker/gpu_worker.py", "determine_available_memory"),
    ("vllm/v1/worker/gpu_model_runner.py", "profile_run"),
    ("vllm/v1/worker/gpu_model_runner.py", "_dummy_run"),
    ("torch/nn/modules/module.py", "_call_impl"),
]
CAPTURE = [
    ("vllm/v1/worker/gpu_worker.py", "compile_or_warm_up_model"),
    ("vllm/v1/worker/gpu_model_runner.py", "capture_model"),
    ("torch/cuda/graphs.py", "__exit__"),
]
SAMPLER_WARMUP = [
    ("vllm/v1/worker/gpu_worker.py", "compile_or_warm_up_model"),
    ("vllm/v1/worker/gpu_model_runner.py", "_dummy_sampler_run"),
    ("vllm/v1/sample/sampler.py", "forward"),
]
V0_PROFILE = [
    ("vllm/worker/worker.py", "determine_num_available_blocks"),
    ("vllm/worker/model_runner.py", "profile_run"),
    ("vllm/worker/model_runner.py", "execute_model"),
    ("vllm/model_executor/models/qwen2.py", "forward"),
]
SERVING = [
    ("vllm/v1/engine/core.py", "run_busy_loop"),
    ("vllm/v1/engine/core.py", "step"),
    ("vllm/v1/executor/abstract.py", "execute_model"),
    ("vllm/v1/worker/gpu_model_runner.py", "execute_model"),
]
MODEL_INIT = [
    ("vllm/model_executor/model_loader/utils.py", "initialize_model"),
    ("vllm/model_executor/models/deepseek_v2.py", "__init__"),
    ("torch/utils/_device.py", "__torch_function__"),
]


def stage_of(lines: list[str]) -> tuple[str | None, str | None]:
    a = feed(lines)
    return (a.first_oom.stage, a.first_oom.stage_evidence) if a.first_oom else (None, None)


def test_a_traceback_fragment_names_its_stage_by_its_frames():
    assert stage_of(traceback(LOAD)) == ("weight_loading", "frame")
    assert stage_of(traceback(PROFILE)) == ("kv_cache_alloc", "frame")
    assert stage_of(traceback(CAPTURE)) == ("graph_capture", "frame")
    assert stage_of(traceback(SAMPLER_WARMUP)) == ("warmup", "frame")
    assert stage_of(traceback(MODEL_INIT)) == ("weight_loading", "frame")
    # V0 profiled memory by running execute_model: still memory profiling, not serving
    assert stage_of(traceback(V0_PROFILE)) == ("kv_cache_alloc", "frame")
    assert stage_of(traceback(SERVING))[0] == "runtime_unknown"


def test_stage_frames_under_launcher_prefixes():
    for prefix in (
        "[rank0]: ",
        "(RayWorkerWrapper pid=4242, ip=10.0.0.2) ",
        "vllm-1  | ",
        "(APIServer pid=1) (EngineCore_DP0 pid=77) ",
        "2026-01-02T03:04:05.678Z ",
        "> ",
        "[pod/vllm-7d9f8b7c5-x2x4z/vllm] ",  # kubectl logs --prefix
        "2025-05-09T15:30:16+0000 gpu-node-1 vllm[1234]: ",  # journalctl -o short-iso
        "[1,0]<stdout>:",  # mpirun --tag-output
        "[mineru] ",  # a service's name a launcher put in front: its frame lines too
    ):
        assert stage_of(traceback(CAPTURE, prefix=prefix)) == ("graph_capture", "frame"), prefix


def test_collectors_prefixes_are_peeled_to_vllms_own_record():
    """What a collector writes in front of vLLM's line is peeled: the record underneath reads as without it."""
    from exporter.logs.records import parse_record

    line = "(EngineCore_DP0 pid=77) INFO 08-16 12:00:02 [gpu_worker.py:1] Available KV cache memory: 3.2 GiB"
    own = parse_record(line)
    for prefix in (
        "[pod/vllm-7d9f8b7c5-x2x4z/vllm] ",  # kubectl logs --prefix
        "2025-05-09T15:30:16+0000 gpu-node-1 vllm[1234]: ",  # journalctl -o short-iso
        "[1,0]<stdout>:",  # mpirun --tag-output
        "vllm-1  | ",  # docker compose
        "[mineru] ",  # a service's name a launcher put in front
        "[mineru] ^[[0;36m",  # ... and a colour code pasted as ^[
        "    2026-01-02T03:04:05.678Z ",  # a timestamped line of an excerpt indented in a list, its wraps not
        "2025-06-06T19:02:34.086Z DEBUG dynamo_run::subprocess: ",  # a Rust launcher's `tracing` relay (Dynamo)
    ):
        got = parse_record(prefix + line)
        assert (got.process, got.level, got.source, got.message) == (own.process, own.level, own.source, own.message)
    # ... and a traceback's frame and exception lines under it, written to stderr without vLLM's prefix
    for text in ('  File "/x/vllm/v1/engine/core.py", line 1, in run', "torch.OutOfMemoryError: CUDA out of memory."):
        assert parse_record("[mineru] " + text).message == parse_record(text).message
    # a bracketed word that opens a message, not a vLLM line, stays in it
    for text in ("[Gloo] Rank 0 is connected to 1 peer ranks.", "[Autotuner]: Skipping tactic 3", "[mineru] ready"):
        assert parse_record(text).message == text


def test_a_rust_launchers_relay_of_pythons_log_lines_reads_as_vllms_lines():
    """Dynamo's dynamo-run relays the vLLM it runs through Rust's `tracing` (`TIME LEVEL target: `), each line holding
    vLLM's own line as Dynamo's Python logging writes it (`TIME LEVEL module.function: message`): both peeled, the
    inner level kept as another logger's. Without Dynamo's timestamp, `LEVEL name: ` is text, as before (another
    program's line quoting vLLM's words is not vLLM's)."""
    from exporter.logs.records import parse_record

    relay = "2025-06-06T19:02:34.086Z DEBUG dynamo_run::subprocess: "
    load = relay + "2025-06-06T19:02:34.086Z  INFO model_runner.load_model: Starting to load model /m/llama..."
    got = parse_record(load)
    assert (got.foreign_level, got.message) == ("INFO", "Starting to load model /m/llama...")
    oom = relay + "2025-06-06T19:02:34.249Z ERROR engine.run_mp_engine: " + OOM.split(": ", 1)[1]
    assert parse_record(oom).foreign_level == "ERROR"
    assert decided([load, oom]) == ("weight_loading", "marker")
    assert decided([load.replace(relay, ""), oom.replace(relay, "")]) == ("weight_loading", "marker")  # unrelayed
    for text in (
        "INFO: see dynamo_run::subprocess: for details",
        "ERROR app.client: request 17 failed: openai.InternalServerError: EngineDeadError",
        "ERROR torch.OutOfMemoryError: CUDA out of memory.",
    ):
        assert text.endswith(parse_record(text).message) and parse_record(text).level in (None, "INFO")
    assert parse_record("ERROR app.client: request 17 failed").message == "ERROR app.client: request 17 failed"


def test_a_memory_error_relayed_inside_a_line_counts():
    relayed = [
        "(EngineCore_DP0 pid=7) ERROR 08-16 12:00:02 [core.py:1] RuntimeError: Worker failed with error 'CUDA out "
        "of memory. Tried to allocate 1.00 GiB', please check the stack trace above for the root cause",
        "ERROR 08-16 12:00:02 [async_llm.py:1] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an "
        "issue: OutOfMemoryError('HIP out of memory. Tried to allocate 512.00 MiB')",
        "openai.InternalServerError: Error code: 500 - {'object': 'error', 'message': 'CUDA out of memory. Tried to "
        "allocate 3.00 GiB'}",
        "emory. Tried to allocate 20.00 MiB. GPU 3 has a total capacity of 23.68 GiB of which 3.06 MiB is free.",
    ]
    for line in relayed:
        a = feed([line])
        assert a.counts["oom"] == 1, line


def test_users_text_is_never_a_memory_failure():
    quoted = [
        f"INFO 08-16 12:00:05 [logger.py:40] Received request chatcmpl-1: prompt: 'why {OOM}', params: ...",
        f'DEBUG 08-16 12:00:05 [serving_chat.py:1] body {{"messages": [{{"role": "user", "content": "{OOM}"}}]}}',
        f"ERROR 08-16 12:00:06 [dump_input.py:79] Dumping scheduler output for model execution: SchedulerOutput("
        f"scheduled_new_reqs=[NewRequestData(req_id=z,prompt='{OOM}')])",
        "WARNING 08-16 12:00:07 [gpu_worker.py:1] To avoid CUDA out of memory errors, consider lowering "
        "gpu_memory_utilization.",
        "Dec 03 10:00:00 node kernel: Out of memory: Killed process 4242 (python3) total-vm:900000kB",
    ]
    a = feed(quoted)
    assert a.counts["oom"] == 0 and a.first_oom is None


def test_engine_dead_error_quoted_by_another_program_is_not_a_crash():
    a = feed(["my-client: request 17 failed, server said EngineDeadError, retrying"])
    assert a.counts["engine_crash"] == 0
    a = feed(["vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace above."])
    assert a.counts["engine_crash"] == 1


def test_negative_kv_cache_memory_then_a_failed_start_is_a_kv_allocation_failure():
    lines = [
        "(EngineCore_DP0 pid=7) INFO 08-16 12:00:01 [gpu_worker.py:1] Available KV cache memory: -3.21 GiB",
        "(EngineCore_DP0 pid=7) ERROR 08-16 12:00:02 [core.py:1] EngineCore failed to start.",
    ]
    a = feed(lines)
    assert a.first_oom is not None and (a.first_oom.stage, a.first_oom.cause) == ("kv_cache_alloc", "kv_cache_negative")
    assert a.first_oom.line == 1
    # positive memory and a crash for another reason: no memory failure
    a = feed([lines[0].replace("-3.21", "3.21"), lines[1]])
    assert a.first_oom is None
    # vllm-ascend's NPU worker says it in bytes, floored at zero (worker_v1.py determine_available_memory)
    npu = (
        "(EngineCore_DP0 pid=7) INFO 01-15 06:47:41 [worker_v1.py:270] Available memory: {}, total memory: 65452113920"
    )
    a = feed([npu.format(0), lines[1]])
    assert a.first_oom is not None and (a.first_oom.stage, a.first_oom.cause) == ("kv_cache_alloc", "kv_cache_negative")
    assert feed([npu.format(31138512896), lines[1]]).first_oom is None
    # a model without attention layers needs no KV cache: vLLM checks the memory only for a KV-cache spec, and the
    # engine goes on (its `init engine` line); a crash after that is not the cache's
    sized = "(EngineCore_DP0 pid=7) INFO 01-15 06:47:44 [core.py:1] init engine (profile, create kv cache, warmup model) took 3.10 seconds"
    for first in (npu.format(0), lines[0]):
        a = feed([first, sized, lines[1]])
        assert a.first_oom is None and a.counts["engine_crash"] == 1, first


def test_a_log_that_ends_on_a_negative_kv_budget_ends_in_its_failure():
    """vLLM raises right after a negative budget for any model with a KV-cache spec (check_enough_kv_cache_memory):
    an excerpt cut there, or a log gone quiet there, holds the failure. Not zero (Ascend logs it for models that
    need no cache), not when anything followed."""
    neg = "(EngineCore_DP0 pid=7) INFO 08-16 12:00:01 [gpu_worker.py:1] Available KV cache memory: -19.92 GiB"
    loaded = "(EngineCore_DP0 pid=7) INFO 08-16 12:00:00 [gpu_model_runner.py:1] Model loading took 8.49 GiB"
    assert decided([loaded, neg]) == ("kv_cache_alloc", "message")
    a = feed([loaded, neg])
    a.flush()
    assert a.first_oom is not None and a.first_oom.line == 2 and a.counts["oom"] == 1
    assert decided([loaded, neg.replace("-19.92", "0.00")]) == (None, None)
    assert decided([loaded, neg, loaded.replace("Model loading took 8.49 GiB", "GPU KV cache size: 0 tokens")]) == (
        None,
        None,
    )
    # what vLLM itself logs next before it raises: another worker's budget, v0.20's CUDA-graph profiling note
    rank1 = neg.replace("pid=7", "pid=8").replace("-19.92", "-19.90")
    graphs = neg.replace("Available KV cache memory: -19.92 GiB", "CUDA graph memory profiling is enabled (default)")
    assert decided([loaded, neg, rank1, graphs]) == ("kv_cache_alloc", "message")
    assert decided([loaded, neg.replace("-19.92", "-0.0")]) == ("kv_cache_alloc", "message")  # rounded below zero


def test_an_exception_right_after_a_negative_kv_budget_is_its_failure():
    """Forks word vLLM's refusal their own way (Intel's llm-scaler: `ValueError: This number can not be negative`):
    an exception straight after a budget below zero is it. Not after zero or a positive budget."""
    neg = "Available KV cache memory: -1.01 GiB"
    raised = "ValueError: This number can not be negative ..."
    a = feed([neg, raised])
    assert (a.first_oom.stage, a.first_oom.line, a.counts["oom"]) == ("kv_cache_alloc", 1, 1)
    crash = "(EngineCore_DP0 pid=7) ERROR 08-16 12:00:02 [core.py:1] EngineCore failed to start."
    assert feed([neg, raised, crash]).counts["oom"] == 1
    for other in ("Available KV cache memory: 0.00 GiB", "Available KV cache memory: 3.20 GiB"):
        assert feed([other, raised]).first_oom is None, other


def test_xlas_coded_allocation_failures_are_memory_failures():
    """XLA's coded errors (E0100 a device buffer, E0101 a program) put the words on the next line."""
    engine = "(EngineCore pid=7) ERROR 06-26 20:05:15 [core.py:1231] "
    frames = traceback(
        [
            ("vllm/v1/engine/core.py", "_initialize_kv_caches"),
            ("tpu_inference/runner/tpu_runner.py", "initialize_kv_cache"),
        ],
        last="jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E0100: RuntimeBufferAllocationFailure:",
        prefix=engine,
    )
    more = engine + "Error allocating device buffer: Attempting to allocate 5.24G. That was not possible."
    a = feed([*frames, more])
    a.flush()
    assert (a.counts["oom"], a.first_oom.stage) == (1, "kv_cache_alloc")
    program = "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E0101: RuntimeProgramAllocationFailure:"
    assert feed([program]).counts["oom"] == 1
    assert feed(["jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: E0200: SomethingElse:"]).counts["oom"] == 0


def test_rays_memory_monitor_killing_a_task_is_not_a_device_failure():
    """`ray.exceptions.OutOfMemoryError`: Ray killed a task for the host's RAM (its memory monitor), not the GPU's."""
    ray = [
        "ERROR 03-21 17:27:44 [core.py:340] ray.exceptions.OutOfMemoryError: Task was killed due to the node running "
        "low on memory.",
        "ERROR 03-21 17:27:44 [core.py:340] worker failed: ray.exceptions.OutOfMemoryError: Task was killed",
    ]
    assert decided(ray) == (None, None)
    assert decided(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"])[0] is not None


def test_rays_task_error_named_after_its_cause_is_decided_by_the_cause():
    """Ray names a failed task `RayTaskError(OutOfMemoryError)` whichever OutOfMemoryError caused it: its own memory
    monitor's (the host's RAM) or torch's (the device's). The cause's line, printed below, decides."""
    head = (
        "(RayWorkerWrapper pid=2412) ERROR 03-21 17:27:44 worker_base.py:1] ray.exceptions.RayTaskError"
        "(OutOfMemoryError): ray::RayWorkerWrapper.execute_method() (pid=2412, ip=10.0.0.2)"
    )
    frame = '(RayWorkerWrapper pid=2412)   File "/opt/vllm/worker/worker_base.py", line 481, in execute_method'
    host = (
        "(RayWorkerWrapper pid=2412) ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
        "memory."
    )
    device = "(RayWorkerWrapper pid=2412) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert decided([head, frame, host]) == (None, None)
    assert decided([head]) == (None, None)
    assert decided([head, frame, device])[0] is not None


def test_a_memory_error_vllm_caught_and_went_on_from_is_recovered_not_the_failure():
    lines = [
        "INFO 08-16 12:00:01 [gpu_model_runner.py:1] Starting to load model m...",
        "WARNING 08-16 12:00:30 [autotuner.py:1] [Autotuner]: Skipping tactic 3 due to failure: CUDA out of "
        "memory. Tried to allocate 8.00 GiB",
        "INFO 08-16 12:01:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
    ]
    a = feed(lines)
    assert a.first_oom is None and a.counts["oom"] == 0
    assert [ev.line for ev in a.recovered] == [2]
    report = triage_stream("x", io.BytesIO("\n".join(lines).encode()))
    assert report["first_oom"] is None and report["recovered_memory_events"][0]["line"] == 2


def test_a_fragment_that_starts_mid_startup_is_a_loading_failure():
    """The last startup line says when, by default: counted as such once the log goes quiet (what follows may still
    name the step, see test_an_error_relaying_the_failure_in_words_places_what_only_a_marker_had_placed)."""
    lines = ["Loading safetensors checkpoint shards:  40% Completed | 2/5 [00:10<00:15,  5.01s/it]", OOM]
    a = feed(lines)
    assert a.first_oom is None and a.pending is not None  # not counted while the traceback may go on
    a.flush()
    assert a.first_oom is not None and (a.first_oom.stage, a.first_oom.phase) == ("weight_loading", "loading")


def test_lines_a_terminal_wrapped_are_joined():
    head = "(EngineCore_DP0 pid=7) ERROR 08-16 12:00:02 [core.py:1] RuntimeError: Worker failed with error 'CUDA o"
    a = feed([head, "ut of memory', please check the stack trace above for the root cause"])
    assert a.counts["oom"] == 1
    frame = f'  File "{SITE}/vllm/v1/worker/gpu_model_runner.py", line 2'
    a = feed(["Traceback (most recent call last):", frame, "183, in capture_model", OOM])
    assert a.first_oom.stage == "graph_capture"


def test_prefill_or_decode_from_frames_on_one_path_only():
    ready = ["INFO:     Application startup complete."]
    prefill = SERVING + [("vllm/attention/backends/mla/common.py", "_forward_prefill")]
    decode = SERVING + [("vllm/attention/ops/paged_attn.py", "forward_decode")]
    assert stage_of(ready + traceback(prefill)) == ("prefill", "frame")
    assert stage_of(ready + traceback(decode)) == ("decode", "frame")
    assert stage_of(ready + traceback(SERVING)) == ("runtime_unknown", "readiness")


def test_a_step_name_other_code_uses_too_names_the_step_only_on_vllms_attention_paths():
    """Hugging Face tokenizers' `_decode` runs in every detokenization, prefill steps' included."""
    ready = ["INFO:     Application startup complete."]
    tokenizer = SERVING + [("transformers/tokenization_utils_fast.py", "_decode")]
    assert stage_of(ready + traceback(tokenizer)) == ("runtime_unknown", "readiness")
    calling = ready + traceback(SERVING)
    calling.insert(-1, "    text = self._decode(token_ids)")  # a calling line names no file
    assert stage_of(calling) == ("runtime_unknown", "readiness")
    backend = SERVING + [("vllm/attention/backends/some_backend.py", "_decode")]
    assert stage_of(ready + traceback(backend)) == ("decode", "frame")
    # vLLM's own tokenizer helper (vllm/renderers/base.py) is no step either; model runner v2's speculators' are not
    for path in ("vllm/renderers/base.py", "vllm/v1/worker/gpu/spec_decode/autoregressive/speculator.py"):
        assert stage_of(ready + traceback(SERVING + [(path, "_decode")])) == ("runtime_unknown", "readiness"), path


def test_frames_vllm_runs_at_every_stage_say_no_stage():
    """Read from vLLM's source (and torch's, FlashInfer's): frames of compiled code and captured graphs running, not
    being made, a FlashInfer function both its decode and prefill wrappers call, a torch.compile cache that shares the
    KV cache's method name, per-request objects under the engine's folder, the serving classes built at startup."""
    ready = ["INFO:     Application startup complete."]
    for path, func in (
        ("torch/cuda/graphs.py", "replay"),  # vllm/compilation/cuda_graph.py replays on every step
        ("vllm/compilation/compiler_interface.py", "compiled_graph"),
        ("torch/_inductor/codecache.py", "__call__"),  # CompiledFxGraph.__call__, torch 2.5
        ("torch/_functorch/aot_autograd.py", "forward"),
    ):
        assert stage_of(traceback(SERVING + [(path, func)]))[0] == "runtime_unknown", (path, func)
        assert (
            stage_of(traceback(SERVING + [(path, "capture_begin" if "graphs" in path else "compile_fx")]))[0]
            == "graph_capture"
        ), path  # the same files while a graph is made
    # dynamo's frame callback (ConvertFrame.__call__) runs only to compile: the same name in another file says compiling
    assert stage_of(traceback([("torch/_dynamo/convert_frame.py", "__call__")]))[0] == "graph_capture"
    decode = SERVING + [("flashinfer/decode.py", "run"), ("flashinfer/prefill.py", "paged_run")]
    assert stage_of(ready + traceback(decode)) == ("decode", "frame")
    # torch.compile's artifact cache while compiling (graph capture's stage), not the worker's KV cache
    assert stage_of(traceback([("vllm/compilation/backends.py", "initialize_cache")]))[0] == "graph_capture"
    assert stage_of(traceback([("vllm/worker/worker.py", "initialize_cache")]))[0] == "kv_cache_alloc"

    def settled(lines: list[str]) -> tuple[str | None, str | None]:  # what triage says once the log goes quiet
        a = feed(lines)
        a.flush()
        return (a.first_oom.stage, a.first_oom.stage_evidence) if a.first_oom else (None, None)

    per_request = [("vllm/v1/engine/output_processor.py", "__init__")]
    assert settled(traceback(per_request)) == (UNDECIDED_STAGE, "none")
    assert stage_of(traceback([("vllm/v1/engine/core.py", "__init__")]))[0] == "loading_unknown"
    lora = [("vllm/entrypoints/openai/serving_models.py", "init_static_loras")]
    assert settled(traceback(lora)) == (UNDECIDED_STAGE, "none")
    assert stage_of(traceback([("vllm/entrypoints/openai/serving_chat.py", "create_chat_completion")]))[0] == (
        "runtime_unknown"
    )
    # vllm-ascend's SplitFuse mask: chosen for a chunked-prefill step by the model runner (up to v0.12), built for every
    # step by the attention metadata builder (v0.13 on)
    mask = ("vllm_ascend/attention/attention_mask.py", "get_splitfuse_attn_mask")
    chosen = SERVING + [("vllm_ascend/worker/model_runner_v1.py", "_make_attention_mask"), mask]
    every_step = SERVING + [("vllm_ascend/attention/attention_v1.py", "build"), mask]
    assert stage_of(ready + traceback(chosen)) == ("prefill", "frame")
    assert stage_of(ready + traceback(every_step)) == ("runtime_unknown", "readiness")
    # model runner v2's warm-up module (vLLM 0.20 on) and its KV-sizing prefill step
    assert stage_of(traceback([("vllm/v1/worker/gpu/warmup.py", "_run_step")]))[0] == "warmup"
    assert stage_of(traceback([("vllm/v1/worker/gpu/warmup.py", "run_kv_cache_sizing_warmup")]))[0] == (
        "kv_cache_alloc"
    )


def test_a_number_too_long_for_python_costs_one_line_not_the_log():
    poison = "INFO 08-16 12:00:01 [worker.py:1] # GPU blocks: " + "9" * 5000 + ", # CPU blocks: 1"
    a = feed(["INFO 08-16 12:00:00 [api_server.py:1] vLLM API server version 0.6.3", poison] + traceback(LOAD))
    assert a.line_errors == 1 and a.first_oom is not None and a.first_oom.stage == "weight_loading"


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter.cli", "triage", *args], input=stdin, capture_output=True, timeout=120
    )


def test_gzip_logs_are_read_and_binary_input_is_refused(tmp_path):
    text = "\n".join(["INFO 08-16 12:00:01 [gpu_model_runner.py:1] Starting to load model m..."] + traceback(LOAD))
    gz = tmp_path / "vllm.log.1.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    done = _cli("--json", str(gz))
    assert done.returncode == 1 and '"stage": "weight_loading"' in done.stdout.decode()
    binary = tmp_path / "model.safetensors"
    binary.write_bytes(bytes(range(256)) * 64)
    done = _cli(str(binary))
    assert done.returncode == 2 and b"not a text log" in done.stderr and b"Traceback" not in done.stderr
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gzip.compress(text.encode())[:40])
    done = _cli(str(cut))
    assert done.returncode == 2 and b"gzip" in done.stderr and b"Traceback" not in done.stderr


def test_several_files_give_json_lines(tmp_path):
    for name in ("a.log", "b.log"):
        (tmp_path / name).write_text("\n".join(traceback(LOAD)))
    out = _cli("--json", str(tmp_path / "a.log"), str(tmp_path / "b.log")).stdout.decode().splitlines()
    assert len(out) == 2 and all(line.startswith("{") and line.endswith("}") for line in out)


def test_loading_advice_names_what_the_log_states_and_nothing_else():
    stated = ["Driver Version: 550.54.15      CUDA Version: 12.4", "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"]
    report = triage_stream("x", io.BytesIO("\n".join(stated + traceback(LOAD)).encode()))
    move = report["next_move"]
    assert "550.54.15" in move and "CUDA 12.4" in move and "NVIDIA H100 80GB HBM3" in move
    bare = triage_stream("y", io.BytesIO("\n".join(traceback(LOAD)).encode()))["next_move"]
    assert "GB300" not in bare and "R580" not in bare and "not in the log" in bare


def test_a_failure_logged_above_its_traceback_takes_the_traceback_stage():
    """`logger.exception` prints the message first and the traceback after it."""
    message = (
        "(VllmWorkerProcess pid=214) ERROR 09-27 05:20:38 [multiproc_worker_utils.py:233] Exception in worker: "
        "CUDA out of memory. Tried to allocate 19.63 GiB."
    )
    a = feed([message] + traceback(PROFILE, last="torch.OutOfMemoryError: CUDA out of memory."))
    assert (a.first_oom.stage, a.first_oom.line) == ("kv_cache_alloc", 1) and a.counts["oom"] == 1
    # an excerpt that stops inside the traceback, before its last line: the frames so far decide
    a = feed([message] + traceback(CAPTURE)[:-1])
    assert a.first_oom is None and a.pending is not None  # not counted before anything decides ...
    a.flush()  # ... and counted when the log goes quiet
    assert a.first_oom.stage == "graph_capture" and sum(a.oom_counts.values()) == 1
    # nothing decides: the prior, said with low confidence and "none" for what decided it
    a = feed([message])
    a.flush()
    assert (a.first_oom.stage, a.first_oom.stage_evidence, a.first_oom.confidence) == (UNDECIDED_STAGE, "none", "low")


def test_the_engine_being_constructed_is_startup_even_when_the_frame_below_is_cut():
    """V1's run_engine_core builds the engine core in `engine_core = EngineCoreProc(*args, **kwargs)`; an excerpt
    cut below that source line still says the engine was being built."""
    built = [
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/v1/engine/core.py", line 699, in run_engine_core',
    ]
    assert decided([OOM, *built, "    engine_core = EngineCoreProc(*args, **kwargs)"]) == ("loading_unknown", "frame")
    # the same frame then the busy loop: serving
    a = feed([OOM, *built, "    engine_core.run_busy_loop()"])
    a.flush()
    assert a.first_oom.stage == "runtime_unknown"


def test_v0_engine_loop_words_mean_the_engine_was_serving():
    """V0's AsyncLLMEngine logs its background loop's death from `_log_task_completion`, and MQLLMEngine.start()
    logs `repr(e)` of what killed its loop: both run only once the engine was built."""
    background = [
        f"ERROR 03-31 15:19:44 [async_llm_engine.py:68] {OOM}",
        "Exception in callback _log_task_completion(error_callback=<bound method...>)(<Task finishe...>) at x.py:48",
    ]
    assert decided(background) == ("runtime_unknown", "message")
    repr_line = (
        "ERROR 12-19 09:33:44 engine.py:135] OutOfMemoryError('Error in model execution (input dumped to "
        "/tmp/err.pkl): CUDA out of memory. Tried to allocate 524.00 MiB.')"
    )
    a = feed([repr_line])
    a.flush()
    assert (a.first_oom.stage, a.first_oom.stage_evidence) == ("runtime_unknown", "message")
    # the same words from another file, or not as a repr: nothing said
    for other in (repr_line.replace("engine.py:135", "worker.py:135"), repr_line.replace("OutOfMemoryError('", "")):
        assert decided([other]) == (UNDECIDED_STAGE, "none")


def test_an_error_answer_to_a_request_means_the_engine_was_serving():
    lines = [
        'INFO:     10.0.0.5:51234 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
        "ERROR 04-06 00:44:23 [engine.py:160] OutOfMemoryError('CUDA out of memory. Tried to allocate 6.33 GiB')",
    ]
    a = feed(lines)
    assert (a.first_oom.stage, a.first_oom.ready_before) == ("runtime_unknown", True)
    relayed = (
        "ERROR 03-19 10:55:18 [serving_chat.py:677] MQEngineDeadError: Engine loop is not running. "
        "Inspect the stacktrace to find the original error: OutOfMemoryError('CUDA out of memory.')"
    )
    a = feed([relayed])
    assert a.first_oom.phase == "runtime" and a.first_oom.ready_before


def test_the_words_of_a_relayed_failure_name_its_step():
    a = feed(["ERROR 08-16 12:00:02 [core.py:1] RuntimeError: Error while capturing CUDA graphs: CUDA out of memory."])
    assert (a.first_oom.stage, a.first_oom.stage_evidence) == ("graph_capture", "message")


def test_colour_codes_pasted_as_text_are_peeled():
    line = '^[[1;36m(VllmWorker TP0 pid=90)^[[0;0m [rank0]:   File "x/vllm/v1/worker/gpu_model_runner.py", line 9, in capture_model'
    a = feed(
        [
            "[1;36m(VllmWorker TP0 pid=90)[0;0m Traceback (most recent call last):",
            line,
            "^[[1;36m(VllmWorker TP0 pid=90)^[[0;0m [rank0]: " + OOM,
        ]
    )
    assert a.first_oom.stage == "graph_capture"


def test_the_scheduler_dump_in_its_real_shapes_names_the_step():
    ready = ["INFO:     Application startup complete."]
    new = (
        "[dump_input.py:76] Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=["
        "NewRequestData(req_id=chatcmpl-1,prompt_token_ids_len=2824,mm_features=[])], num_scheduled_tokens="
        "{chatcmpl-1: 2824}, total_num_scheduled_tokens=2824)"
    )
    cached = (
        "(EngineCore pid=176) ERROR 04-23 21:09:12 [dump_input.py:79] Dumping scheduler output for model "
        "execution: SchedulerOutput(scheduled_new_reqs=[], scheduled_cached_reqs=CachedRequestData(req_ids=["
        "'chatcmpl-a'],num_computed_tokens=[29622],num_output_tokens=[2]), num_scheduled_tokens={chatcmpl-a: 1}, "
        "total_num_scheduled_tokens=1)"
    )
    assert stage_of(ready + [new] + traceback(SERVING)) == ("prefill", "scheduler_dump")
    assert stage_of(
        ready + [cached] + traceback(SERVING, prefix="(EngineCore pid=176) ERROR 04-23 21:09:12 [core.py:1] ")
    ) == ("decode", "scheduler_dump")


def test_a_startup_failure_the_markers_only_place_roughly_waits_for_its_traceback():
    start = "INFO 08-16 12:00:00 [api_server.py:1] vLLM API server version 0.8.3"
    message = "ERROR 08-16 12:00:09 [core.py:1] EngineCore failed: CUDA out of memory. Tried to allocate 2.00 GiB."
    a = feed([start, message] + traceback(PROFILE))
    assert (a.first_oom.stage, a.first_oom.stage_evidence) == ("kv_cache_alloc", "frame")
    a = feed([start, message])
    a.flush()
    assert (a.first_oom.stage, a.first_oom.confidence) == ("loading_unknown", "low")


def test_an_undecided_failure_survives_a_restart_of_the_daemon():
    from exporter.logs.stages import LogAnalyzer

    a = feed([traceback(CAPTURE)[-1]])
    assert a.pending is not None
    b = LogAnalyzer.restore(a.snapshot())
    b.feed(LogLine(2, 'INFO:     10.0.0.5:51234 - "POST /v1/completions HTTP/1.1" 200 OK'))
    assert b.first_oom is not None and (b.first_oom.stage, b.first_oom.stage_evidence) == ("runtime_unknown", "serving")


def test_the_per_rank_step_map_stays_bounded():
    a = LogAnalyzer()
    dump = (
        "(EngineCore_DP{n} pid=9) ERROR 08-16 12:00:06 [dump_input.py:79] Dumping scheduler output for model "
        "execution: SchedulerOutput(scheduled_new_reqs=[], num_scheduled_tokens={{a: 1}})"
    )
    for n in range(20_000):
        a.feed(LogLine(n + 1, dump.format(n=n)))
    assert len(a._last_step) <= 300


def test_a_log_that_starts_with_copytruncates_hole_is_still_a_log(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_bytes(b"\x00" * 4096 + "\n".join(traceback(LOAD)).encode())
    done = _cli("--json", str(log))
    assert done.returncode == 1 and b'"stage": "weight_loading"' in done.stdout


# -- categories fixed on the full real corpus (the first held-out set, now tuned on) ---------------------------------


def test_the_sleep_mode_allocators_own_error_is_a_memory_failure_of_a_running_engine():
    """vLLM's csrc/cumem_allocator.cpp formats CUresult errors as `CUDA Error: %s at %s:%d` (cuGetErrorString:
    "out of memory"); it is raised from CuMemAllocator.wake_up, which only runs for an engine that slept."""
    wake = [
        ("vllm/entrypoints/llm.py", "wake_up"),
        ("vllm/device_allocator/cumem.py", "wake_up"),
        ("vllm/device_allocator/cumem.py", "create_and_map"),
    ]
    prefix = "(ActorModelRayActor pid=348952) "
    a = feed(
        traceback(
            wake,
            last="RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
            prefix=prefix,
        )
    )
    assert a.first_oom is not None and (a.first_oom.stage, a.first_oom.phase) == ("runtime_unknown", "runtime")
    # the allocator's own stderr line, relayed by Ray, is the same failure
    relayed = (
        "(LLMRayActor pid=1) CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62 [repeated 3x "
        "across cluster]"
    )
    a = feed([relayed])
    a.flush()
    assert a.counts["oom"] == 1


def test_a_last_line_cut_mid_message_still_counts_and_a_cut_line_followed_by_more_does_not():
    head = "(Worker pid=7) ERROR 10-25 13:12:42 [multiproc_executor.py:671] "
    lines = traceback(SAMPLER_WARMUP, last="RuntimeError: CUDA out of", prefix=head)
    a = feed(lines)
    a.flush()  # the excerpt ends here: its last line was cut
    assert a.first_oom is not None and a.first_oom.stage == "warmup"
    a = feed(lines + [head + "Process exited", ""])
    a.flush()
    assert a.first_oom is None and a.counts["oom"] == 0


def test_the_sampler_frame_alone_is_the_warm_up_as_the_sampler_message_is():
    """_dummy_sampler_run raises "... when warming up sampler"; since vLLM PR #13776 the worker calls it after the
    KV cache is allocated (compile_or_warm_up_model), outside the memory budget: the frame alone says warm-up."""
    sampler_only = [
        ("vllm/v1/worker/gpu_model_runner.py", "_dummy_sampler_run"),
        ("vllm/v1/sample/sampler.py", "forward"),
    ]
    assert stage_of(traceback(sampler_only)) == ("warmup", "frame")
    # under memory profiling it is profiling
    assert stage_of(traceback(PROFILE + sampler_only))[0] == "kv_cache_alloc"


def test_the_engine_cores_own_words_say_whether_it_had_started():
    """vllm/v1/engine/core.py run_engine_core logs "EngineCore failed to start." when the engine was never built,
    "EngineCore encountered a fatal error." once it was."""
    oom = "(Worker_TP0 pid=60) ERROR 05-03 00:18:16 [multiproc_executor.py:870] " + OOM
    assert decided([oom, "(EngineCore pid=51) ERROR 05-03 00:18:17 [core.py:1136] EngineCore failed to start."]) == (
        "loading_unknown",
        "message",
    )
    assert decided(
        [oom, "(EngineCore pid=51) ERROR 05-03 00:18:17 [core.py:1136] EngineCore encountered a fatal error."]
    ) == ("runtime_unknown", "message")
    # V0's API server, when its engine process died while starting
    assert decided([oom, "RuntimeError: Engine process failed to start. See stack trace for the root cause."]) == (
        "loading_unknown",
        "message",
    )


def test_ipython_and_jupyter_tracebacks_have_frames_too():
    """IPython prints `File <path>:<line>, in <Class>.<func>(<args>)`; Jupyter pastes the path as a link."""
    lines = [
        (
            "File [~/env/lib/python3.11/site-packages/vllm/worker/cache_engine.py:49](http://host:8888/lab/tree/"
            "vllm/worker/cache_engine.py#line=48), in CacheEngine.__init__(self, cache_config, model_config)"
        ),
        '---> 49 self.gpu_cache = self._allocate_kv_cache(self.num_gpu_blocks, "cuda")',
        (
            "File ~/env/lib/python3.11/site-packages/vllm/worker/cache_engine.py:64, in "
            "CacheEngine._allocate_kv_cache(self, num_blocks, device)"
        ),
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 642.00 MiB. GPU",
    ]
    assert stage_of(lines) == ("kv_cache_alloc", "frame")


def test_a_traceback_whose_newlines_were_lost_is_read_frame_by_frame():
    flat = "c out = self.step( ^^^^ " + " ".join(
        f'File "{SITE}/{path}", line 42, in {func} x = y() ^^^^' for path, func in PROFILE
    )
    assert stage_of([flat, OOM]) == ("kv_cache_alloc", "frame")


def test_frames_that_exist_only_while_serving_a_prompt_say_prefill():
    """A prefill chunk over cached context (MLA's _compute_prefill_context, TurboQuant's _continuation_prefill) and
    prompt logprobs (gpu_model_runner._get_prompt_logprobs_dict) run only for real requests, never in dummy runs."""
    for func in ("_compute_prefill_context", "_continuation_prefill", "_get_prompt_logprobs_dict"):
        frames = [("torch/nn/modules/module.py", "_call_impl"), ("vllm/v1/attention/backends/x.py", func)]
        assert stage_of(traceback(frames)) == ("prefill", "frame"), func
    # the same frames under memory profiling are profiling
    assert (
        stage_of(traceback(PROFILE + [("vllm/v1/attention/backends/mla/common.py", "_forward_prefill")]))[0]
        == "kv_cache_alloc"
    )


def test_decode_is_read_from_the_scheduler_dump_of_a_decode_only_step():
    """vllm/v1/... dump_input.py logs the failing step's SchedulerOutput (prepare_object_to_dump: `Name(k=v,...)`,
    dicts as `{k: v}`): no new request and one token per cached request is a decode step."""
    ready = ["INFO:     Application startup complete."]
    head = "(EngineCore_DP0 pid=9) ERROR 08-16 12:00:06 [dump_input.py:79] "
    decode = (
        head + "SchedulerOutput(scheduled_new_reqs=[],scheduled_cached_reqs=CachedRequestData(req_ids=['a', 'b'],"
        "resumed_from_preemption=[false, false],new_token_ids=[],num_computed_tokens=[812, 90]),"
        "num_scheduled_tokens={a: 1, b: 1},total_num_scheduled_tokens=2,scheduled_spec_decode_tokens={})"
    )
    spec = decode.replace("{a: 1, b: 1}", "{a: 4, b: 4}").replace(
        "scheduled_spec_decode_tokens={}", "scheduled_spec_decode_tokens={a: [5, 6, 7], b: [1, 2, 3]}"
    )
    chunk = decode.replace("{a: 1, b: 1}", "{a: 2048, b: 1}")
    cut = decode.split("num_scheduled_tokens=")[0] + "num_scheduled_tokens={a: 1, b: "
    fail = traceback(SERVING, prefix=head.replace("dump_input.py:79", "core.py:1"))
    assert stage_of(ready + [decode] + fail) == ("decode", "scheduler_dump")
    assert stage_of(ready + [spec] + fail) == ("decode", "scheduler_dump")
    assert stage_of(ready + [chunk] + fail) == ("prefill", "scheduler_dump")
    assert stage_of(ready + [cut] + fail) == ("runtime_unknown", "readiness")  # cut before it says: not guessed
    # V0 dumped the model input: its attention metadata counts prefills and decode tokens
    v0 = (
        "ERROR 03-01 10:00:00 dump_input.py:71] ModelInputForGPUWithSamplingMetadata(input_tokens=Tensor(shape="
        "torch.Size([8]), device=cuda:0,dtype=torch.int64),attn_metadata=FlashAttentionMetadata(num_prefills=0,"
        "num_prefill_tokens=0,num_decode_tokens=8,slot_mapping=Tensor(shape=torch.Size([8])),is_prompt=False)"
    )
    assert stage_of(ready + [v0] + fail) == ("decode", "scheduler_dump")
    assert stage_of(ready + [v0.replace("num_prefills=0", "num_prefills=2")] + fail) == ("prefill", "scheduler_dump")


def test_kernel_warm_up_frames_are_the_warm_up():
    """vllm/model_executor/warmup/kernel_warmup.py ("Warmup and tune the kernels"): kernel_warmup, deep_gemm_warmup,
    flashinfer_autotune; V0's worker._warm_up_model."""
    for func in ("kernel_warmup", "deep_gemm_warmup", "flashinfer_autotune"):
        frames = [
            ("vllm/model_executor/warmup/kernel_warmup.py", func),
            ("vllm/v1/worker/gpu_model_runner.py", "_dummy_run"),
        ]
        assert stage_of(traceback(frames)) == ("warmup", "frame"), func
    assert stage_of(
        traceback([("vllm/worker/worker.py", "_warm_up_model"), ("torch/nn/modules/module.py", "_call_impl")])
    ) == ("warmup", "frame")


def test_the_model_being_built_layer_by_layer_or_loaded_parameter_by_parameter_is_weight_loading():
    layer = [
        ("vllm/model_executor/layers/vocab_parallel_embedding.py", "__init__"),
        ("torch/_refs/__init__.py", "empty"),
    ]
    assert stage_of(traceback(layer)) == ("weight_loading", "frame")
    loader = [("vllm/model_executor/layers/fused_moe/layer.py", "weight_loader"), ("torch/_tensor.py", "copy_")]
    assert stage_of(traceback(loader)) == ("weight_loading", "frame")
    offload = [("vllm/model_executor/models/utils.py", "maybe_offload_to_cpu")]
    assert stage_of(traceback(offload)) == ("weight_loading", "frame")
    said = (
        "(EngineCore_DP0 pid=1) ERROR 11-05 12:19:32 [linear.py:210] Failed to create unquantized linear weights: "
        + OOM
    )
    assert decided([said]) == ("weight_loading", "message")


def test_the_source_line_under_a_frame_can_say_capture():
    """The failure hits in model code run inside `with torch.cuda.graph(...)`: no torch/cuda/graphs.py frame, but the
    line printed under vLLM's frame is the `with` (compilation/cuda_graph.py)."""
    lines = [
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/compilation/cuda_graph.py", line 240, in __call__',
        "    with torch.cuda.graph(cudagraph, pool=self.graph_pool, stream=current_stream()):",
        f'  File "{SITE}/vllm/model_executor/models/llama.py", line 400, in forward',
        "    hidden_states = self.norm(hidden_states)",
        OOM,
    ]
    assert stage_of(lines) == ("graph_capture", "frame")
    # the same frame replaying a captured graph while serving says nothing of capture
    replay = lines[:2] + ["    return entry.cudagraph.replay()"] + lines[3:]
    a = feed(replay)
    a.flush()
    assert a.first_oom.stage != "graph_capture"
    v0 = [("vllm/worker/model_runner.py", "capture"), ("vllm/model_executor/models/llama.py", "forward")]
    assert stage_of(traceback(v0)) == ("graph_capture", "frame")


def test_flashinfers_decode_wrapper_says_decode_once_serving():
    ready = ["INFO:     Application startup complete."]
    decode = SERVING + [("vllm/v1/attention/backends/flashinfer.py", "forward"), ("flashinfer/decode.py", "run")]
    prefill = SERVING + [("vllm/v1/attention/backends/flashinfer.py", "forward"), ("flashinfer/prefill.py", "run")]
    assert stage_of(ready + traceback(decode)) == ("decode", "frame")
    assert stage_of(ready + traceback(prefill)) == ("prefill", "frame")
    # the same wrappers run in startup's dummy runs: there the startup step decides
    assert stage_of(traceback(PROFILE + [("flashinfer/prefill.py", "run")]))[0] == "kv_cache_alloc"


def test_offline_generation_progress_means_the_engine_was_up():
    """vllm/entrypoints/llm.py draws "Adding requests" / "Processed prompts" bars only once the engine is built."""
    bar = "Processed prompts:   3%|▎         | 31/1000 [00:05<02:40,  6.02it/s, est. speed input: 1.2 toks/s]"
    a = feed(["INFO 04-03 14:16:33 model_runner.py:1430] Graph capturing finished in 14 secs.", bar, OOM])
    a.flush()
    assert (a.first_oom.phase, a.first_oom.ready_before) == ("runtime", True)


def test_a_progress_bar_after_an_undecided_failure_says_generation_was_under_way():
    """tqdm redraws `LLM.generate`'s bar as the failure unwinds (close on exit), so it follows the traceback."""
    frames = traceback([("deepencoder/sam.py", "forward")])[1:]  # cut: no frame says when
    bar = "Processed prompts:   0%|          | 0/5 [00:00<?, ?it/s, est. speed input: 0.00 toks/s, output: 0.00 toks/s]"
    assert decided([*frames, bar]) == ("runtime_unknown", "serving")
    a = feed(frames)  # without the bar nothing says serving: the prior
    a.flush()
    assert (a.first_oom.stage, a.first_oom.stage_evidence) == (UNDECIDED_STAGE, "none")
    # a bar does not overrule what the frames said
    a = feed([*traceback(PROFILE), bar])
    a.flush()
    assert a.first_oom.stage == "kv_cache_alloc"


def test_tenstorrents_allocator_failure_is_a_memory_failure_placed_by_its_kv_progress_bar():
    """tt-metal's bank manager raises "Out of Memory: Not enough space to allocate N B DRAM buffer across N banks";
    its vLLM backend draws "Allocating TT kv caches" while it sizes the paged cache."""
    bar = "Allocating TT kv caches for each layer (submesh 1):  69%|██████▍  | 22/32 [00:01<00:00, 11.60it/s]"
    tt = "Out of Memory: Not enough space to allocate 71999488 B DRAM buffer across 12 banks, where each bank needs"
    a = feed([bar, "info:", tt])
    a.flush()
    assert (a.counts["oom"], a.first_oom.stage) == (1, "kv_cache_alloc")
    a = feed([f"INFO 01-01 00:00:00 [logger.py:39] Received request chatcmpl-1: prompt: '{tt}'"])
    a.flush()
    assert a.counts["oom"] == 0


def test_tenstorrents_prefill_log_names_the_step_a_failure_interrupted():
    """tt-metal's generators log "Prefilling User N up to T tokens" (loguru) as each user's prefill starts: a failure
    after it, once serving, is a prefill; the line is found while the log is only skimmed (quiescent) too."""
    ready = "INFO:     Application startup complete."
    prefill = (
        "2025-10-13 18:00:17.286 | INFO     | models.tt_transformers.tt.generator:prefill_forward_text:620 - "
        "Prefilling User 1 up to 32650 tokens"
    )
    tt = (
        "2025-10-13 18:00:32.351 | critical |          Always | Out of Memory: Not enough space to allocate 234881024 B"
        " DRAM buffer across 12 banks (assert.hpp:103)"
    )
    assert decided([ready, prefill, tt]) == ("prefill", "message")
    assert decided([ready, tt])[0] == "runtime_unknown"
    # a frame of the failing step says more than a line saying a prefill began; a request answered since ended it
    decode = traceback([("vllm/worker/tt_model_runner.py", "_execute_model_single_step")], last="    x = y()")
    decode += ["    tt_out = self.model.decode_forward(", "RuntimeError: TT_FATAL", tt]
    decode[1] = decode[1].replace("_execute_model_single_step", "decode_forward")
    assert decided([ready, prefill, *decode])[0] == "decode"
    answered = '(APIServer pid=1) INFO:     10.0.0.9:5 - "POST /v1/completions HTTP/1.1" 200 OK'
    assert decided([ready, prefill, answered, tt])[0] == "runtime_unknown"


def test_aws_neurons_allocation_failure_is_a_memory_failure():
    """The Neuron runtime refusing a device tensor (NRT_RESOURCE, status 4) while the engine is built."""
    frames = traceback(
        [
            ("vllm/engine/multiprocessing/engine.py", "from_engine_args"),
            ("transformers_neuronx/ops.py", "parallel_to_nc"),
        ],
        last='RuntimeError: nrt_tensor_allocate status=4 message="Allocation Failure"',
    )
    a = feed(frames)
    a.flush()
    assert a.counts["oom"] == 1 and a.first_oom.phase == "loading"
    assert feed(['RuntimeError: nrt_tensor_allocate status=2 message="Invalid"']).counts["oom"] == 0


def test_nccls_own_out_of_memory_is_a_memory_failure():
    """NCCL's CUDACHECK warns `Cuda failure 2 'out of memory'` (a device allocation for its buffers)."""
    line = "host:123:456 [0] include/alloc.h:112 NCCL WARN Cuda failure 2 'out of memory'"
    a = feed([line])
    a.flush()
    assert a.counts["oom"] == 1
    a = feed(
        ["host:1:1 [0] enqueue.cc:267 NCCL WARN Cuda failure 'dependency created on uncaptured work in another stream'"]
    )
    a.flush()
    assert a.counts["oom"] == 0


def test_a_method_named_in_the_message_can_say_runtime():
    """V0 multiproc workers relay `Exception in worker ... while processing method start_worker_execution_loop: ...`:
    the loop that runs the engine's steps (vllm/worker/worker_base.py)."""
    line = (
        "(VllmWorkerProcess pid=9) ERROR 10-15 14:51:47 multiproc_worker_utils.py:226] Exception in worker "
        "VllmWorkerProcess while processing method start_worker_execution_loop: CUDA out of memory. Tried to "
        "allocate 32.00 MiB."
    )
    assert stage_of([line]) == ("runtime_unknown", "message")


def test_a_method_sent_to_the_workers_by_name_is_the_step():
    """The engine's traceback without the worker's: `self.collective_rpc("load_model")` (V1 executors) or
    `self._run_workers("determine_num_available_blocks")` (V0) names the step in the source line."""
    head = "(EngineCore_DP0 pid=5) ERROR 11-05 12:19:32 [core.py:708] "
    worker = (
        "RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 896.00 MiB.', please check "
        "the stack trace above for the root cause"
    )

    def engine_traceback(call: str) -> list[str]:
        return [
            head + "EngineCore failed to start.",
            head + "Traceback (most recent call last):",
            head + f'  File "{SITE}/vllm/v1/engine/core.py", line 80, in __init__',
            head + "    self.model_executor = executor_class(vllm_config)",
            head + f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 90, in _init_executor',
            head + f"    {call}",
            head + f'  File "{SITE}/vllm/v1/executor/multiproc_executor.py", line 250, in collective_rpc',
            head + "    raise RuntimeError(",
            head + worker,
        ]

    assert stage_of(engine_traceback('self.collective_rpc("load_model")')) == ("weight_loading", "frame")
    assert stage_of(engine_traceback("self._run_workers('determine_num_available_blocks')")) == (
        "kv_cache_alloc",
        "frame",
    )
    assert stage_of(engine_traceback('self.collective_rpc("init_device")')) == ("loading_unknown", "frame")


def test_a_caught_oom_logged_by_a_library_in_pythons_default_shape_is_recovered():
    """FlashInfer's autotuner logs `<time> - WARNING - autotuner.py:N - flashinfer.jit: ...` inside vLLM's processes."""
    line = (
        "(EngineCore_DP0 pid=387) 2026-03-08 16:44:29,692 - WARNING - autotuner.py:1315 - flashinfer.jit: "
        "[Autotuner]: Skipping tactic 7 due to torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    a = feed([line])
    a.flush()
    assert a.first_oom is None and a.counts["oom_recovered"] == 1
    # the same library's ERROR is not a recovery
    a = feed([line.replace("WARNING", "ERROR").replace("Skipping tactic 7 due to ", "")])
    a.flush()
    assert a.counts["oom"] == 1


def test_the_multimodal_encoder_run_for_a_new_prompts_media_is_a_prefill_while_serving():
    """gpu_model_runner._execute_mm_encoder runs the encoder for the step's scheduled encoder inputs (real requests);
    memory profiling runs it on dummy inputs through another path."""
    frames = [
        ("vllm/v1/worker/gpu_model_runner.py", "_execute_mm_encoder"),
        ("vllm/model_executor/models/qwen2_5_vl.py", "get_multimodal_embeddings"),
    ]
    assert stage_of(traceback(frames)) == ("prefill", "frame")


def test_an_excerpt_indented_as_a_whole_reads_as_if_it_were_not():
    """Markdown code blocks indented by four spaces, list items, quoted mails: every line carries the same indent."""
    log = ["INFO 11-20 10:00:01 [gpu_model_runner.py:1] Starting to load model m..."] + traceback(
        PROFILE, prefix="ERROR 11-20 10:00:02 [core.py:1] "
    )
    for indent in ("    ", "  ", "\t"):
        assert stage_of([indent + line for line in log]) == ("kv_cache_alloc", "frame"), repr(indent)
        assert stage_of([indent + line for line in traceback(CAPTURE)]) == ("graph_capture", "frame"), repr(indent)
    # code lines under a frame stay code lines, whatever they say
    lines = traceback(LOAD)[:-1] + ["    raise ValueError('x')", "    logger.error('CUDA out of memory')", OOM]
    assert stage_of(lines) == ("weight_loading", "frame")


def test_a_log_copied_out_of_a_web_page_keeps_its_escapes_and_is_read_through_them():
    lines = [line.replace('"', "&quot;") for line in traceback(PROFILE)]
    assert stage_of(lines) == ("kv_cache_alloc", "frame")
    relayed = "ERROR 08-16 12:00:02 [core.py:1] RuntimeError: Worker failed with error &#39;CUDA out of memory&#39;"
    a = feed([relayed])
    a.flush()
    assert a.counts["oom"] == 1


def test_the_api_servers_output_handler_failing_means_the_engine_had_started():
    """V1 AsyncLLM runs its output handler only once the engine core client is built (after startup)."""
    oom = "(EngineCore pid=112) ERROR 05-01 14:39:06 [core.py:1131] " + OOM
    head = "(APIServer pid=1) ERROR 05-01 14:39:06 [async_llm.py:699] "
    said = feed([oom, head + "AsyncLLM output_handler failed."])
    said.flush()
    assert (said.first_oom.phase, said.first_oom.stage_evidence) == ("runtime", "message")
    frames = feed(
        [
            oom,
            head + "Traceback (most recent call last):",
            head + f'  File "{SITE}/vllm/v1/engine/async_llm.py", line 655, in output_handler',
            head + "    outputs = await engine_core.get_output_async()",
            head + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
        ]
    )
    frames.flush()
    assert (frames.first_oom.phase, frames.first_oom.stage_evidence) == ("runtime", "frame")


def test_serving_stats_mean_ready_even_when_the_readiness_line_is_not_in_the_excerpt():
    """The periodic stats line (V1: the API server's stat logger; V0: LLMEngine.step) is logged only by a built
    engine: an excerpt that shows startup, then stats, then a failure, failed at runtime."""
    lines = [
        "(EngineCore_DP0 pid=7) INFO 11-20 10:01:00 [gpu_worker.py:1] Available KV cache memory: 20.00 GiB",
        (
            "(APIServer pid=1) INFO 11-20 10:10:00 [loggers.py:1] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
            "Avg generation throughput: 50.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 40.0%"
        ),
        "(EngineCore_DP0 pid=7) ERROR 11-20 10:10:05 [core.py:1] " + OOM,
    ]
    a = feed(lines)
    a.flush()
    assert (a.first_oom.phase, a.first_oom.ready_before) == ("runtime", True)


def test_tpu_buffer_allocation_failures_and_v0_profiling_results_are_read():
    tpu = (
        "ERROR 11-20 10:00:02 [core.py:1] jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Error allocating "
        "device buffer: Attempting to allocate 1.00G. That was not possible. There are 500.00M free."
    )
    a = feed([tpu])
    a.flush()
    assert a.counts["oom"] == 1
    v0 = [
        (
            "INFO 12-01 10:00:00 worker.py:232] Memory profiling results: duration=4.2 seconds, total_gpu_memory=79.1GiB,"
            " initial_memory_usage=14.2GiB, peak_torch_memory=16.1GiB, kv_cache_size=52.6GiB, gpu_memory_utilization=0.90"
        ),
        OOM,
    ]
    assert decided(v0) == ("kv_cache_alloc", "marker")


def test_the_call_a_source_line_makes_names_the_frame_the_excerpt_cut_off():
    head = "(EngineCore_DP0 pid=8402) ERROR 10-24 01:26:57 [core.py:710] "
    lines = [
        head + OOM,
        head + "",
        head + "The above exception was the direct cause of the following exception:",
        head + "Traceback (most recent call last):",
        head + f'  File "{SITE}/vllm/v1/engine/core.py", line 701, in run_engine_core',
        head + "    engine_core.run_busy_loop()",
        head + f'  File "{SITE}/vllm/v1/engine/co',
    ]
    assert decided(lines) == ("runtime_unknown", "frame")
    capture = [
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/v1/worker/gpu_worker.py", line 3, in x',
        "    self.model_runner.capture_model()",
        OOM,
    ]
    assert stage_of(capture) == ("graph_capture", "frame")


def test_v0s_dead_engine_loop_means_it_had_been_running():
    """vllm/engine/multiprocessing/client.py: MQEngineDeadError "Engine loop is not running. Inspect the stacktrace to
    find the original error: <repr>" is raised to requests once the loop died; the heartbeat says "Engine loop has
    died"."""
    relayed = (
        "Engine loop is not running. Inspect the stacktrace to find the original error: OutOfMemoryError('HIP out "
        "of memory. Tried to allocate 1.63 GiB.')."
    )
    a = feed([relayed])
    a.flush()
    assert (a.first_oom.phase, a.first_oom.stage_evidence, a.first_oom.confidence) == ("runtime", "message", "medium")


def test_offline_generation_and_speculative_drafting_frames_mean_serving():
    user = [
        ("test.py", "<module>"),
        ("vllm/entrypoints/llm.py", "generate"),
        ("vllm/model_executor/layers/logits_processor.py", "forward"),
    ]
    assert stage_of(traceback(user)) == ("runtime_unknown", "frame")
    for path, func in (
        ("vllm/entrypoints/pooling/offline.py", "embed"),
        ("vllm/entrypoints/generate/beam_search/offline.py", "beam_search"),
    ):
        assert stage_of(traceback([("test.py", "<module>"), (path, func)])) == ("runtime_unknown", "frame"), (
            path
        )  # 0.34
    drafter = [
        ("vllm/v1/worker/gpu_model_runner.py", "propose_draft_token_ids"),
        ("vllm/v1/spec_decode/eagle.py", "propose"),
    ]
    assert stage_of(traceback(drafter)) == ("runtime_unknown", "frame")
    # building the offline LLM is startup, whatever runs inside it
    build = [("test.py", "<module>"), ("vllm/entrypoints/llm.py", "__init__"), ("vllm/v1/worker/gpu_worker.py", "x")]
    assert stage_of(traceback(build)) == ("loading_unknown", "frame")


def decided(lines: list[str]) -> tuple[str | None, str | None]:
    """(stage, what decided it) once the log went quiet."""
    a = feed(lines)
    a.flush()
    return (a.first_oom.stage, a.first_oom.stage_evidence) if a.first_oom else (None, None)


def test_kernel_warmup_after_the_cache_is_warmup():
    """vllm/model_executor/warmup/kernel_warmup.py warmup_kernels runs execute_model on dummy steps from
    compile_or_warm_up_model, after the KV cache exists: its frames (or its call, when the frame is cut) are warm-up."""
    kernel = [("vllm/v1/worker/gpu_worker.py", "compile_or_warm_up_model")]
    assert stage_of(traceback([*kernel, ("vllm/model_executor/warmup/kernel_warmup.py", "warmup_kernels")]))[0] == (
        "warmup"
    )
    cut = ["Traceback (most recent call last):", "    warmup_kernels(self.model_runner, self.execute_model)", OOM]
    assert stage_of(cut)[0] == "warmup"


def test_words_that_only_a_serving_engine_logs_place_a_bare_failure_at_runtime():
    """uvicorn's shutdown lines (the HTTP server runs only once the engine is built) and V0's dead background loop
    (`_raise_exception_on_finish`, AsyncEngineDeadError) come after a failure the log otherwise leaves unplaced."""
    for after in (
        "(APIServer pid=1) INFO:     Waiting for application shutdown.",
        "(APIServer pid=1) INFO:     Application shutdown complete.",
        "Exception in callback functools.partial(<function _raise_exception_on_finish at 0x7fdaecb5edd0>)",
        "vllm.engine.async_llm_engine.AsyncEngineDeadError: Task finished unexpectedly.",
    ):
        assert decided([OOM, after]) == ("runtime_unknown", "message"), after
    assert decided([OOM]) == (UNDECIDED_STAGE, "none")  # without them: the prior
    callback = '  File "/workspace/vllm/engine/async_llm_engine.py", line 29, in _raise_exception_on_finish'
    assert decided(["Traceback (most recent call last):", callback, OOM]) == ("runtime_unknown", "frame")
    # the step the traceback above named still says which one: the gated-delta-net chunk kernel runs prefill tokens
    chunk = traceback([("vllm/model_executor/layers/fla/ops/chunk.py", "chunk_gated_delta_rule_fwd")])
    assert decided([*chunk, "(APIServer pid=1) INFO:     Application shutdown complete."])[0] == "prefill"
    recurrent = traceback(
        [("vllm/model_executor/layers/fla/ops/fused_recurrent.py", "fused_recurrent_gated_delta_rule")]
    )
    assert decided([*recurrent, "(APIServer pid=1) INFO:     Application shutdown complete."])[0] == "decode"


def test_a_sibling_ranks_words_name_the_method_both_were_running():
    rank = "(VllmWorkerProcess pid=7) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] "
    lines = [
        rank + OOM,
        rank.replace("pid=7", "pid=9") + "Exception in worker VllmWorkerProcess while processing method load_model.",
    ]
    assert decided(lines) == ("weight_loading", "message")
    serving = lines[1].replace("load_model", "start_worker_execution_loop")
    assert decided([lines[0], serving]) == ("runtime_unknown", "message")


def test_what_pytorch_says_was_allocated_places_a_bare_failure():
    """Nothing allocated by this process yet: the device was being set up or the weights were on their way. Memory
    in private pools says nothing: sleep mode keeps weights and KV cache there (vLLM issue #43951 pastes a weight-
    loading OOM with 71.20 GiB in private pools), and since v0.21 graphs are captured while memory is profiled."""
    nothing = OOM + " Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch."
    assert decided([nothing]) == ("loading_unknown", "message")
    moving = traceback([("torch/nn/modules/module.py", "_apply"), ("torch/nn/modules/module.py", "convert")])
    xpu = "RuntimeError: XPU out of memory. Tried to allocate 1.02 GiB (GPU 0; 15.56 GiB total capacity; 0 bytes already allocated)"
    assert decided([*moving[:-1], xpu]) == ("weight_loading", "message")
    assert decided([*moving[:-1], xpu.replace("0 bytes already", "3.20 GiB already")]) == (UNDECIDED_STAGE, "none")
    pools = (
        OOM + " Of the allocated memory 181.80 GiB is allocated by PyTorch, with 71.20 GiB allocated in private pools"
    )
    assert decided([pools]) == (UNDECIDED_STAGE, "none")


def test_no_graph_memory_in_pytorchs_report_reads_as_a_startup_until_something_says_otherwise():
    """PyTorch writes "with N allocated in private pools (e.g., CUDA Graphs)" only when those pools hold memory
    (c10/cuda/CUDACachingAllocator.cpp): without it no graph had been captured, as before the end of a default
    startup. A guess (confidence low): the engine's words, serving going on, or a frame still decide."""
    eager = OOM + " Of the allocated memory 23.28 GiB is allocated by PyTorch, and 51.00 MiB is reserved by PyTorch"
    assert decided([eager]) == ("loading_unknown", "allocator")
    cut = OOM + " Of the allocated memory 9.76 GiB is allocated by PyTorch, and 728.3"  # the paste cut it short
    assert decided([cut]) == ("loading_unknown", "allocator")
    a = feed([eager])
    a.flush()
    assert a.first_oom is not None and a.first_oom.confidence == "low"
    engine = "(EngineCore_DP0 pid=7) ERROR 09-27 14:03:50 [core.py:712] "
    running = [engine + eager.split(": ", 1)[1], engine + "EngineCore encountered a fatal error."]
    assert decided(running) == ("runtime_unknown", "message")
    assert decided([*traceback(CAPTURE, last=eager)]) == ("graph_capture", "frame")


def test_what_says_serving_overrides_the_allocator_guess():
    """The guess from PyTorch's report gives way to any sign of serving, before or after the failure: V1's scheduler
    dump (written only by a step of EngineCore's busy loop), a client's copy of the server's 500 answer, V0's
    launcher finding the engine dead while answering a request, request logs; and never applies where PyTorch never
    names graph memory (2.1's report, XPU's allocator)."""
    eager = OOM + " Of the allocated memory 46.50 GiB is allocated by PyTorch, and 212.00 MiB is reserved by PyTorch"
    engine = "(EngineCore_DP0 pid=7) ERROR 09-27 14:03:50 [core.py:712] "
    dump = (
        engine.replace("core.py:712", "dump_input.py:69") + "Dumping scheduler output for model execution: "
        "SchedulerOutput(scheduled_new_reqs=[NewRequestData(req_id=chatcmpl-1,prompt_token_ids_len=100)], "
        "num_scheduled_tokens={chatcmpl-1: 100}, total_num_scheduled_tokens=100)"
    )
    bare = engine + eager.split(": ", 1)[1]
    assert decided([dump, bare]) == ("prefill", "scheduler_dump")
    assert decided([bare, dump])[0] == "prefill"
    client = 'openai.InternalServerError: Error code: 500 - {"object": "error", "message": "' + eager[22:] + '"}'
    assert decided([client]) == ("runtime_unknown", "message")
    dead = "CRITICAL 04-06 00:44:23 [launcher.py:116] MQLLMEngine is already dead, terminating server process"
    assert decided([bare, dead]) == ("runtime_unknown", "message")
    asked = "(APIServer pid=1) INFO 09-27 14:03:51 [logger.py:40] Received request chatcmpl-2: prompt: 'hi'"
    assert decided([bare, asked]) == ("runtime_unknown", "serving")
    assert decided([bare.replace("CUDA out of memory", "XPU out of memory")]) == (UNDECIDED_STAGE, "none")
    assert decided([bare.replace("total capacity", "total capacty")]) == (UNDECIDED_STAGE, "none")


def test_a_guessed_startup_failure_does_not_end_the_run():
    """Counted at a quiet moment as a guess, a failure does not mark the run crashed: serving seen afterwards still
    says the server serves (the daemon counts it when its log goes quiet, and the log may go on)."""
    eager = OOM + " Of the allocated memory 46.50 GiB is allocated by PyTorch, and 212.00 MiB is reserved by PyTorch"
    a = feed([eager])
    a.flush()
    assert a.first_oom is not None and a.first_oom.stage_evidence == "allocator" and not a.epoch.crashed
    stats = "(APIServer pid=1) INFO 08-16 12:00:10 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    a.feed(LogLine(2, stats + "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs"))
    assert a.epoch.ready
    sure = feed([*traceback(LOAD, last=eager)])
    sure.flush()
    assert sure.first_oom.stage == "weight_loading" and sure.epoch.crashed


def test_vllm_ascend_request_step_and_chunked_prefill_mask():
    steps = [
        ("vllm_ascend/worker/model_runner_v1.py", "execute_model"),
        ("vllm_ascend/worker/model_runner_v1.py", "_process_reqs"),
        ("vllm_ascend/worker/model_runner_v1.py", "_make_attention_mask"),  # chose the chunked-prefill mask
        ("vllm_ascend/attention/attention_mask.py", "get_splitfuse_attn_mask"),
    ]
    npu = "RuntimeError: NPU out of memory. Tried to allocate 23.16 GiB (NPU 3; 60.96 GiB total capacity)"
    assert stage_of(traceback(steps, last=npu))[0] == "prefill"
    assert stage_of(traceback(steps[:2], last=npu))[0] == "runtime_unknown"


def test_an_answer_the_api_server_gives_without_its_engine_does_not_end_the_incident():
    """vLLM's API server answers /metrics (the daemon's own scrapes) after its engine died, until its watchdog stops
    it (vllm/entrypoints/launcher.py): relays of the failure that follow are the same incident, counted once."""
    ready = ["(APIServer pid=1) INFO 05-29 10:00:00 [launcher.py:37] Application startup complete."]
    dead = "(APIServer pid=1) ERROR 05-29 11:00:{s:02d} [serving_chat.py:195] vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."
    scrape = '(APIServer pid=1) INFO:     10.0.0.9:51234 - "GET /metrics HTTP/1.1" 200 OK'
    lines = [*ready, "(EngineCore_DP0 pid=2) ERROR 05-29 11:00:01 [core.py:1] " + OOM.split(": ", 1)[1]]
    for s in range(5, 50, 10):
        lines += [scrape, dead.format(s=s)]
    a = feed(lines)
    a.flush()
    assert (a.counts["oom"], a.counts["engine_crash"]) == (1, 1)
    # a request answered is the engine serving again: a later failure is a new incident
    answered = '(APIServer pid=1) INFO:     10.0.0.9:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    a = feed([*ready, OOM, answered, OOM])
    a.flush()
    assert a.counts["oom"] == 2


def test_a_scrape_does_not_make_a_startup_the_log_shows_ready():
    """A run whose startup lines the log shows says its readiness itself; a scrape answered meanwhile is another
    process (another server under the same glob, replicas behind one URL), and a failure open or undecided stays so."""
    start = "(APIServer pid=1) INFO 05-29 10:00:00 [api_server.py:1839] vLLM API server version 0.11.0"
    a = feed([start])
    a.note_serving()
    for i, text in enumerate(traceback(PROFILE), 2):
        a.feed(LogLine(i, text))
    a.flush()
    assert (a.first_oom.stage, a.first_oom.phase) == ("kv_cache_alloc", "loading")
    a = feed([OOM])  # undecided: a scrape now says nothing of it
    a.note_serving()
    a.flush()
    assert (a.first_oom.stage, a.first_oom.stage_evidence) == (UNDECIDED_STAGE, "none")


def test_vllms_own_load_failure_message_names_weight_loading():
    """vllm/v1/worker/gpu_model_runner.py load_model logs "Failed to load model - not enough GPU memory ... (original
    error: CUDA out of memory ...)" when the weights do not fit."""
    line = (
        "(EngineCore_DP0 pid=5) ERROR 01-05 22:46:36 [gpu_model_runner.py:3797] Failed to load model - not enough GPU "
        "memory. Try lowering --gpu-memory-utilization to free memory for weights. (original error: CUDA out of "
        "memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 23.52 GiB of which 1.12 GiB is free.)"
    )
    assert decided([line]) == ("weight_loading", "message")


def test_warmup_modules_and_the_v1_sampler_place_a_startup_failure():
    """Frames in vllm/model_executor/warmup/ are warm-up whatever the helper is called; V1's sampler with nothing
    saying serving ran in its startup dummy run (warm-up once the cache is sized, profiling before)."""
    deep_gemm = [("vllm/model_executor/warmup/deep_gemm_warmup.py", "_warmup")]
    assert decided(traceback(deep_gemm)) == ("warmup", "frame")
    sampler = [("vllm/v1/sample/ops/topk_topp_sampler.py", "apply_top_k_top_p")]
    assert decided(traceback(sampler)) == ("warmup", "frame")
    # the same sampler frames under the busy loop, or after readiness: serving
    assert decided(traceback(SERVING + sampler))[0] == "runtime_unknown"
    ready = "(APIServer pid=1) INFO 05-29 10:00:00 [launcher.py:37] Application startup complete."
    assert decided([ready, *traceback(sampler)])[0] == "runtime_unknown"


def test_a_prompts_multimodal_embeddings_are_a_prefill_step():
    ready = "(APIServer pid=1) INFO 05-29 10:00:00 [launcher.py:37] Application startup complete."
    merge = [("vllm/model_executor/models/utils.py", "_merge_multimodal_embeddings")]
    assert decided([ready, *traceback(SERVING + merge)])[0] == "prefill"


def test_v0_sizing_the_cache_at_zero_blocks_is_the_kv_cache_failure():
    """V0 logs "# cuda blocks: 0, # CPU blocks: N" and the worker raises "No available memory for the cache blocks"
    next (worker.py raise_if_cache_size_invalid): an excerpt cut before the raise still holds the failure, once."""
    lines = [
        "INFO 02-26 09:54:05 worker.py:267] model weights take 5.20GiB; non_torch_memory takes 0.03GiB; PyTorch "
        "activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is -1.05GiB.",
        "INFO 02-26 09:54:05 executor_base.py:111] # cuda blocks: 0, # CPU blocks: 4681",
    ]
    assert decided(lines) == ("kv_cache_alloc", "message")
    raised = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`."
    a = feed([*lines, raised])
    a.flush()
    assert a.counts["oom"] == 1
    healthy = lines[1].replace("blocks: 0,", "blocks: 2715,")
    assert decided([healthy]) == (None, None)


def test_v1s_engine_dead_error_means_the_engine_had_been_built():
    """vllm/v1/engine/core_client.py raises EngineDeadError only once `engine_dead` is set: by the liveness monitor it
    starts after the engines' startup handshake, or by run_engine_core's "encountered a fatal error" branch; a core
    that never started says "Engine core initialization failed" instead."""
    dead = "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above)."
    assert decided([OOM, dead]) == ("runtime_unknown", "message")
    never = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
    assert decided([OOM, never]) == ("loading_unknown", "message")
    assert decided([OOM, "MyEngineDeadErrors are fine"]) == (UNDECIDED_STAGE, "none")


def test_a_users_script_calling_the_offline_engine_places_the_failure_while_generating():
    """`outputs = llm.generate(prompts, sampling_params)` (vllm/entrypoints/llm.py's API as its docs name it) runs
    requests on a built engine; transformers' `model.generate(` says nothing about vLLM."""
    user = [
        "Traceback (most recent call last):",
        '  File "/work/run.py", line 70, in main',
        "    outputs = llm.generate(prompts, sampling_params)",
        "RuntimeError: boom",
    ]
    assert decided([OOM, *user]) == ("runtime_unknown", "frame")
    hf = [line.replace("llm.generate", "model.generate") for line in user]
    assert decided([OOM, *hf]) == (UNDECIDED_STAGE, "none")


def test_the_launch_command_above_a_bare_failure_says_startup():
    """A paste that shows the command that launched the server and then the failure shows a startup."""
    for command in (
        "CUDA_VISIBLE_DEVICES=0,1 python3 -m vllm.entrypoints.openai.api_server --model /m --port 8089",
        "$ vllm serve Qwen/Qwen3-8B --max-model-len 32768",
        "sudo docker run -it --device=/dev/kfd -p 8000:8000 vllm/vllm-openai vllm serve /model",
    ):
        assert decided([command, OOM]) == ("loading_unknown", "marker"), command
    assert decided(["the vllm server crashed", OOM]) == (UNDECIDED_STAGE, "none")


def test_a_running_servers_own_lines_quoting_the_launch_command_start_nothing():
    """With --enable-log-outputs vLLM logs each answer (vllm/entrypoints/logger.py: "Generated response %s%s: output:
    %r"): a model's words, like a prompt's, are never read; and the launch command is read only on a line without
    vLLM's prefix (a typed command has none)."""
    ready = "(APIServer pid=1) INFO 01-01 00:00:00 [api_server.py:1] Application startup complete."
    answer = (
        "(APIServer pid=1) INFO 01-01 00:00:05 [logger.py:71] Generated response chatcmpl-8f1: output: 'To start it, "
        "run vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192', finish_reason: stop"
    )
    hint = "(APIServer pid=1) WARNING 01-01 00:00:06 [api_server.py:9] try python -m vllm.entrypoints.openai.api_server"
    a = feed([ready, answer, hint, OOM])
    a.flush()
    assert (a.first_oom.stage, a.first_oom.stage_evidence, len(a.epochs)) == ("runtime_unknown", "readiness", 1)
    oom_answer = answer.replace("To start it", "CUDA out of memory. Tried to allocate 2.00 GiB")
    a = feed([ready, oom_answer])
    a.flush()
    assert a.counts["oom"] == 0


def test_the_words_above_a_traceback_say_whether_the_engine_had_started():
    """run_engine_core's `logger.exception` writes "EngineCore failed to start." (or "encountered a fatal error.")
    above the traceback: it places a failure in it whose frames do not, before anything follows (the daemon counts
    an undecided failure at the first quiet poll)."""
    core = "(EngineCore_0 pid=3001) ERROR 12-03 10:00:41 [core.py:718] "
    body = [core + line for line in traceback([("torch/nn/modules/module.py", "_call_impl")])]
    assert decided([core + "EngineCore failed to start.", *body]) == ("loading_unknown", "message")
    assert decided([core + "EngineCore encountered a fatal error.", *body]) == ("runtime_unknown", "message")
    a = feed(body)
    a.flush()
    assert a.first_oom.stage_evidence == "none"


def test_nccls_trace_of_a_communicator_setup_places_its_memory_failure_at_startup():
    """NCCL_DEBUG=INFO: `NCCL INFO init.cc:N -> 1` traces a failure out of a communicator's setup, which vLLM does
    while the engine starts (init_device)."""
    warn = "node1:2213:2293 [2] include/alloc.h:112 NCCL WARN Cuda failure 2 'out of memory'"
    assert decided([warn, "node1:2213:2293 [2] NCCL INFO init.cc:1234 -> 1"]) == ("loading_unknown", "message")
    assert decided([warn, "node1:2213:2293 [2] NCCL INFO enqueue.cc:99 -> 1"]) == (UNDECIDED_STAGE, "none")


def test_tenstorrents_l1_buffer_is_not_device_memory():
    """An L1 buffer is the Tensix cores' own SRAM: a kernel's configuration, not the device's DRAM headroom."""
    l1 = "Out of Memory: Not enough space to allocate 6400 B L1_SMALL buffer across 25 banks, where each bank needs"
    assert decided([l1]) == (None, None)
    assert decided([l1.replace("6400 B L1_SMALL", "71999488 B DRAM")])[0] is not None


def test_a_scraped_servers_log_says_startup_when_nothing_places_a_failure():
    """The daemon tells a scraped server's analyzer when it serves (note_serving); with no such word, a failure
    nothing places is a startup's (the prior of a log alone stays the pastes' one)."""
    a = LogAnalyzer(undecided_stage="loading_unknown")
    for i, text in enumerate([OOM], 1):
        a.feed(LogLine(i, text))
    a.flush()
    assert (a.first_oom.stage, a.first_oom.stage_evidence) == ("loading_unknown", "none")
    a = LogAnalyzer(undecided_stage="loading_unknown")
    a.note_serving()
    a.feed(LogLine(1, OOM))
    a.flush()
    assert (a.first_oom.stage, a.first_oom.phase) == ("runtime_unknown", "runtime")


def test_another_librarys_logger_columns_are_peeled_and_its_level_kept():
    """tt-metal logs through loguru (`TIME | LEVEL | module:function:line - message`) and its C++ logger
    (`TIME | critical |          Always | message`) inside vLLM's processes: the failure is read under the columns,
    and the level they carry decides advice from failure as vLLM's own level does."""
    tt = "Out of Memory: Not enough space to allocate 499122176 B DRAM buffer across 12 banks (assert.hpp:103)"
    assert decided([f"2025-10-01 22:09:37.644 | critical |          Always | {tt}"])[0] is not None
    loguru = "2025-10-01 22:09:37.644 | {} | models.tt.generator:prefill_forward_text:119 - {}"
    assert decided([loguru.format("ERROR   ", OOM)])[0] is not None
    advice = "If you see CUDA out of memory, try lowering --max-num-seqs"
    assert decided([loguru.format("WARNING ", advice)]) == (None, None)
    assert decided([loguru.format("ERROR   ", advice)])[0] is not None  # the level is what tells them apart


def test_ascends_runtime_memory_failure_is_read_inside_an_exception_message():
    """CANN's "Memory_Allocation_Failure(EL0004)" and its trace "alloc device memory failed, runtime result =
    207001" stand as indented lines of an exception's message under vLLM's prefix; a traceback's source line is
    indented the same way and stays unread."""
    pre = "(EngineCore_DP0 pid=10516) ERROR 12-03 12:16:41 [core.py:710] "
    lines = [
        f"{pre}EngineCore encountered a fatal error.",
        f"{pre}        Possible Cause: Available memory is insufficient.",
        f"{pre}        alloc device memory failed, runtime result = 207001[FUNC:ReportCallError][FILE:log_inner.cpp]",
    ]
    a = feed(lines)
    a.flush()
    assert a.first_oom is not None and a.first_oom.line == 3 and a.first_oom.cause == "device_oom"
    assert a.first_oom.evidence.startswith("alloc device memory failed")
    assert decided([f"{pre}        Memory_Allocation_Failure(EL0004): Failed to allocate memory."])[0] is not None
    assert decided([f"{pre}    x = load(path)", f"{pre}        Possible Cause: Available memory is insufficient."]) == (
        None,
        None,
    )


def test_tenstorrents_prefill_and_decode_forward_name_the_step():
    """Tenstorrent's model runner (vllm/worker/tt_model_runner.py in its fork) runs a step through the model's
    `prefill_forward` or `decode_forward`: the frame, or the source line calling it when the excerpt cuts the frame."""
    runner = "vllm/worker/tt_model_runner.py"
    head = [f'  File "{SITE}/vllm/engine/multiprocessing/engine.py", line 1, in engine_step', "    x = y()"]
    for func, step in (("prefill_forward", "prefill"), ("decode_forward", "decode")):
        called = [*head, f'  File "{SITE}/{runner}", line 740, in _execute_model_single_step']
        called += [f"    outputs = self.model.{func}(**execute_model_kwargs)"]
        assert decided([OOM, "Traceback (most recent call last):", *called]) == (step, "frame")
        framed = [*called, f'  File "{SITE}/models/generator.py", line 9, in {func}', "    x = y()"]
        assert decided(["Traceback (most recent call last):", *framed, OOM])[0] == step
    assert decided([OOM, "Traceback (most recent call last):", *head])[0] == "runtime_unknown"
    # with nothing saying serving, the prior's runtime is told which step too (and says it is the prior)
    bare = [f'  File "{SITE}/{runner}", line 740, in _execute_model_single_step', "    self.model.prefill_forward(x)"]
    assert decided([OOM, "Traceback (most recent call last):", *bare]) == ("prefill", "none")


def test_the_servers_entry_point_in_a_traceback_means_the_server_never_served():
    """A traceback that left `vllm serve`'s own main (`bin/vllm`, `<module>`) is a startup's: once serving, an
    engine's death ends uvicorn's loop through the launcher's shutdown handlers. A user's script's `<module>` is not."""
    died = [OOM, "(APIServer pid=7) Traceback (most recent call last):"]
    for path in ("/usr/local/bin/vllm", f"{SITE}/vllm/entrypoints/openai/api_server.py"):
        entry = f'(APIServer pid=7)   File "{path}", line 10, in <module>'
        assert decided([*died, entry]) == ("loading_unknown", "frame")
    script = '(APIServer pid=7)   File "/home/me/bin/vllm_bench.py", line 10, in <module>'
    assert decided([*died, script]) == (UNDECIDED_STAGE, "none")


ALLOCATOR = (
    "[rank3]:[W814 16:06:55.441716306 CUDACachingAllocator.cpp:3933] memory allocation failed with OOM on device 3 "
    "while trying to allocate 3177185280 bytes (free: 1243414528, total: 85094825984)."
)


def test_the_caching_allocators_oom_warning_is_a_failure_only_when_an_error_follows():
    """PyTorch's caching allocator warns when the device refuses it, frees its cache and tries again: an error right
    after is the failure (counted once, at the warning); serving going on, or nothing more, means the retry worked."""
    worker = "(Worker_TP1 pid=162486) ERROR 08-14 16:06:55 [multiproc_executor.py:1020] "
    failed = feed([ALLOCATOR, f"{worker}WorkerProc hit an exception.", f"{worker}Traceback (most recent call last):"])
    failed.flush()
    assert failed.first_oom is not None and failed.first_oom.line == 1 and failed.counts["oom"] == 1
    with_oom = feed([ALLOCATOR, "Traceback (most recent call last):", *traceback(LOAD)[1:]])
    with_oom.flush()
    assert with_oom.counts["oom"] == 1 and with_oom.first_oom.stage == "weight_loading"
    stats = "(APIServer pid=1) INFO 08-16 12:00:10 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    for after in ([], [stats + "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs"]):
        went_on = feed([ALLOCATOR, *after])
        went_on.flush()
        assert went_on.first_oom is None and len(went_on.recovered) == 1, after
    quoted = "(APIServer pid=1) INFO 08-16 12:00:05 [logger.py:40] Received request x: prompt: '" + ALLOCATOR + "'"
    assert decided([quoted, "Traceback (most recent call last):"]) == (None, None)


def test_more_device_runtimes_words_for_memory_they_could_not_get():
    """TPU's PjRt loading a compiled program ("Attempting to reserve"), torch_npu's "[Error]: Failed to apply for
    memory." and CANN's older "EL0004: [PID: N] ... Failed to allocate memory."."""
    for line in (
        "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Error loading program: Attempting to reserve 1.04G at "
        "the bottom of memory. That was not possible. There are 905.37M free, 0B reserved, and 905.37M reservable.",
        "[Error]: Failed to apply for memory.",
        "EL0004: [PID: 316198] 2025-09-28-07:22:29.827.496 Failed to allocate memory.",
    ):
        assert decided([line])[0] is not None, line


def test_a_diffusion_engines_warmup_run_and_torch_npus_failing_function_place_a_startup_failure():
    """vllm-omni's DiffusionEngine warms up with a dummy request while it is built (vllm_omni/diffusion/
    diffusion_engine.py `_dummy_run`); torch_npu's error names the function it failed in, `capture_begin` a capture."""
    omni = [
        ("vllm_omni/diffusion/diffusion_engine.py", "__init__"),
        ("vllm_omni/diffusion/diffusion_engine.py", "_dummy_run"),
    ]
    cann = "Memory_Allocation_Failure(EL0004): Failed to allocate memory requested by GE module."
    assert (
        decided([*traceback(omni, last="RuntimeError: Dummy run failed: The Inner error is reported as above."), cann])[
            0
        ]
        == "warmup"
    )
    pre = "(EngineCore_DP0 pid=357) ERROR 01-06 17:54:58 [model_runner_v1.py:3016] "
    npu = "capture_begin:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:178 NPU function error: c10_npu::acl::"
    npu += "AclmdlRICaptureBegin(capture_stream_, capture_mode), error code is 207005"
    assert decided([pre + npu, pre + "[Error]: Failed to apply for memory."]) == ("graph_capture", "frame")
    copy = npu.replace("capture_begin:", "operator():").replace("AclmdlRICaptureBegin", "aclnnInplaceCopy")
    assert decided([pre + copy, pre + "[Error]: Failed to apply for memory."])[0] == UNDECIDED_STAGE


def test_the_entry_point_never_overrides_the_engines_own_words_nor_a_dp_servers_watch():
    """Newer launchers re-raise EngineDeadError out of `vllm serve`'s main once serving, and several API servers
    (data parallel) raise "Process ... died" from wait_for_completion_or_failure, which runs only after the engines'
    handshake (vllm/v1/utils.py): both tracebacks stand on the entry point's `<module>`, and both are serving's."""
    oom = "(EngineCore pid=310) ERROR 09-05 01:24:33 [core.py:1190] " + OOM
    entry = [
        "(APIServer pid=1) Traceback (most recent call last):",
        '(APIServer pid=1)   File "/usr/local/bin/vllm", line 10, in <module>',
        "(APIServer pid=1)     sys.exit(main())",
    ]
    dead = "(APIServer pid=1) vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."
    assert decided([oom, *entry, dead])[0] == "runtime_unknown"
    watch = [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/vllm", line 10, in <module>',
        f'  File "{SITE}/vllm/entrypoints/cli/serve.py", line 282, in run_multi_api_server',
        f'  File "{SITE}/vllm/v1/utils.py", line 276, in wait_for_completion_or_failure',
        "RuntimeError: Process EngineCore_DP1 (PID: 2302) died with exit code 1",
    ]
    assert decided([oom, *watch])[0] == "runtime_unknown"
    assert decided([oom, *entry]) == ("loading_unknown", "frame")  # alone, cut: the entry point still places it


def test_tenstorrents_warmup_runs_its_decode_forward_at_startup():
    """tt-metal's adapters capture their step traces in `warmup_model_prefill` / `warmup_model_decode`, which call
    the same `decode_forward` that serving does: warm-up, not a decode step."""
    tt = "Out of Memory: Not enough space to allocate 499122176 B DRAM buffer across 12 banks"
    frames = [("models/tt_transformers/tt/generator_vllm.py", "warmup_model_decode")]
    frames += [("models/tt_transformers/tt/generator.py", "decode_forward")]
    assert decided(traceback(frames, last=tt))[0] == "warmup"


def test_xla_running_out_of_the_devices_memory_counts_bare_but_a_cores_vmem_does_not():
    """torch_xla raises XLA's compile error as a bare ValueError: `hbm` is the device's memory; `vmem` is a core's
    on-chip scratch that a kernel's configuration overflowed (labelled none in the corpus, as tt-metal's L1)."""
    hbm = (
        "ValueError: Ran out of memory in memory space hbm. Used 33.54G of 15.75G hbm. Exceeded hbm capacity by 17.79G."
    )
    vmem = "ValueError: Ran out of memory in memory space vmem while allocating on stack for %name.32 = bf16[16,32,128]"
    assert decided([hbm])[0] is not None
    assert decided([vmem]) == (None, None)


def test_v0s_multimodal_profile_run_warnings_say_the_memory_is_being_profiled():
    """V0's profile_run for a multi-modal model logs these before running its dummy batch (worker/model_runner.py;
    multimodal/profiling.py get_decoder_dummy_data, V0 only): a failure after them is KV-cache sizing."""
    oom = (
        "ERROR 04-27 16:28:02 [engine.py:448] CUDA out of memory. Tried to allocate 800.00 MiB. GPU 0 has a total "
        "capacity of 15.56 GiB of which 442.62 MiB is free. Of the allocated memory 14.88 GiB is allocated by "
        "PyTorch, and 38.19 MiB is reserved by PyTorch but unallocated."
    )
    short = (
        "WARNING 04-27 16:27:59 [profiling.py:245] The sequence length used for profiling (max_num_batched_tokens / "
        "max_num_seqs = 20000) is too short to hold the multi-modal embeddings in the worst case"
    )
    few = (
        "WARNING 03-31 16:53:06 [model_runner.py:1296] Computed max_num_seqs (min(64, 16384 // 32768)) to be less "
        "than 1. Setting it to the minimum value of 1."
    )
    assert decided([short, oom]) == ("kv_cache_alloc", "marker")
    assert decided([few, oom]) == ("kv_cache_alloc", "marker")
    assert decided([oom]) == ("loading_unknown", "allocator")


START_LINE = "(APIServer pid=1) INFO 07-26 10:23:47 [api_server.py:1] vLLM API server version 0.11.0"


def test_an_error_relaying_the_failure_in_words_places_what_only_a_marker_had_placed():
    """V1 sizes the KV cache, allocates it and warms up after one "GPU KV cache size" line: a bare torch OOM below it
    is the KV cache's only by default. _dummy_sampler_run re-raises it as "CUDA out of memory occurred when warming up
    sampler" (an author-trimmed log may keep just those two lines): the relay names the step, and it is one failure."""
    head = "(EngineCore_DP0 pid=2) "
    sized = [
        START_LINE,
        head + "INFO 07-26 10:24:21 [gpu_worker.py:424] Available KV cache memory: 5.61 GiB",
        head + "INFO 07-26 10:24:21 [kv_cache_utils.py:1314] GPU KV cache size: 45,968 tokens",
        head + "ERROR 07-26 10:24:28 [core.py:1100] " + OOM,
    ]
    relay = (
        head + "ERROR 07-26 10:24:28 [core.py:1100] RuntimeError: CUDA out of memory occurred when warming up sampler "
        "with 256 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing "
        "the engine."
    )
    assert decided(sized) == ("kv_cache_alloc", "marker")
    a = feed([*sized, relay])
    a.flush()
    assert a.first_oom is not None and (a.first_oom.stage, a.first_oom.stage_evidence) == ("warmup", "message")
    assert a.first_oom.line == 4 and dict(a.oom_counts) == {("warmup", "loading"): 1}


MAMBA = (
    "ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (189). Each decode sequence requires one Mamba "
    "cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 189 or increase "
    "gpu_memory_utilization."
)


def test_too_few_mamba_cache_blocks_for_max_num_seqs_is_a_kv_cache_failure_with_its_own_remedy():
    """vllm/config/compilation.py resolve_cudagraph_mode_and_sizes, called as the KV cache is initialized: a hybrid
    model's recurrent state takes one block per decode sequence out of the memory budget. No "out of memory" words,
    and vLLM names the remedy (lower max_num_seqs), which the generic loading-stage advice rules out."""
    worker = "(Worker_TP0 pid=7) ERROR 09-19 18:38:51 [multiproc_executor.py:1053] "
    lines = [START_LINE, *traceback([("vllm/v1/worker/gpu_worker.py", "initialize_from_config")], MAMBA, worker)]
    report = triage_stream("x", io.BytesIO("\n".join(lines).encode()))
    first = report["first_oom"]
    assert (first["stage"], first["cause"], first["stage_evidence"]) == (
        "kv_cache_alloc",
        "mamba_cache_insufficient",
        "message",
    )
    assert report["facts"]["max_num_seqs"] == 256 and report["facts"]["mamba_cache_blocks"] == 189
    assert "at most 189" in report["next_move"] and "does not help" not in report["next_move"]
    # relayed inside another error's line, it still counts; quoted in a user's prompt, it does not
    assert stage_of([START_LINE, f"{worker}Worker failed with error '{MAMBA}', please check the stack trace"]) == (
        "kv_cache_alloc",
        "message",
    )
    prompt = f"(APIServer pid=1) INFO 09-19 18:38:51 [logger.py:40] Received request x: prompt: '{MAMBA}'"
    assert stage_of([START_LINE, prompt]) == (None, None)


def test_v0s_max_seq_len_error_has_one_cause_at_a_lines_start_and_relayed_inside_a_line():
    """V0's raise_if_cache_size_invalid: the model's max seq len does not fit the tokens the cache holds. Relayed inside
    another line (Xinference's restful API wraps it so), it is the same failure with the same cause."""
    message = (
        "The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache "
        "(1984). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )
    relayed = (
        f"2025-04-12 21:57:39,467 xinference.api.restful_api 1 ERROR    [address=0.0.0.0:43423, pid=167] {message}"
    )
    for line in (f"ValueError: {message}", relayed):
        report = triage_stream("x", io.BytesIO("\n".join([START_LINE, line]).encode()))
        first = report["first_oom"]
        assert (first["stage"], first["cause"]) == ("kv_cache_alloc", "max_model_len_too_large"), line


def test_podman_compose_brackets_the_service_name_in_its_column():
    """podman-compose writes `[service]` padded to a column, then `| `, before each line of the container."""
    column = "[vllm]                 | "
    lines = [
        column + "INFO 05-29 04:44:25 [gpu_model_runner.py:1276] Starting to load model Qwen/Qwen3-32B...",
        column + "ERROR 05-29 04:44:26 [core.py:387] EngineCore hit an exception: Traceback (most recent call last):",
        column + "ERROR 05-29 04:44:26 [core.py:387] " + OOM,
    ]
    assert decided(lines) == ("weight_loading", "marker")


def test_the_allocators_nvml_assert_is_the_oom_message_it_could_not_write():
    """c10/cuda/CUDACachingAllocator.cpp reportProcessMemoryInfo asserts `NVML_SUCCESS == r` while writing the OOM
    message's process list: on a MIG slice the assert is all that is left of "CUDA out of memory"."""
    head = "(EngineCore_0 pid=72) "
    assertion = (
        'RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/CUDACachingAllocator.cpp":1016, '
        "please report a bug to PyTorch. "
    )
    lines = [
        head + "INFO 08-25 09:42:20 [gpu_worker.py:276] Available KV cache memory: 1.40 GiB",
        head + "INFO 08-25 09:42:24 [gpu_model_runner.py:2708] Graph capturing finished in 4 secs, took 0.39 GiB",
        head + "ERROR 08-25 09:42:24 [core.py:700] EngineCore failed to start.",
        head + "ERROR 08-25 09:42:24 [core.py:700] " + assertion,
    ]
    assert decided(lines) == ("warmup", "marker")
    # another internal assert, or NVML's check elsewhere, is not a memory failure
    other = assertion.replace("CUDACachingAllocator.cpp", "CUDAContext.cpp")
    assert decided([*lines[:3], head + "ERROR 08-25 09:42:24 [core.py:700] " + other]) == (None, None)
