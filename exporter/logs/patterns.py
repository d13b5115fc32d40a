"""What vLLM's log lines say, as patterns: stage markers, memory failures, other events, stated facts.

Every pattern is written from vLLM's own format strings (vllm/logger.py, the worker and engine modules; see the fixture
headers for the source files) and matches key phrases loosely, with numbers as groups, because the
wording drifts between releases. A memory failure is found where vLLM or torch put it: at the start of an
exception line, or inside a line that relays it (`Worker failed with error 'CUDA out of memory ...'`, an
`EngineDeadError` chain, an HTTP error body). Users' text is kept out by context, not by position: request
logs, scheduler dumps and JSON bodies that carry prompts are never searched for failures.
"""

from __future__ import annotations

import re

from exporter.logs.prefilter import LiteralGate

LOADING_STAGES = ("weight_loading", "graph_capture", "kv_cache_alloc", "warmup", "loading_unknown")
RUNTIME_STAGES = ("prefill", "decode", "runtime_unknown")
STAGES = LOADING_STAGES + RUNTIME_STAGES

# The stage an engine is in, for `engine_stage`: the loading stages, then `ready` (serving),
# `crashed` (a fatal error since the last start) and `unknown` (no startup seen).
ENGINE_STAGES = (
    "weight_loading",
    "graph_capture",
    "kv_cache_alloc",
    "warmup",
    "loading_unknown",
    "ready",
    "crashed",
    "unknown",
)

EVENT_KINDS = (
    "oom",
    "oom_recovered",
    "engine_ready",
    "engine_crash",
    "preemption",
    "context_rejected",
    "tool_call_parse_error",
    "comm_error",
    "illegal_memory_access",
)


def phase_of(stage: str) -> str:
    return "runtime" if stage in RUNTIME_STAGES else "loading"


# -- startup markers, in vLLM's order ---------------------------------------------------------------
# (pattern, what it marks). "server_start" opens a new startup; the rest move the stage machine.
MARKERS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"vLLM API server version"), "server_start"),
    (re.compile(r"Initializing an? (?:V1 )?LLM engine"), "engine_start"),
    (re.compile(r"^Starting to load model|checkpoint shards:|^Loading weights took"), "weight_loading"),
    (re.compile(r"^Model loading took|^Loading model weights took"), "weights_loaded"),
    (
        re.compile(
            r"for vLLM's torch\.compile|^Dynamo bytecode transform time|^Compiling a graph for"
            r"|^Directly load the compiled graph"
        ),
        "compile",
    ),
    (re.compile(r"^torch\.compile takes"), "compiled"),
    # V0 0.6.x printed "Memory profiling results: duration=..., kv_cache_size=..." instead of "... takes"
    (
        re.compile(
            r"^Memory profiling takes|^Memory profiling results|^Available KV cache memory|KV cache size: [\d,]+ tokens|^Starting profile run"
            r"|^# GPU blocks|^Maximum concurrency for"
            # V0's profile_run for a multi-modal model (worker/model_runner.py, then multimodal/profiling.py
            # get_decoder_dummy_data, V0 only): the dummy batch it is about to run is too small, or too few fit
            r"|^Computed max_num_seqs \(min\(|^The sequence length used for profiling \("
        ),
        "kv_cache_alloc",
    ),
    # tt-metal's vLLM backend (models/tt_transformers allocate_vllm_kv_cache): tqdm "Allocating TT kv caches ..."
    (re.compile(r"^Allocating TT kv caches"), "kv_cache_alloc"),
    (re.compile(r"Capturing CUDA graph|Capturing cudagraphs|^Capturing the model for CUDA graphs"), "graph_capture"),
    (re.compile(r"^Graph capturing finished"), "graph_captured"),
    (re.compile(r"^init engine \(profile, create kv cache, warmup model\) took"), "engine_initialized"),
    (re.compile(r"^Application startup complete|^Starting vLLM API server|^Uvicorn running on"), "ready"),
]
# The command that launched the server, as a paste shows it above the log (`vllm serve`, `python -m
# vllm.entrypoints.openai.api_server`, the same inside `docker run ...`): a startup begins. Read only on a line without
# vLLM's level (a typed command has none, though a launcher may tag it with a process, as SkyPilot's `(task, pid=N)`;
# a running server's own lines may quote the command: model outputs with --enable-log-outputs, hints).
LAUNCH_COMMAND = re.compile(r"(?:^|[\s$#>])vllm serve\s|-m vllm\.entrypoints\.(?:openai\.)?api_server\b")
# Cheap test before the marker list: every marker contains one of these words.
MARKER_HINT = re.compile(
    r"vLLM API|LLM engine|load model|shards:|Loading|loading took|torch\.compile|Dynamo"
    r"|Compiling a graph|compiled graph|Memory profiling|profile run|KV cache|TT kv caches|GPU blocks|Maximum concurrency"
    r"|apturing|init engine|startup complete|API server|Uvicorn running|Computed max_num_seqs|used for profiling"
)
# Offline `LLM.generate` has no server: its progress bars (vllm/entrypoints/llm.py: tqdm "Adding requests",
# "Processed prompts") are drawn only once the engine is built. Read at the message start, before the hints.
OFFLINE_PROGRESS = ("Processed prompts", "Adding requests")
# tt-metal's generators (models/tt_transformers/tt/generator.py and the model demos' own, through loguru) log this as
# each user's prefill starts: the step under way until a failure, as V1's scheduler dump would say. (Its warm-up runs
# prefills too; whether the engine was serving is read elsewhere.)
TT_PREFILL = "Prefilling User "

