"""vLLM log lines in vLLM's own format, for the simulator: startup, stats, access lines and failures.

The shapes follow vLLM's format strings (vllm/logger.py and the modules the fixtures' headers name):
`(Process pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message`, tracebacks line by line, one per rank.
"""

from __future__ import annotations

import time

STAGES = ("weight_loading", "graph_capture", "kv_cache_alloc", "warmup", "prefill", "decode")


# The one vocabulary of vLLM log lines for the simulator, the tests and the benchmarks (formats from vLLM's
# logger and its stats logger, vllm/v1/metrics/loggers.py): build lines here rather than copying them.
FIXED_STAMP = "08-16 12:01:00"  # a fixed time for tests that compare outputs
API = "APIServer pid=1"  # the API server's process tag, as most lines of a V1 log carry it


def log_line(proc: str, level: str, src: str, msg: str, stamp: str = FIXED_STAMP) -> str:
    """One line as vLLM's logger writes it, with the process tag multiproc workers get."""
    return f"({proc}) {level} {stamp} [{src}] {msg}"


def access_line(client: str = "10.0.0.5:51234", target: str = "/v1/chat/completions", status: str = "200 OK") -> str:
    """A request as uvicorn's access log writes it under the API server's tag (uvicorn/logging.py AccessFormatter:
    `%(client_addr)s - "%(request_line)s" %(status_code)s`, the code with its phrase; `client` is host:port)."""
    return f'({API}) INFO:     {client} - "POST {target} HTTP/1.1" {status}'


ACCESS_OK = access_line()
APP_READY = f"({API}) INFO:     Application startup complete."


def stats_message(
    running: int,
    waiting: int,
    kv_usage: float,
    hit: float | None = None,
    prompt_tps: float | None = None,
    generation_tps: float | None = None,
    engine: int = 0,
) -> str:
    """An engine's periodic stats (`Engine 000: Avg prompt throughput ...`); the prefix hit rate only when given,
    as releases before prefix-cache stats wrote it."""
    prompt = running * 850.0 if prompt_tps is None else prompt_tps
    gen = running * 41.0 if generation_tps is None else generation_tps
    msg = (
        f"Engine {engine:03d}: Avg prompt throughput: {prompt:.1f} tokens/s, Avg generation throughput: {gen:.1f} "
        f"tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {kv_usage * 100:.1f}%"
    )
    return msg if hit is None else f"{msg}, Prefix cache hit rate: {hit * 100:.1f}%"


