"""vLLM's /metrics as vLLM itself produces it: with prometheus_client, the same names, labels and buckets.

vLLM defines its metrics with prometheus_client (vllm/v1/metrics/loggers.py), so generating ours the same
way gives the real wire format for free: HELP/TYPE lines, `_total` on counters, `_created` samples,
histogram buckets with `+Inf`. `multiprocess=True` mimics DP > 1, where vLLM runs prometheus_client in
multiprocess mode: no `_created` series and no process or Python collectors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
LATENCY_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


def _token_buckets(max_len: int) -> tuple[float, ...]:
    out: list[float] = []
    mantissa, exp = (1, 2, 5), 0
    while True:
        for m in mantissa:
            v = m * 10**exp
            if v > max_len:
                return tuple(float(x) for x in out)
            out.append(v)
        exp += 1


@dataclass
class EngineLoad:
    """What one DP engine reports at a moment."""

    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0  # 0..1


@dataclass
class VllmMetrics:
    """One vLLM server's metrics; `restart()` starts every counter again from zero, as a new process does."""

    model_name: str = "kimi-k3"
    engines: int = 1
    old_names: bool = False
    multiprocess: bool | None = None  # default: True when engines > 1, as vLLM does
    max_model_len: int = 1_048_576
    num_gpu_blocks: int = 42_428
    block_size: int = 64
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = 0.92
    # vllm:num_requests_waiting_by_reason{reason="capacity"|"deferred"}: newer releases only
    waiting_by_reason: bool = False
    kv_cache_size_tokens: int | None = 2_715_392
    first_engine: int = 0  # engine label of the first DP engine (a restarted DP group may come back renumbered)
    registry: CollectorRegistry = field(init=False)

    def __post_init__(self) -> None:
        if self.multiprocess is None:
            self.multiprocess = self.engines > 1
        self.restart()

    def restart(self) -> None:
        r = self.registry = CollectorRegistry()
        if not self.multiprocess:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
            GCCollector(registry=r)
        labels = ["model_name", "engine"]
        old = self.old_names
        self.running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels, registry=r
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, registry=r
        )
        self.by_reason = (
            Gauge(
                "vllm:num_requests_waiting_by_reason",
                "Number of requests waiting, by the reason they wait.",
                labels + ["reason"],
                registry=r,
            )
            if self.waiting_by_reason
            else None
        )
        self.kv = Gauge(
            "vllm:gpu_cache_usage_perc" if old else "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            labels,
            registry=r,
        )
        self.preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels, registry=r
        )
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=r
        )
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels + ["finished_reason"],
            registry=r,
        )
        prefix = "vllm:gpu_prefix_cache_" if old else "vllm:prefix_cache_"
        self.prefix_queries = Counter(
            prefix + "queries", "Prefix cache queries, in terms of number of queried tokens.", labels, registry=r
        )
        self.prefix_hits = Counter(
            prefix + "hits", "Prefix cache hits, in terms of number of cached tokens.", labels, registry=r
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "vllm:time_per_output_token_seconds" if old else "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            labels,
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.prompt_len = Histogram(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            labels,
            buckets=_token_buckets(self.max_model_len),
            registry=r,
        )
        info = {
            "block_size": str(self.block_size),
            "cache_dtype": "auto",
            "enable_prefix_caching": str(self.enable_prefix_caching),
            "gpu_memory_utilization": f"{self.gpu_memory_utilization:g}",
            "num_gpu_blocks": str(self.num_gpu_blocks),
            "num_cpu_blocks": "None",
            "swap_space": "0",
        }
        if self.kv_cache_size_tokens is not None:
            info["kv_cache_size_tokens"] = str(self.kv_cache_size_tokens)
            info["kv_cache_max_concurrency"] = f"{self.kv_cache_size_tokens / self.max_model_len:.2f}"
        cache = Gauge(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", list(info) + ["engine"], registry=r
        )
        for e in range(self.engines):
            label = self._engine(e)
            cache.labels(**info, engine=label).set(1)
            for metric in (self.running, self.waiting, self.kv):
                metric.labels(self.model_name, label).set(0)
            for counter in (
                self.preemptions,
                self.prompt_tokens,
                self.generation_tokens,
                self.prefix_queries,
                self.prefix_hits,
            ):
                counter.labels(self.model_name, label)
            for reason in ("stop", "length", "abort", "error"):
                self.success.labels(self.model_name, label, reason)

    def _engine(self, index: int) -> str:
        return str(self.first_engine + index)

    def set_load(self, engine: int, load: EngineLoad) -> None:
        e = (self.model_name, self._engine(engine))
        self.running.labels(*e).set(load.running)
        self.waiting.labels(*e).set(load.waiting)
        self.kv.labels(*e).set(load.kv_usage)
        if self.by_reason is not None:  # a request waits for capacity when the cache has no room for it
            capacity = load.waiting if load.kv_usage >= 0.95 else 0
            self.by_reason.labels(*e, "capacity").set(capacity)
            self.by_reason.labels(*e, "deferred").set(load.waiting - capacity)

    def serve_requests(
        self,
        engine: int,
        n: int,
        prompt_tokens: int,
        cached_tokens: int,
        output_tokens: int,
        ttft_s: float = 0.2,
        queue_s: float = 0.01,
        preemptions: int = 0,
    ) -> None:
        """Account for n finished requests, as the engine's stats loggers would."""
        e = (self.model_name, self._engine(engine))
        self.prompt_tokens.labels(*e).inc(n * prompt_tokens)
        self.generation_tokens.labels(*e).inc(n * output_tokens)
        self.prefix_queries.labels(*e).inc(n * prompt_tokens)
        self.prefix_hits.labels(*e).inc(n * cached_tokens)
        self.success.labels(*e, "stop").inc(n)
        if preemptions:
            self.preemptions.labels(*e).inc(preemptions)
        for _ in range(min(n, 50)):
            self.ttft.labels(*e).observe(ttft_s)
            self.queue.labels(*e).observe(queue_s)
            self.itl.labels(*e).observe(0.02)
            self.e2e.labels(*e).observe(ttft_s + output_tokens * 0.02)
            self.prompt_len.labels(*e).observe(prompt_tokens)

    def render(self) -> bytes:
        text = generate_latest(self.registry)
        if self.multiprocess:  # multiprocess mode writes no _created samples
            text = b"\n".join(line for line in text.split(b"\n") if b"_created" not in line) + b"\n"
        return text