# -- memory failures ---------------------------------------------------------------------------------
# (pattern, stage hint or None, failure kind). None: the stage comes from frames and markers.
# vLLM's own errors may be logged bare, as `ValueError: ...` or as `ValueError('...')`.
_EXC = r"^(?:[\w.]*(?:Error|Exception)(?:: |\(['\"]))?"
OOM_PATTERNS: list[tuple[re.Pattern[str], str | None, str]] = [
    (
        re.compile(r"^RuntimeError: (?:CUDA|HIP) out of memory occurred when warming up sampler"),
        "sampler",
        "sampler_warmup_oom",
    ),
    # (not Ray's: `ray.exceptions.OutOfMemoryError` is its memory monitor killing a task for the host's RAM)
    (re.compile(r"^(?!ray\.)(?:[\w.]+\.)?OutOfMemoryError\b"), None, "device_oom"),
    # `CUDA Error: out of memory at <file>:<line>`: vLLM's sleep-mode allocator (csrc/cumem_allocator.cpp, CUDA_CHECK
    # formats cuGetErrorString as "CUDA Error: %s at %s:%d") raises it from CuMemAllocator.wake_up.
    (
        re.compile(
            r"^(?:[\w.]+\.)?(?:RuntimeError|AcceleratorError|Error): (?:CUDA|HIP)(?: driver)? [Ee]rror: out of memory"
        ),
        None,
        "device_oom",
    ),
    (
        re.compile(
            r"^(?:[\w.]+\.)?RuntimeError: .{0,200}?(?:CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
            r"|cudaErrorMemoryAllocation|hipErrorOutOfMemory|HIPBLAS_STATUS_ALLOC_FAILED)"
        ),
        None,
        "device_oom",
    ),
    (re.compile(_EXC + r"No available memory for the cache blocks"), "kv_cache_alloc", "kv_cache_insufficient"),
    (
        re.compile(_EXC + r"To serve at least one request with the models?'s max seq len \((\d+)\)"),
        "kv_cache_alloc",
        "kv_cache_insufficient",
    ),
    (
        re.compile(
            _EXC + r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens"
            r" that can be stored in KV cache"
        ),
        "kv_cache_alloc",
        "max_model_len_too_large",
    ),
    # A hybrid model's recurrent state takes one "Mamba cache block" per decode sequence, carved from the memory left
    # after the weights: vllm/config/compilation.py resolve_cudagraph_mode_and_sizes raises this as the KV cache is
    # initialized (initialize_kv_cache), before any graph is captured, when max_num_seqs needs more blocks than fit
    (
        re.compile(_EXC + r"max_num_seqs \(\d+\) exceeds available Mamba cache blocks"),
        "kv_cache_alloc",
        "mamba_cache_insufficient",
    ),
    (
        re.compile(_EXC + r"Free memory on device .{0,80}? on startup is less than desired GPU memory utilization"),
        "loading_unknown",
        "free_memory_below_utilization",
    ),
]
OOM_HINT = re.compile(
    r"OutOfMemoryError|out of memory|ALLOC_FAILED|MemoryAllocation|OutOfMemory"
    r"|No available memory|To serve at least one request|stored in KV cache|Free memory on device|Mamba cache blocks"
    r"|Tried to allocate|OUT_OF_DEVICE_MEMORY|RESOURCE_EXHAUSTED|Not enough space to allocate|NVML_SUCCESS == r "
    r"|EL0004|device memory failed|failed with OOM|Failed to apply for memory|nrt_tensor_allocate status"
)
# Ascend's CANN runtime (vllm-ascend): "Memory_Allocation_Failure(EL0004): Failed to allocate memory." (older: "EL0004:
# [PID: N] <time> Failed to allocate memory.") over its own trace "alloc device memory failed, runtime result = 207001"
# (ACL_ERROR_RT_MEMORY_ALLOCATION), and torch_npu's "[Error]: Failed to apply for memory." for the same error. An
# exception carries them as lines of its message, indented under vLLM's prefix like a traceback's source lines: read
# there too.
CANN_OOM = re.compile(
    r"Memory_Allocation_Failure\(EL0004\)|EL0004: .{0,80}?Failed to allocate memory|alloc(?:ate)? device memory failed"
    r"|\[Error\]: Failed to apply for memory"
)
# The same failures where they stand inside a line: phrases only torch, the device runtimes and vLLM print.
# `Tried to allocate N MiB` is torch's OOM message whose first words a pasted excerpt may have cut off.
OOM_SIGNATURE = re.compile(
    r"(?P<device>(?:CUDA|HIP|XPU|NPU|MPS)(?: driver| backend)? (?:[Ee]rror: )?out of memory"
    # XLA on TPU: "RESOURCE_EXHAUSTED: ... Ran out of memory in memory space hbm", or PjRt's "RESOURCE_EXHAUSTED: Error
    # allocating device buffer: Attempting to allocate 1.00G. That was not possible. There are 500.00M free."
    # XLA's newer coded errors put the words on the next line: E0100 (a device buffer) and E0101 (a program's memory)
    # are allocation failures (openxla.org/xla/errors/error_0100, error_0101)
    r"|RESOURCE_EXHAUSTED: E010[01]: Runtime(?:Buffer|Program)AllocationFailure"
    r"|Out of memory while trying to allocate|RESOURCE_EXHAUSTED: .{0,80}?(?:Ran out of memory|out of memory"
    r"|Attempting to (?:allocate|reserve))"
    # XLA's compiler when a program does not fit the device's memory, also raised bare (torch_xla: a ValueError);
    # not a core's `vmem`, a kernel's on-chip scratch (its configuration, not memory headroom: as tt-metal's L1)
    r"|Ran out of memory in memory space hbm\b"
    # (Ray names a task's failure after its cause, `RayTaskError(OutOfMemoryError)`, for torch's error and for its own
    # host-memory kill alike: the cause's own line, which Ray prints below, decides)
    r"|(?<!ray\.exceptions\.)(?<!RayTaskError\()OutOfMemoryError\b|Tried to allocate \d[\d.]* ?[KMGT]i?B"
    r"|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
    # torch's caching allocator lists the device's processes with NVML only to write its OOM message
    # (c10/cuda/CUDACachingAllocator.cpp reportProcessMemoryInfo, `TORCH_INTERNAL_ASSERT(NVML_SUCCESS == r)`); where
    # NVML cannot list them (a MIG slice, a container without NVML's process view) the assert replaces the message
    r"|NVML_SUCCESS == r INTERNAL ASSERT FAILED at \"[^\"]{0,200}CUDACachingAllocator\.cpp\""
    r"|cudaErrorMemoryAllocation|hipErrorOutOfMemory|HIPBLAS_STATUS_ALLOC_FAILED|UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY"
    # NCCL's CUDACHECK: `Cuda failure 2 'out of memory'` (older: `Cuda failure 'out of memory'`)
    r"|Cuda failure (?:\d+ )?'out of memory'"
    # Tenstorrent's allocator (tt-metal tt_metal/impl/allocator/bank_manager.cpp): "Out of Memory: Not enough space to
    # allocate {} B {} buffer across {} banks", raised through TT_FATAL/TT_THROW by its vLLM backend: the device's DRAM
    # (an L1 buffer is the cores' own SRAM, a kernel's configuration rather than memory headroom)
    r"|Out of Memory: Not enough space to allocate \d+ B DRAM buffer"
    # AWS Neuron's runtime refusing a device tensor: NRT_RESOURCE (status 4), "Allocation Failure"
    r"|nrt_tensor_allocate status=4\b"
    r"|" + CANN_OOM.pattern + ")"
    r"|(?P<kv>No available memory for the cache blocks"
    r"|KV cache is needed, which is larger than the available KV cache memory)"
    r"|(?P<kv_len>is larger than the maximum number of tokens that can be stored in KV cache)"
    r"|(?P<mamba>exceeds available Mamba cache blocks)"
    r"|(?P<free>Free memory on device .{0,80}? on startup is less than desired GPU memory utilization)"
)
# The stage hint and cause of OOM_SIGNATURE's groups of vLLM's own messages, as at a line's start (OOM_PATTERNS)
SIGNATURE_CAUSES: dict[str, tuple[str | None, str]] = {
    "kv": ("kv_cache_alloc", "kv_cache_insufficient"),
    "kv_len": ("kv_cache_alloc", "max_model_len_too_large"),
    "mamba": ("kv_cache_alloc", "mamba_cache_insufficient"),
    "free": ("loading_unknown", "free_memory_below_utilization"),
}
# An exception line whose message a paste cut inside the device's OOM phrase (`RuntimeError: CUDA out of`). Only the
# last line of a log can be cut so: it counts when nothing follows it (see LogAnalyzer.flush).
CUT_OOM = re.compile(
    r"^(?:[\w.]+\.)?[A-Za-z]*(?:Error|Exception): (?:CUDA|HIP|XPU) out(?: of(?: m(?:e(?:m(?:o(?:ry?)?)?)?)?)?)?\s*$"
)
# Words a relayed failure uses for the step it interrupted, when no frame says it.
MESSAGE_STAGES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"warming up (?:the )?sampler|warm(?:ing)? ?up (?:the )?model", re.I), "warmup"),
    (
        re.compile(
            r"captur(?:e|ing) (?:the )?(?:CUDA ?|cuda)?graphs?|cuda ?graph capture|torch\.compile|compiling (?:the )?"
            r"(?:model|graph)",
            re.I,
        ),
        "graph_capture",
    ),
    (
        re.compile(
            r"memory profiling|profil(?:e|ing) run|determin\w* (?:the )?(?:available|num)|allocat\w* (?:the )?KV"
            r"|KV cache (?:allocation|initiali[sz]ation)",
            re.I,
        ),
        "kv_cache_alloc",
    ),
    # vllm/model_executor/layers/linear.py: "Failed to create unquantized linear weights: %s"
    (
        re.compile(
            r"creat(?:e|ing) (?:the )?(?:[\w-]+ ){0,3}weights|load(?:ing)? (?:the )?(?:model )?weights"
            r"|loading (?:the )?model\b"
            r"|model loading"
            # vllm/v1/worker/gpu_model_runner.py load_model: "Failed to load model - not enough GPU memory. ..."
            r"|failed to load (?:the )?model\b",
            re.I,
        ),
        "weight_loading",
    ),
]
# Text that carries what users sent: a failure phrase after one of these is a quote, not a failure.
USER_TEXT = re.compile(
    r"Received request|Generated response|Added request|prompt|SchedulerOutput\(|NewRequestData\(|SamplingParams"
    r"|[\"']content[\"']|[\"']messages[\"']|[\"']input[\"']|[\"']text[\"']|HTTP/[\d.]+\""
)
# vLLM catches some memory errors and goes on (an autotuner skipping a configuration, a fallback):
# the line says so. Those are recovered memory events, never the failure.
ADVISORY = re.compile(r"\b(?:avoid|may|might|could|prevent|consider|If you|to reduce)\b")
# PyTorch's caching allocator when the device refused it (c10/cuda/CUDACachingAllocator.cpp, a `[W...]` warning): "memory
# allocation failed with OOM on device N while trying to allocate B bytes (free: F, total: T)". It frees its cache and
# tries once more, which often succeeds: a failure only when an error follows (LogAnalyzer._hold_allocator_oom).
ALLOCATOR_OOM = re.compile(r"memory allocation failed with OOM on device \d+")
RECOVERED = re.compile(r"[Ss]kipping|[Ff]alling back|[Ff]allback|[Rr]etrying|will retry|[Ii]gnor(?:e|ing)")
# Libraries that log inside vLLM's processes in Python's default `%(asctime)s - %(levelname)s - ...` shape
# (FlashInfer's autotuner: `2026-07-06 23:18:23,723 - WARNING - autotuner.py:1315 - flashinfer.jit: ...`): their
# level, for lines vLLM's own prefix does not carry.
FOREIGN_LEVEL = re.compile(r"(?:^|\s)- (DEBUG|INFO|WARNING) - ")