class VllmLogWriter:
    """Appends lines to a log file the way a V1 vLLM server with TP workers does."""

    def __init__(
        self,
        path: str,
        model: str = "/models/kimi-k3",
        tp: int = 8,
        max_model_len: int = 1_048_576,
        version: str = "0.27.1",
        gpu_memory_utilization: float = 0.92,
    ) -> None:
        self.path = path
        self.model = model
        self.tp = tp
        self.max_model_len = max_model_len
        self.version = version
        self.gpu_memory_utilization = gpu_memory_utilization
        self.pid = 100

    def _write(self, lines: list[str]) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:  # reopened each time: rotation-friendly, like a handler
            fh.write("".join(line + "\n" for line in lines))
            fh.flush()

    @staticmethod
    def _stamp() -> str:
        return time.strftime("%m-%d %H:%M:%S", time.localtime())

    def _line(self, proc: str, level: str, src: str, msg: str) -> str:
        return log_line(proc, level, src, msg, self._stamp())

    def api(self, msg: str, level: str = "INFO", src: str = "api_server.py:1839") -> str:
        return self._line(API, level, src, msg)

    def engine(self, msg: str, level: str = "INFO", src: str = "core.py:77") -> str:
        return self._line(f"EngineCore_DP0 pid={self.pid}", level, src, msg)

    def worker(self, msg: str, rank: int = 0, level: str = "INFO", src: str = "gpu_model_runner.py:2602") -> str:
        return self._line(f"Worker_TP{rank} pid={self.pid + 10 + rank}", level, src, msg)

    def start(self) -> None:
        self.pid += 100
        self._write(
            [
                self.api(f"vLLM API server version {self.version}"),
                self.api(
                    f"non-default args: {{'model': '{self.model}', 'max_model_len': {self.max_model_len}, "
                    f"'tensor_parallel_size': {self.tp}, 'gpu_memory_utilization': {self.gpu_memory_utilization:g}, "
                    f"'enable_prefix_caching': True}}",
                    src="utils.py:328",
                ),
                self.engine(
                    f"Initializing a V1 LLM engine (v{self.version}) with config: model='{self.model}', "
                    f"dtype=torch.bfloat16, max_seq_len={self.max_model_len}, tensor_parallel_size={self.tp}, "
                    f"pipeline_parallel_size=1, data_parallel_size=1, quantization=fp8, enforce_eager=False, "
                    f"enable_prefix_caching=True"
                ),
                self.worker(f"Starting to load model {self.model}..."),
                "Loading safetensors checkpoint shards:   0% Completed | 0/96 [00:00<?, ?it/s]",
            ]
        )

    def weights_loaded(self) -> None:
        self._write(
            [
                "Loading safetensors checkpoint shards: 100% Completed | 96/96 [06:21<00:00,  3.97s/it]",
                self.worker("Loading weights took 381.40 seconds", src="default_loader.py:267"),
                self.worker(
                    "Model loading took 178.4316 GiB memory and 387.921540 seconds", src="gpu_model_runner.py:2653"
                ),
                self.worker(
                    "Using cache directory: /root/.cache/vllm/torch_compile_cache/7c1e2f3a9b/rank_0_0/backbone for "
                    "vLLM's torch.compile",
                    src="backends.py:548",
                ),
                self.worker("torch.compile takes 27.46 s in total", src="monitor.py:34"),
            ]
        )

    def kv_cache_sized(self, tokens: int = 2_715_392) -> None:
        self._write(
            [
                self.worker(
                    "Memory profiling takes 33.12 seconds. Total non KV cache memory: 191.22GiB; torch peak memory "
                    "increase: 9.87GiB; non-torch forward increase memory: 2.91GiB; weights memory: 178.43GiB.",
                    src="gpu_worker.py:276",
                ),
                self.worker("Available KV cache memory: 64.82 GiB", src="gpu_worker.py:298"),
                self.engine(f"GPU KV cache size: {tokens:,} tokens", src="kv_cache_utils.py:1087"),
                self.engine(
                    f"Maximum concurrency for {self.max_model_len:,} tokens per request: "
                    f"{tokens / self.max_model_len:.2f}x",
                    src="kv_cache_utils.py:1091",
                ),
                "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  52%|#####     | 35/67 [00:05<00:04,  7.1it/s]",
            ]
        )

    def ready(self) -> None:
        self._write(
            [
                self.worker("Graph capturing finished in 14 secs, took 2.31 GiB", src="gpu_model_runner.py:3480"),
                self.engine(
                    "init engine (profile, create kv cache, warmup model) took 71.64 seconds", src="core.py:210"
                ),
                self.api("Starting vLLM API server 0 on http://0.0.0.0:8000", src="api_server.py:1912"),
                APP_READY,
            ]
        )

    def healthy_startup(self) -> None:
        """A whole start that ends ready, as one call."""
        self.start()
        self.weights_loaded()
        self.kv_cache_sized()
        self.ready()

    def stats(self, running: int, waiting: int, kv_usage: float, hit: float) -> None:
        """A stats line and an access line (a stress mix: vLLM itself writes stats every 10 s, see `engine_stats`)."""
        self._write(
            [
                self.api(stats_message(running, waiting, kv_usage, hit), src="loggers.py:123"),
                ACCESS_OK,
            ]
        )

    def engine_stats(self, engines: int, running: int, waiting: int, kv_usage: float, hit: float) -> None:
        """One stats line per DP engine, as the API server's stat logger writes them every
        VLLM_LOG_STATS_INTERVAL (10 s by default, vllm/envs.py)."""
        self._write(
            [
                self.api(stats_message(running, waiting, kv_usage, hit, engine=e), src="loggers.py:123")
                for e in range(engines)
            ]
        )

    def answered(self, requests: int) -> None:
        """Uvicorn's access line for each answered request: most of what a busy server's log holds."""
        self._write([ACCESS_OK] * requests)

    def oom(self, stage: str) -> None:
        """The lines a real failure at this stage prints: frames naming the step, one traceback per rank."""
        frames = {
            "weight_loading": [
                ("vllm/model_executor/model_loader/base_loader.py", 55, "load_model"),
                ("vllm/model_executor/models/kimi_linear.py", 512, "load_weights"),
            ],
            "graph_capture": [
                ("vllm/v1/worker/gpu_worker.py", 368, "compile_or_warm_up_model"),
                ("vllm/v1/worker/gpu_model_runner.py", 3411, "capture_model"),
            ],
            "kv_cache_alloc": [
                ("vllm/v1/engine/core.py", 215, "_initialize_kv_caches"),
                ("vllm/v1/worker/gpu_model_runner.py", 4120, "_allocate_kv_cache_tensors"),
            ],
            "warmup": [
                ("vllm/v1/worker/gpu_worker.py", 330, "compile_or_warm_up_model"),
                ("vllm/v1/worker/gpu_model_runner.py", 2412, "_dummy_sampler_run"),
            ],
            "prefill": [
                ("vllm/v1/engine/core.py", 360, "step"),
                ("vllm/v1/worker/gpu_model_runner.py", 2211, "execute_model"),
            ],
            "decode": [
                ("vllm/v1/engine/core.py", 360, "step"),
                ("vllm/v1/worker/gpu_model_runner.py", 2211, "execute_model"),
            ],
        }[stage]
        lines: list[str] = []
        if stage in ("prefill", "decode"):
            new = (
                "[NewRequestData(req_id=chatcmpl-sim-1,prompt_token_ids_len=180224,mm_features=[])]"
                if stage == "prefill"
                else "[]"
            )
            sched = "{chatcmpl-sim-1: 16384}" if stage == "prefill" else "{chatcmpl-sim-2: 1, chatcmpl-sim-3: 1}"
            lines.append(
                self.engine(
                    f"Dumping scheduler output for model execution: SchedulerOutput("
                    f"scheduled_new_reqs={new}, num_scheduled_tokens={sched}, "
                    f"total_num_scheduled_tokens=16385)",
                    "ERROR",
                    "dump_input.py:79",
                )
            )
            lines.append(self.engine("EngineCore encountered a fatal error.", "ERROR", "core.py:916"))
            lines.append(self.engine("Traceback (most recent call last):", "ERROR", "core.py:916"))
            for path, no, func in frames:
                lines.append(
                    self.engine(
                        f'  File "/usr/local/lib/python3.12/dist-packages/{path}", line {no}, in {func}',
                        "ERROR",
                        "core.py:916",
                    )
                )
            lines.append(
                self.engine(
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.03 GiB. GPU 3 has a "
                    "total capacity of 279.28 GiB of which 5.12 GiB is free.",
                    "ERROR",
                    "core.py:916",
                )
            )
            lines.append(
                self.api(
                    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
                    "stack trace (above) for the root cause.",
                    "ERROR",
                    "async_llm.py:485",
                )
            )
        else:
            for rank in range(min(self.tp, 2)):
                lines.append(self.worker("WorkerProc failed to start.", rank, "ERROR", "multiproc_executor.py:743"))
                lines.append(
                    self.worker("Traceback (most recent call last):", rank, "ERROR", "multiproc_executor.py:743")
                )
                for path, no, func in frames:
                    lines.append(
                        self.worker(
                            f'  File "/usr/local/lib/python3.12/dist-packages/{path}", line {no}, in {func}',
                            rank,
                            "ERROR",
                            "multiproc_executor.py:743",
                        )
                    )
                lines.append(
                    self.worker(
                        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU "
                        f"{rank} has a total capacity of 279.28 GiB of which 1.10 GiB is free.",
                        rank,
                        "ERROR",
                        "multiproc_executor.py:743",
                    )
                )
            lines.append(self.engine("EngineCore failed to start.", "ERROR", "core.py:843"))
            lines.append(
                "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
                "Failed core proc(s): {}"
            )
        self._write(lines)