# vllm/v1/engine/core.py run_engine_core: "EngineCore failed to start." while the engine core is being built (and
# utils' "Engine core initialization failed"; V0's API server: "Engine process failed to start. See stack trace for
# the root cause.", vllm/entrypoints/openai/api_server.py), "EngineCore encountered a fatal error." once it ran.
# NCCL's own trace of a failure inside a communicator's setup (`NCCL INFO init.cc:1234 -> 1`, ncclCommInitRank): vLLM
# builds its communicators while the engine starts (init_device, pynccl).
ENGINE_NEVER_STARTED = re.compile(
    r"EngineCore failed to start|Engine core initialization failed"
    r"|Engine process failed to start|NCCL INFO .{0,80}?\binit\.cc:\d+ -> \d|ncclCommInitRank\w* failed"
)
# The words `logger.exception` writes above the traceback of the failure it reports (vllm/v1/engine/core.py
# run_engine_core): which of them stands above a failure nothing else placed says whether the engine had started.
ENGINE_HEADER = re.compile(r"EngineCore (?P<never>failed to start)|EngineCore encountered a fatal error")
# The API server's V1 output handler (vllm/v1/engine/async_llm.py `output_handler`, "AsyncLLM output_handler failed.")
# runs only once AsyncLLM's engine-core client is built, i.e. after the engine core reported its startup done.
# V0's multiprocessing client (vllm/engine/multiprocessing/client.py): "Engine loop is not running. Inspect the
# stacktrace ..." (MQEngineDeadError, raised to requests) and "Engine loop has died" (its heartbeat): the loop ran.
# V0's AsyncLLMEngine (vllm/engine/async_llm_engine.py): its background loop is started once the engine is built,
# on the first request; the loop task's done-callback `_log_task_completion` (before v0.4: `_raise_exception_on_finish`,
# raising AsyncEngineDeadError) logs "Engine background task failed". uvicorn's shutdown lines ("Waiting for application
# shutdown.", "Application shutdown complete.") come only from an HTTP server that ran, and vLLM starts it only once
# the engine is built (vllm/entrypoints/openai/api_server.py: serve_http inside build_async_engine_client).
# V1's EngineDeadError ("EngineCore encountered an issue. See stack trace (above) for the root cause.",
# vllm/v1/engine/exceptions.py) is raised by the engine-core client only once `engine_dead` is set
# (vllm/v1/engine/core_client.py MPClient): by the liveness monitor started at the end of the client's __init__, after
# the engines' startup handshake, or by ENGINE_CORE_DEAD, which run_engine_core sends only from its "encountered a
# fatal error" branch; a core that fails to start raises "Engine core initialization failed" instead.
ENGINE_WAS_RUNNING = re.compile(
    r"EngineCore encountered a fatal error|AsyncLLM output_handler failed|EngineCore encountered an issue"
    r"|\bEngineDeadError\b"
    r"|Engine loop is not running|Engine loop has died"
    r"|Engine background task failed|_log_task_completion|_raise_exception_on_finish|AsyncEngineDeadError"
    r"|Waiting for application shutdown|Application shutdown complete"
    # V0's launcher, from the exception handler of a request that found the engine dead (vllm/entrypoints/launcher.py
    # _add_shutdown_handlers, v0.5-v0.10): a request reached the server, so it had been serving
    r"|(?:is already dead|has failed), terminating server process"
)
# A worker's own words for the method it was running when it failed (V0's multiproc workers, vllm/executor/
# multiproc_worker_utils.py): tensor-parallel ranks run the same method, so a rank's words place
# a failure another rank logged just before them.
METHOD_WORDS = re.compile(r"while processing method \w+")
# PyTorch's OOM text states what this process had allocated; nothing yet means the device was still being set up or
# the weights were on their way (every later step runs with the weights in memory): loading.
NOTHING_ALLOCATED = re.compile(r"\b0 bytes (?:is allocated by PyTorch|already allocated)")
# PyTorch's "... allocated in private pools (e.g., CUDA Graphs)" says little of the stage (sleep mode keeps weights
# and KV cache in such pools, and since v0.21 graphs are captured while memory is profiled), but its absence says more:
# c10/cuda/CUDACachingAllocator.cpp writes that clause only when private pools (CUDA graphs' memory pools, a sleep-mode
# pool) hold cached memory, so "is allocated by PyTorch, and" reads as no graph captured yet: a startup before graph
# capture, or an engine serving in eager mode (--enforce-eager). In the real corpus, failures that nothing else placed
# and whose report says so had mostly failed at startup (17 of 18 in dev at the time of writing). PyTorch wrote the
# clause from 2.4 (pytorch#124673): 2.1's report ("total capacty") and XPU's allocator (c10/xpu, always "..., and")
# never say it, so their reports say nothing of the stage.
NO_GRAPH_POOLS = re.compile(r"\bis allocated by PyTorch, and\b")
NO_POOL_CLAUSE_EVER = re.compile(r"\bXPU out of memory|\btotal capacty\b")
# A client's copy of the API server's error answer (`openai.InternalServerError: Error code: 500 - {...}`): the server
# took a request, so the engine had been serving.
SERVER_ANSWER = re.compile(r"\bError code: 5\d\d - \{")
# V0's MQLLMEngine.start() (vllm/engine/multiprocessing/engine.py, v0.6-v0.10) logs `repr(e)` of what killed its
# engine loop; the engine was built (memory profiled, cache allocated) before start() is called, and a failure while
# building is logged by run_mp_engine as str(e), not as a repr. So `OutOfMemoryError('...` from engine.py: serving.
V0_ENGINE_LOOP_REPR = re.compile(r"^[A-Z]\w{0,60}(?:Error|Exception)\('")
V0_ENGINE_SOURCE = "engine.py:"

# -- other events (never memory failures) ------------------------------------------------------------
EVENT_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"is preempted by PreemptionMode\.|preempted by PreemptionMode"), "preemption"),
    (
        re.compile(r"This model's maximum context length is \d+ tokens|is longer than the maximum model length"),
        "context_rejected",
    ),
    (re.compile(r"Error in extracting tool call from response"), "tool_call_parse_error"),
    (
        re.compile(
            r"NCCL error|RCCL error|Watchdog caught collective operation timeout|DistBackendError"
            r"|ncclInternalError|ncclSystemError|ncclRemoteError"
        ),
        "comm_error",
    ),
    (re.compile(r"an illegal memory access was encountered"), "illegal_memory_access"),
    (
        re.compile(
            r"EngineDeadError|EngineCore encountered a fatal error|Engine core initialization failed"
            r"|EngineCore failed to start|Engine core proc \S+ died unexpectedly"
        ),
        "engine_crash",
    ),
]
EVENT_HINT = re.compile(
    r"preempted|maximum context length|maximum model length|tool call|NCCL|RCCL"
    r"|collective operation|DistBackend|nccl|illegal memory|Engine"
)
# Kinds that one failure prints many times (once per rank, once per traceback): counted once per incident.
INCIDENT_KINDS = frozenset({"oom", "oom_recovered", "engine_crash", "comm_error", "illegal_memory_access"})

# -- signs the engine is alive: they close an open incident -------------------------------------------
STATS_LINE = re.compile(
    r"Avg prompt throughput: [\d.]+ tokens/s, Avg generation throughput: [\d.]+ tokens/s"
    r"(?:.*?Running: (?P<running>\d+) reqs)?(?:.*?Waiting: (?P<waiting>\d+) reqs)?"
    r"(?:.*?GPU KV cache usage: (?P<kv>[\d.]+)%)?(?:.*?Prefix cache hit rate: (?P<hit>[\d.]+)%)?"
)
# Modules of the API server that only log while answering requests.
SERVING_SOURCES = (
    "serving_chat.py",
    "serving_completion.py",
    "serving_engine.py",
    "serving_responses.py",
    "serving_embedding.py",
    "serving_pooling.py",
    "serving_score.py",
)
# A 2xx answer that needed a live engine: a request to generate, embed, score (all POST), or /health, which asks the
# engine (vllm/entrypoints/openai/api_server.py `health`: engine_client.check_health()). /metrics, /v1/models,
# /version and /ping answer without it, also after it died.
ENGINE_ANSWERED_OK = re.compile(r'"(?:POST \S+|GET /health) HTTP/[\d.]+" 2\d\d')

# -- how an excerpt was pasted -------------------------------------------------------------------------
# A log copied out of a web page keeps the page's escapes (`File &quot;/x.py&quot;, line 3`).
HTML_ENTITY = re.compile(r"&(?:quot|apos|lt|gt|amp|#39|#x27|#34);")
# What starts a line of its own, once an indentation the whole excerpt carries (a markdown code block indented by
# four spaces, a list item, a quoted mail) is taken off: vLLM's or uvicorn's level prefix, a process or rank tag,
# a traceback's start or its exception line. Code lines and wrapped message tails under a frame never look so.
# (LINE_OPENER: the part that opens a line from its first character, what a paste's wrapped piece never does.)
LINE_OPENER = r"\(\w[^()\n]{0,80}? pid=\d+|\[rank\d|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)[: ]|Traceback \(most recent call last\)"
LINE_START = re.compile(r"(?:" + LINE_OPENER + r"|[A-Za-z_][\w.]*(?:Error|Exception)(?::|\(['\"]))")

# -- traceback frames -> stage ------------------------------------------------------------------------
TRACEBACK_START = "Traceback (most recent call last)"
FRAME = re.compile(r'^\s+File "(?P<path>[^"]{1,400})", line \d+, in (?P<func>[\w<>.]+)')
# The same frame inside a line whose newlines a paste lost (several frames run together).
INLINE_FRAME = re.compile(r'File "(?P<path>[^"]{1,400})", line \d+, in (?P<func>[\w<>.]+)')
# IPython's frame: `File <path>:<line>, in <Class>.<func>(<args>)`; Jupyter pastes the path as a markdown link.
IPYTHON_FRAME = re.compile(
    r"^\s*File \[?(?P<path>[^\s\[\](),]{1,400}?):\d+(?:\]\([^)\s]{0,400}\))?, in "
    r"(?:[\w.]*\.)?(?P<func>[\w<>]+)\("
)
FRAME_FUNCS: dict[str, str] = {}
for _stage, _funcs in {
    # building the model and loading its weights, post-processing included (quantization repacks)
    "weight_loading": (
        "load_weights",
        "load_model",
        "_load_weights",
        "load_weights_and_postprocess",
        "download_model",
        "_get_weights_iterator",
        "make_layers",
        "create_weights",
        "process_weights_after_loading",
        "initialize_model",
        "_initialize_model",
        "get_model",
        "_process_weights_after_loading",
        "load_model_weights",
        # each parameter's loader (layers' weight_loader), the checkpoint iterators, and the CPU
        # offload of parameters while the model is built (model_executor/models/utils.py)
        "weight_loader",
        "weight_loader_v2",
        "safetensors_weights_iterator",
        "pt_weights_iterator",
        "maybe_offload_to_cpu",
    ),
    "graph_capture": (
        "capture_model",
        "_capture_cudagraphs",
        "capture_graph",
        "_capture_graph",
        "capture_end",
        "capture_begin",
        "_warmup_and_capture",
    ),
    "kv_cache_alloc": (
        "profile_run",
        "determine_available_memory",
        "initialize_kv_cache",
        "_initialize_kv_caches",
        "get_kv_cache_config",
        "get_kv_cache_configs",
        "initialize_from_config",
        "_allocate_kv_cache_tensors",
        "initialize_kv_cache_tensors",
        "_reshape_kv_cache_tensors",
        "check_enough_kv_cache_memory",
        "_check_enough_kv_cache_memory",
        "determine_num_available_blocks",
        "initialize_cache",
        "_init_cache_engine",
        "allocate_kv_cache",
        "_allocate_kv_cache",
        "memory_profiling",
        "_initialize_kv_cache",
        "init_cache_engine",
        # model runner v2's prefill step run to size an extensible KV cache (vllm/v1/worker/gpu/warmup.py, 0.34)
        "run_kv_cache_sizing_warmup",
    ),
    # V0 worker's _warm_up_model; V1 kernel warm-up before capture (vllm/model_executor/warmup/kernel_warmup.py:
    # kernel_warmup -> deep_gemm_warmup, flashinfer_autotune; "Warmup and tune the kernels")
    "warmup": (
        "compile_or_warm_up_model",
        "warming_up_model",
        "_warmup_model",
        "warm_up_model",
        # tt-metal's model adapters, run from its vLLM plugin's warm-up (traces captured per step shape)
        "warmup_model",
        "warmup_model_prefill",
        "warmup_model_decode",
        "warmup_prefill_traces",
        "_warm_up_model",
        "kernel_warmup",
        "deep_gemm_warmup",
        "flashinfer_autotune",
        # model runner v2's warmup_kernels (vllm/v1/worker/gpu/warmup.py, vLLM 0.20 on): execute_model + sample_tokens
        # on synthetic steps to JIT-compile kernels, from compile_or_warm_up_model, after the KV cache exists
        "warmup_kernels",
    ),
    "sampler": ("_dummy_sampler_run", "_dummy_pooler_run"),
    # the engine, executor and workers being built: startup, the step not named
    "startup": (
        "from_engine_args",
        "_init_engine",
        "_init_executor",
        "_init_workers_ray",
        "init_worker",
        "init_device",
        "from_vllm_config",
        "_init_cache",
        "_initialize_model_parallel",
        "init_distributed_environment",
    ),
    # frames that exist only while serving: a step of the busy loop, a request in the API server
    "runtime": (
        "execute_model",
        "execute_model_ray",
        "sample_tokens",
        "_process_engine_step",
        "step_with_batch_queue",
        "run_busy_loop",
        "run_engine_loop",
        "engine_step",
        "step_async",
        "create_chat_completion",
        "create_completion",
        "chat_completion_stream_generator",
        "completion_stream_generator",
        "chat_completion_full_generator",
        "_process_input_queue",
        # sleep mode (vllm/device_allocator/cumem.py, worker and LLM `wake_up`): only an engine that was
        # built and put to sleep wakes up
        "wake_up",
        # offline LLM.generate's loop (vllm/entrypoints/llm.py) and V0's multiproc worker loop
        # (worker_base.py), named in "while processing method start_worker_execution_loop"
        "_run_engine",
        "start_worker_execution_loop",
        # V1 AsyncLLM's output handler and V0 AsyncLLMEngine's background-loop callbacks (see ENGINE_WAS_RUNNING)
        "output_handler",
        # `vllm serve` with several API servers (DP) watches its processes once the engines' handshake is done
        # (vllm/v1/utils.py, from run_multi_api_server in vllm/entrypoints/cli/serve.py): "Process ... died"
        "wait_for_completion_or_failure",
        "_log_task_completion",
        "_raise_exception_on_finish",
    ),
}.items():
    for _f in _funcs:
        FRAME_FUNCS[_f] = _stage
# Frames that say which step was running when a serving failure hit (attention backends' own paths).
STEP_FUNCS = {
    "_forward_prefill": "prefill",
    "forward_prefill": "prefill",
    "_run_prefill": "prefill",
    "context_attention_fwd": "prefill",
    "forward_prefix": "prefill",
    "_prefill": "prefill",
    "_forward_decode": "decode",
    "forward_decode": "decode",
    "paged_attention_v1": "decode",
    "paged_attention_v2": "decode",
    "decode_attention_fwd": "decode",
    "_decode": "decode",
    # gated-delta-net layers (Qwen3-Next and kin, vllm/model_executor/layers/fla/ops/): the chunked kernel runs the
    # prefill tokens, the fused recurrent one the decode tokens
    "chunk_gated_delta_rule_fwd": "prefill",
    "chunk_gated_delta_rule": "prefill",
    "fused_recurrent_gated_delta_rule_fwd": "decode",
    "fused_recurrent_gated_delta_rule": "decode",
    # a new prompt's image / audio embeddings merged into its token embeddings (vllm/model_executor/models/utils.py):
    # only a step that computes prompt tokens carrying them
    "merge_multimodal_embeddings": "prefill",
    "_merge_multimodal_embeddings": "prefill",
    # Tenstorrent's model runner (its vLLM fork, vllm/worker/tt_model_runner.py _execute_model_single_step) runs a
    # step through the model's `prefill_forward` or `decode_forward` (tt-metal's generators)
    "prefill_forward": "prefill",
    "decode_forward": "decode",
}
# vllm-ascend's chunked-prefill ("SplitFuse") attention mask says a step with prompts only where the model runner's
# _make_attention_mask chose it for that state (model_runner_v1.py, up to v0.12); from v0.13 every step's attention
# metadata builds it (attention/attention_v1.py AscendAttentionMetadataBuilder.build), decode steps' and dummy runs'.
ASCEND_SPLITFUSE = ("get_splitfuse_attn_mask", "_make_attention_mask", "vllm_ascend/")
# Step names other code uses too (Hugging Face tokenizers' `_decode` runs in every detokenization, and so do vLLM's own
# tokenizer helpers: vllm/renderers/base.py, vllm/multimodal/processing.py, models' tokenizers; model runner v2's
# speculators have `_prefill`/`_decode` draft phases that startup's dummy runs run too): a step only in a frame under an
# attention or layer path of vLLM's, never from a calling line (which names no file).
GENERIC_STEP_FUNCS = frozenset({"_prefill", "_decode"})
GENERIC_STEP_PATHS = ("vllm/attention/", "vllm/v1/attention/", "vllm/model_executor/layers/")
# Frames that exist only while a real request's prompt is computed, never in startup's dummy runs: a prefill chunk
# over cached context (MLA's _compute_prefill_context in vllm/v1/attention/backends/mla/common.py runs only when
# `has_context`; TurboQuant's _continuation_prefill in vllm/v1/attention/backends/turboquant_attn.py), V0's
# prefix-prefill path (forward_prefix, only with block tables) and prompt logprobs (gpu_model_runner's
# _get_prompt_logprobs_dict, only for requests that asked for them) and the multimodal encoder run on a new prompt's
# images or audio (gpu_model_runner's _execute_mm_encoder, only for the step's scheduled encoder inputs; profiling
# runs the encoder on dummy inputs another way). They say both: serving, and a prefill step.
SERVING_PREFILL_FUNCS = frozenset(
    {
        "_compute_prefill_context",
        "_context_parallel_compute_prefill_context",
        "_continuation_prefill",
        "forward_prefix",
        "_get_prompt_logprobs_dict",
        "_execute_mm_encoder",
    }
)
# Paths whose frames only exist while torch.compile is compiling (not when compiled code runs), or while a
# CUDA graph is captured.
COMPILE_PATHS = (
    "torch/_dynamo/convert_frame.py",
    "torch/_inductor/compile_fx.py",
    "torch/_inductor/codecache.py",
    "vllm/compilation/compiler_interface.py",
    "torch/_functorch/aot_autograd.py",
    "torch/_dynamo/output_graph.py",
    "torch/_inductor/graph.py",
)
CAPTURE_PATHS = ("torch/cuda/graphs.py",)
# What a function says in one file, whatever its name says elsewhere: (path parts, functions, tag), read before the name
# tables above and the path rules below; tag None: the frame says no stage. The offline LLM's calls that run requests
# (vllm/entrypoints/llm.py: generate, chat, ...) and the speculative drafter's propose (vllm/v1/spec_decode/, run for
# real requests' steps; startup runs the drafter's dummy_run instead) exist only while serving.
PATH_FUNCS: tuple[tuple[tuple[str, ...], frozenset[str], str | None], ...] = (
    (
        ("vllm/entrypoints/llm.py",),
        frozenset({"generate", "chat", "encode", "embed", "classify", "score", "reward", "beam_search"}),
        "runtime",
    ),
    # where vLLM 0.34 moved the offline pooling calls and beam search (vllm/entrypoints/pooling/offline.py,
    # vllm/entrypoints/generate/beam_search/offline.py)
    (
        ("vllm/entrypoints/pooling/offline.py",),
        frozenset({"encode", "embed", "classify", "score", "reward"}),
        "runtime",
    ),
    (("vllm/entrypoints/generate/beam_search/offline.py",), frozenset({"beam_search"}), "runtime"),
    (("vllm/v1/spec_decode/",), frozenset({"propose"}), "runtime"),
    # vllm-ascend's model runner prepares a scheduled step's requests here (execute_model); its dummy runs do not
    (("vllm_ascend/worker/model_runner",), frozenset({"_process_reqs"}), "runtime"),
    # vllm-omni's diffusion engine warms its model up with one dummy request while it is built (DiffusionEngine.__init__
    # -> _dummy_run, "dummy run to warm up the model"; vllm_omni/diffusion/diffusion_engine.py)
    (("vllm_omni/diffusion/",), frozenset({"_dummy_run"}), "warmup"),
    # compiled code and captured graphs run, at every stage, serving included, by these functions of COMPILE_PATHS'
    # and CAPTURE_PATHS' files: vLLM's compiled_graph / compiled_graph_wrapper closures, inductor's
    # CompiledFxGraph.__call__ (torch 2.5; dynamo's ConvertFrame.__call__ compiles: not it), aot_autograd's forward
    # closure, and CUDAGraph.replay, which vLLM calls on every step that runs a captured graph
    (("vllm/compilation/compiler_interface.py",), frozenset({"compiled_graph", "compiled_graph_wrapper"}), None),
    (("torch/_inductor/codecache.py",), frozenset({"__call__"}), None),
    (("torch/_functorch/aot_autograd.py",), frozenset({"forward"}), None),
    (("torch/cuda/graphs.py",), frozenset({"replay"}), None),
    # the decode wrapper vLLM builds (use_tensor_cores=True, vllm/v1/attention/backends/flashinfer.py) runs the prefill
    # module's `paged_run`, defined in flashinfer/prefill.py: that function says no step (its caller's file does)
    (("flashinfer/prefill.py",), frozenset({"paged_run"}), None),
    # `initialize_cache` under vllm/compilation/ (compiler_interface.py, backends.py, vLLM 0.9 on) sets up
    # torch.compile's artifact cache while compiling, not the KV cache
    (("vllm/compilation/",), frozenset({"initialize_cache"}), "compile"),
    # objects built per request under the engine's folder (V1's detokenizers, RequestState, ParentRequest, logprobs
    # processors): not the engine being built
    (
        (
            "vllm/v1/engine/detokenizer.py",
            "vllm/v1/engine/output_processor.py",
            "vllm/v1/engine/parallel_sampling.py",
            "vllm/v1/engine/logprobs.py",
        ),
        frozenset({"__init__"}),
        None,
    ),
    # what the API server runs of the serving classes while it starts (init_app_state builds them and loads
    # --lora-modules through OpenAIServingModels.init_static_loras; vllm/entrypoints/openai/api_server.py)
    (("vllm/entrypoints/openai/",), frozenset({"__init__", "init_static_loras"}), None),
)
# vLLM's warm-up modules (vllm/model_executor/warmup/: kernel_warmup.py, deep_gemm_warmup.py; model runner v2's
# vllm/v1/worker/gpu/warmup.py and the CPU runner's, from vLLM 0.20), run from compile_or_warm_up_model after the KV
# cache exists, whatever their helpers are called (their synthetic steps run prefill and decode paths).
WARMUP_PATHS = ("vllm/model_executor/warmup/", "vllm/v1/worker/gpu/warmup.py", "vllm/v1/worker/cpu/warmup.py")
# V1's sampler. At startup it runs only inside `_dummy_sampler_run` (memory profiling, then the warm-up), so its frames
# with nothing saying serving place a failure there; while serving they run for every step (the readiness decides).
V1_SAMPLER_PATHS = ("vllm/v1/sample/",)
# torch.nn.Module moving its parameters onto the device (`model.to(device)`): with nothing allocated yet, the weights.
MODULE_MOVE = ("torch/nn/modules/module.py", frozenset({"to", "_apply", "convert", "cuda", "xpu"}))
# V0's CUDAGraphRunner.capture (vllm/worker/model_runner.py) has a name too common to read anywhere else.
V0_CAPTURE = ("capture", "vllm/worker/")
# The source line a traceback prints under a frame: `with torch.cuda.graph(...)` is a capture under way (vLLM's
# compilation/cuda_graph.py, compilation/backends.py and V0's model_runner.py capture inside it), also when the
# failure hits in the model code run inside the `with`, below any torch/cuda/graphs.py frame.
CAPTURE_CODE = re.compile(r"\btorch\.cuda\.graph\(|\bwith graph_capture\(")
# A source line that sends a method to every worker by name (V1 executors' `self.collective_rpc("load_model")`,
# V0's `self._run_workers("determine_num_available_blocks")`): the step under way, when the excerpt holds no frame
# of the worker that ran it.
# The call a source line makes (`engine_core.run_busy_loop()`, `self.model_runner.capture_model()`): the frame the
# excerpt may have cut off below it.
CODE_CALL = re.compile(r"\b(?P<func>[A-Za-z_]\w{3,60})\(")
# A user's script calling the offline engine (`outputs = llm.generate(prompts, sampling_params)`, as vLLM's docs and
# examples name it; vllm/entrypoints/llm.py): those calls run requests on a built engine. `model.generate(` is
# transformers', not read.
OFFLINE_CALL = re.compile(r"\b\w*(?:llm|LLM)\w*\.(?:generate|chat|encode|embed|classify|score|beam_search)\(")
RPC_CODE = re.compile(r"\b(?:collective_rpc|_run_workers)\(\s*[\"'](?P<method>\w{1,80})[\"']")
# The server's own entry point (`vllm serve`'s console script, `python -m vllm.entrypoints.openai.api_server`) in a
# traceback: the failure left the server's main, which a startup does (once serving, an engine's death ends uvicorn's
# loop through the shutdown handlers of vllm/entrypoints/launcher.py, and main returns, up to the latest releases).
# Weak: it places only a failure nothing else placed, never over the engine's own words (newer launchers re-raise
# EngineDeadError out of main; several API servers raise "Process ... died" from wait_for_completion_or_failure).
SERVER_ENTRY_POINTS = ("/bin/vllm", "vllm/entrypoints/openai/api_server.py", "vllm/entrypoints/api_server.py")
# torch_npu's error names the function it failed in, as a frame would (`capture_begin:build/CMakeFiles/torch_npu.dir/
# compiler_depend.ts:178 NPU function error: c10_npu::acl::AclmdlRICaptureBegin(...), error code is 207005`).
NPU_FUNCTION_ERROR = re.compile(r"(?:^|\s)(?P<func>[A-Za-z_]\w{2,60})(?:\(\))?:build/\S{1,200}:\d+ NPU function error:")
# FlashInfer's wrappers live in files of their own per step (but see `paged_run` in PATH_FUNCS).
STEP_PATHS = (("flashinfer/decode.py", "decode"), ("flashinfer/prefill.py", "prefill"))
# Model classes are built inside a `torch.device` context: its frames during loading mean construction.
CONSTRUCTION_PATHS = ("torch/utils/_device.py",)
MODEL_PATHS = ("vllm/model_executor/models/", "vllm/model_executor/layers/")
# Engine classes a source line constructs (`engine_core = EngineCoreProc(*args, **kwargs)` in V1's run_engine_core,
# vllm/v1/engine/core.py): the engine being built, when the excerpt cuts the `__init__` frame below it.
ENGINE_CONSTRUCTORS = frozenset(
    {"EngineCoreProc", "DPEngineCoreProc", "EngineCore", "EngineCoreActor", "DPEngineCoreActor", "MQLLMEngine"}
)
# Whose `__init__` builds the engine, its executor or its workers: startup (but see the per-request objects in
# PATH_FUNCS).
ENGINE_PATHS = (
    "vllm/engine/",
    "vllm/v1/engine/",
    "vllm/executor/",
    "vllm/v1/executor/",
    "vllm/worker/",
    "vllm/v1/worker/",
    "vllm/entrypoints/llm.py",
)
SERVING_PATHS = (
    "vllm/entrypoints/openai/serving_",
    "vllm/entrypoints/openai/chat_completion/",
    "vllm/entrypoints/openai/completion/",
)

# -- the step that was running when a runtime failure hit ------------------------------------------------
SCHEDULER_DUMP = re.compile(r"^(?:Dumping scheduler output for model execution: ?)?SchedulerOutput\(")
NEW_REQUEST = "NewRequestData("
# The body may be cut by the paste (no closing brace): then only a count above the limit decides.
SCHEDULED_TOKENS = re.compile(r"num_scheduled_tokens=\{(?P<body>[^}]{0,20000})(?P<end>\})?")
# V0 dumped the failing step's model input instead (dump_input.py dump_engine_exception_v0: "Dumping model input for
# execution:", then `ModelInputForGPUWithSamplingMetadata(...)`); its attention metadata counts the step's prefills
# and decode tokens (vllm/attention/backends/abstract.py AttentionMetadata: num_prefills, num_decode_tokens).
MODEL_INPUT_DUMP = re.compile(r"^ModelInputFor\w{0,60}\(")
V0_NUM_PREFILLS = re.compile(r"\bnum_prefills=(\d+)")
V0_NUM_DECODE_TOKENS = re.compile(r"\bnum_decode_tokens=(\d+)")
# A cached request scheduled for more tokens than this in one step is a chunked prefill, not a decode
# step (speculative decoding schedules a handful of tokens per decode step).
DECODE_MAX_TOKENS = 16

# -- facts the log states -----------------------------------------------------------------------------
NUM = r"(-?[\d][\d,]*(?:\.\d+)?)"
VERSION = re.compile(r"vLLM API server version (\S+)|LLM engine \(v([^)\s]+)\)")
ENGINE_CONFIG = re.compile(r"LLM engine \(v[^)]*\) with config: (?P<cfg>.*)")
CONFIG_FIELDS = {
    "model": re.compile(r"(?:^|[ ,])model='?([^',]+)'?"),
    "tensor_parallel_size": re.compile(r"tensor_parallel_size=(\d+)"),
    "pipeline_parallel_size": re.compile(r"pipeline_parallel_size=(\d+)"),
    "data_parallel_size": re.compile(r"data_parallel_size=(\d+)"),
    "max_model_len": re.compile(r"max_seq_len=(\d+)"),
    "enable_prefix_caching": re.compile(r"enable_prefix_caching=(True|False)"),
    "quantization": re.compile(r"quantization=([\w.-]+)"),
    "dtype": re.compile(r"(?:^|[ ,])dtype=(?:torch\.)?([\w]+)"),
    "kv_cache_dtype": re.compile(r"kv_cache_dtype=([\w]+)"),
}
NON_DEFAULT_ARGS = re.compile(r"non-default args: \{(?P<body>.*)\}")
NAMESPACE_ARGS = re.compile(r"args: Namespace\((?P<body>.*)\)")
NAMESPACE_PAIR = re.compile(r"(?:^|, )(\w+)=('(?:[^'\\]|\\.)*'|[^,()\[\]{}]+)")
ARG_PAIR = re.compile(r"'(\w+)': ('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^,{}\[\]]+)")
ARG_FACTS = (
    "model",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "max_model_len",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_dtype",
    "quantization",
    "enforce_eager",
    "enable_chunked_prefill",
    "block_size",
    "swap_space",
    "cpu_offload_gb",
    "speculative_config",
)
START_LOAD = re.compile(r"^Starting to load model (\S+?)(?:\.\.\.)?$")
MODEL_LOADING = re.compile(r"^Model loading took " + NUM + r" ?GiB(?: memory)? and " + NUM + r" ?s")
MODEL_LOADING_V0 = re.compile(r"^Loading model weights took " + NUM + r" ?GB")
LOADING_WEIGHTS = re.compile(r"^Loading weights took " + NUM + r" ?s")
TORCH_COMPILE = re.compile(r"^torch\.compile takes " + NUM + r" ?s in total")
PROFILE_TIME = re.compile(r"^Memory profiling takes " + NUM + r" ?s")
PROFILE_SPLIT = {
    "non_kv_cache_memory_gib": re.compile(r"Total non KV cache memory: " + NUM + r" ?GiB"),
    "activation_peak_gib": re.compile(r"torch peak memory increase: " + NUM + r" ?GiB"),
    "non_torch_memory_gib": re.compile(r"non-torch forward increase memory: " + NUM + r" ?GiB"),
    "weights_memory_gib": re.compile(r"weights memory: " + NUM + r" ?GiB"),
}
# V0 and early V1 wording of the same split.
PROFILE_SPLIT_V0 = {
    "total_gpu_memory_gib": re.compile(r"total_gpu_memory \(" + NUM + r" ?GiB\)"),
    "gpu_memory_utilization": re.compile(r"gpu_memory_utilization \(" + NUM + r"\)"),
    "weights_memory_gib": re.compile(r"model weights take " + NUM + r" ?GiB"),
    "non_torch_memory_gib": re.compile(r"non_torch_memory takes " + NUM + r" ?GiB"),
    "activation_peak_gib": re.compile(r"PyTorch activation peak memory takes " + NUM + r" ?GiB"),
    "kv_cache_memory_gib": re.compile(r"reserved for KV Cache is " + NUM + r" ?GiB"),
}
KV_NEEDED = re.compile(
    r"\(?" + NUM + r" ?GiB KV cache is needed, which is larger than the available KV cache memory "
    r"\(" + NUM + r" ?GiB\)"
)
KV_ESTIMATED_LEN = re.compile(r"estimated maximum model length is (\d+)")
MAMBA_BLOCKS = re.compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)")
KV_V0_TOKENS = re.compile(r"that can be stored in KV cache \((\d+)\)")
KV_MEMORY = re.compile(r"^Available KV cache memory: " + NUM + r" ?GiB")
# What vLLM logs right after its KV-cache budget before it raises on a negative one: every worker's own budget line
# (TP/DP ranks), and since v0.20 the CUDA-graph profiling note (vllm/v1/worker/gpu_worker.py determine_available_memory)
KV_BUDGET_ECHO = re.compile(r"Available KV cache memory|Available memory: |CUDA graph memory profiling")
# vllm-ascend's NPU worker (vllm_ascend/worker/worker_v1.py, determine_available_memory) says it in bytes, floored at
# 0: "Available memory: 0, total memory: 65452113920"; vLLM then refuses to start ("No available memory for the cache
# blocks", vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory)
KV_MEMORY_BYTES = re.compile(r"^Available memory: (-?\d+), total memory: \d+$")
KV_TOKENS = re.compile(r"KV cache size: " + NUM + r" tokens")
MAX_CONCURRENCY = re.compile(r"Maximum concurrency for " + NUM + r" tokens per request: " + NUM + r"x")
GPU_BLOCKS = re.compile(r"^# (?:GPU|\w+) blocks: (\d+)")
# V0's executor logs the blocks it sized ("# cuda blocks: 0, # CPU blocks: N", executor_base.py initialize_cache) and
# the worker then raises "No available memory for the cache blocks" for zero (worker.py raise_if_cache_size_invalid).
NO_GPU_BLOCKS = re.compile(r"^# (?!CPU)\w+ blocks: 0\b")
GRAPH_CAPTURE = re.compile(r"^Graph capturing finished in " + NUM + r" secs?(?:, took " + NUM + r" GiB)?")
ENGINE_INIT = re.compile(r"^init engine \(profile, create kv cache, warmup model\) took " + NUM + r" ?s")
# What the log says of the environment (nvidia-smi's header, vLLM's collect_env, torch's OOM message).
ENV_FACTS = {
    "driver_version": re.compile(r"(?:Driver Version|[Dd]river version): *(\d[\w.-]{0,20})"),
    "cuda_version": re.compile(r"(?:CUDA Version|CUDA runtime version|CUDA used to build PyTorch): *(\d[\w.]{0,12})"),
    "rocm_version": re.compile(r"(?:ROCM used to build PyTorch|ROCm version): *(\d[\w.-]{0,20})"),
    "gpu_model": re.compile(r"\bGPU 0: ((?:NVIDIA|AMD|Intel)[\w -]{2,40}?)(?: \(UUID|$|,)"),
    "gpu_total_memory_gib": re.compile(r"GPU \d+ has a total capac(?:i)?ty of " + r"(\d{1,6}(?:\.\d{1,4})?) ?GiB"),
    "platform": re.compile(r"Automatically detected platform (\w{1,16})"),
}
FACT_HINT = re.compile(
    r"version|Version|total capac|detected platform|GPU 0: |config:|non-default args|args: Namespace"
    r"|Starting to load|took|takes|KV cache|blocks:|Maximum concurrency|Graph capturing"
    r"|total_gpu_memory|Available memory: "
)


def number(text: str) -> float:
    """vLLM prints counts with thousands separators ("1,048,576"): read them as numbers."""
    return float(text.replace(",", ""))


# One search that says whether a line can matter at all; most lines of a busy log say no.
# Gated by the literals its alternatives need (exporter/logs/prefilter.py): same answers, C-speed on quiet lines.
ANY_HINT = LiteralGate(
    re.compile(
        "|".join(h.pattern for h in (OOM_HINT, EVENT_HINT, MARKER_HINT, FACT_HINT))
        + "|SchedulerOutput\\(|NPU function error"
    )
)
