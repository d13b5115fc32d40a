"""The daemon end to end on loopback: real HTTP stand-ins of vLLM, the fake GPUs, real log files."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import parse_config
from exporter.daemon import Daemon
from exporter.exposition_parser import parse
from exporter.gpu.fake import FakeGpuBackend
from exporter.gpu.sampler import GpuSampler
from exporter.logs.stages import UNDECIDED_STAGE
from exporter.server import build_app
from exporter.simulate.logs import API, log_line
from exporter.simulate.server import VllmStandIn, start
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics

ENGINE = "EngineCore_DP0 pid=212"
OOM = log_line(
    "EngineCore_DP0 pid=2",
    "ERROR",
    "core.py:916",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.03 GiB. GPU 3 has a total capacity of "
    "279.28 GiB of which 5.12 GiB is free.",
    "11-20 10:10:07",
)
STARTUP = [
    log_line(API, "INFO", "api_server.py:1839", "vLLM API server version 0.27.1", "11-20 10:02:00"),
    log_line(
        "Worker_TP0 pid=340", "INFO", "gpu_worker.py:298", "Available KV cache memory: 64.82 GiB", "11-20 10:09:20"
    ),
    log_line(ENGINE, "INFO", "kv_cache_utils.py:1087", "GPU KV cache size: 2,715,392 tokens", "11-20 10:09:21"),
    log_line(
        ENGINE,
        "INFO",
        "kv_cache_utils.py:1091",
        "Maximum concurrency for 1,048,576 tokens per request: 2.59x",
        "11-20 10:09:21",
    ),
    log_line(API, "INFO", "api_server.py:1912", "Starting vLLM API server 0 on http://0.0.0.0:8000", "11-20 10:09:40"),
]


def values(text: str, name: str, **match) -> list[float]:
    out = []
    for s in parse(text).samples:
        if s.name == name and all(s.label(k) == v for k, v in match.items()):
            out.append(s.value)
    return out


class Rig:
    """Two vLLM stand-ins (8 DP engines with new names; 1 engine with pre-0.10 names), 8 fake GPUs, logs."""

    def __init__(self, tmp_path) -> None:
        self.tmp = tmp_path
        self.big = VllmMetrics(engines=8, model_name="kimi-k3")
        self.old = VllmMetrics(
            engines=1,
            old_names=True,
            model_name="llama",
            kv_cache_size_tokens=None,
            num_gpu_blocks=28124,
            block_size=16,
            enable_prefix_caching=False,
        )
        self.standins = [VllmStandIn(self.big), VllmStandIn(self.old)]
        self.log = tmp_path / "prefill-0.log"
        self.log.write_text("\n".join(STARTUP) + "\n")
        self.gpus = FakeGpuBackend(count=8, total_bytes=288 * 1024**3)

    async def __aenter__(self):
        self.runners = []
        ports = []
        for s in self.standins:
            runner, port = await start(s.app())
            self.runners.append(runner)
            ports.append(port)
        cfg = parse_config(
            {
                "state_dir": str(self.tmp / "state"),
                "servers": [
                    {
                        "name": "prefill-0",
                        "url": f"http://127.0.0.1:{ports[0]}/metrics",
                        "interval": 0.3,
                        "timeout": 0.3,
                        "log": str(self.log),
                    },
                    {
                        "name": "legacy",
                        "url": f"http://127.0.0.1:{ports[1]}/metrics",
                        "interval": 0.3,
                        "timeout": 0.3,
                        "max_response_bytes": "1MiB",
                    },
                ],
                "gpu": {"backend": "none"},
                "windows": {"prefix_cache_hit_ratio": "60s"},
            },
            "test",
        )
        self.daemon = Daemon(cfg)
        self.daemon.gpu = GpuSampler(self.gpus, 0.02)
        runner, self.port = await start(build_app(self.daemon, self.daemon.registry))
        self.runners.append(runner)
        self.session = aiohttp.ClientSession()
        await self.wait_for(lambda t: values(t, "vllm_headroom_target_up") == [1.0, 1.0])
        return self

    async def __aexit__(self, *exc):
        await self.session.close()
        for r in reversed(self.runners):
            await r.cleanup()

    async def metrics(self, accept: str | None = None) -> str:
        headers = {"Accept": accept} if accept else {}
        async with self.session.get(f"http://127.0.0.1:{self.port}/metrics", headers=headers) as r:
            assert r.status == 200
            return await r.text()

    async def wait_for(self, cond, timeout: float = 5.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = await self.metrics()
            if cond(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError("condition not met; last /metrics:\n" + text[-3000:])
            await asyncio.sleep(0.05)


def test_two_servers_eight_gpus_end_to_end(tmp_path):
    async def main():
        async with Rig(tmp_path) as rig:
            for e in range(8):
                rig.big.set_load(e, EngineLoad(running=10, waiting=e, kv_usage=0.1 * e))
                rig.big.serve_requests(
                    e, 10, prompt_tokens=10_000, cached_tokens=2_500 * (e % 2 + 1), output_tokens=100
                )
            rig.old.set_load(0, EngineLoad(running=3, waiting=0, kv_usage=0.75))
            rig.old.serve_requests(0, 4, prompt_tokens=1000, cached_tokens=900, output_tokens=10)
            rig.gpus.set_used(5, 200 * 1024**3)
            text = await rig.wait_for(
                lambda t: (
                    values(t, "vllm_headroom_prefix_cache_hit_ratio", server="legacy")
                    and values(t, "vllm_headroom_prefix_cache_hit_ratio", server="prefill-0")
                )
            )
            # the whole answer is valid exposition for Prometheus's own parser
            assert list(text_string_to_metric_families(text))
            kv = {
                s.label("engine"): s.value
                for s in parse(text).samples
                if s.name == "vllm_headroom_kv_cache_usage_ratio" and s.label("server") == "prefill-0"
            }
            assert kv == {str(e): 0.1 * e for e in range(8)}
            assert values(text, "vllm_headroom_kv_cache_headroom_ratio", server="legacy") == [0.25]
            # hits/queries summed over engines: (4 x 2500 + 4 x 5000) x 10 / (8 x 10000 x 10)
            assert values(text, "vllm_headroom_prefix_cache_hit_ratio", server="prefill-0") == [0.375]
            assert values(text, "vllm_headroom_prefix_cache_hit_ratio", server="legacy") == [0.9]
            assert values(text, "vllm_headroom_kv_cache_capacity_tokens", server="prefill-0") == [2715392]
            assert values(text, "vllm_headroom_kv_cache_capacity_tokens", server="legacy") == [28124 * 16]
            assert values(text, "vllm_headroom_kv_cache_capacity_mismatch", server="prefill-0") == [0]
            assert values(text, "vllm_headroom_max_concurrency", server="prefill-0") == [2.59]
            assert values(text, "vllm_headroom_prefix_cache_enabled", server="legacy") == [0]
            assert values(text, "vllm_headroom_engine_ready", server="prefill-0") == [1]
            assert values(text, "vllm_headroom_engine_stage", server="legacy", stage="ready") == [1]
            assert len(values(text, "vllm_headroom_requests_waiting", server="prefill-0")) == 8
            assert values(text, "vllm_headroom_requests_running", server="legacy") == [3]
            assert values(text, "vllm_headroom_prefix_cache_hits_tokens_total", server="legacy") == [3600]
            assert values(text, "vllm_headroom_time_to_first_token_seconds_count", server="legacy") == [4]
            assert len(values(text, "vllm_headroom_gpu_memory_total_bytes")) == 8
            assert values(text, "vllm_headroom_gpu_memory_used_bytes", gpu="5") == [200 * 1024**3]
            assert values(text, "vllm_headroom_vllm_info", server="prefill-0", version="0.27.1") == [1]
            assert values(text, "vllm_headroom_log_lines_cut_total", server="prefill-0") == [0]
            assert values(text, "vllm_headroom_startup_memory_bytes", server="prefill-0", part="kv_cache") == [
                64.82 * 1024**3
            ]
            checks = {
                s.label("check"): s.value for s in parse(text).samples if s.name == "vllm_headroom_environment_check"
            }
            assert checks["driver_min_version"] == 1
            assert checks["cuda_driver_major"] == 1 and checks["gpu_count"] == 1 and checks["vllm_min_version"] == 1
            assert checks["gpu_model_supported"] == 1
            (tmp_path / "metrics.txt").write_text(text)  # kept for the closing note

    asyncio.run(main())


def test_oom_line_reaches_the_counter_within_a_second(tmp_path):
    async def main():
        async with Rig(tmp_path) as rig:
            await rig.wait_for(lambda t: values(t, "vllm_headroom_engine_ready", server="prefill-0") == [1])
            with open(rig.log, "a") as f:
                dump = (
                    "Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=["
                    "NewRequestData(req_id=a,prompt_token_ids_len=180224)], num_scheduled_tokens={a: 16384})"
                )
                f.write(log_line(ENGINE, "ERROR", "dump_input.py:79", dump, "11-20 10:10:07") + "\n" + OOM + "\n")
            start_t = time.monotonic()
            await rig.wait_for(
                lambda t: (
                    values(t, "vllm_headroom_oom_events_total", server="prefill-0", stage="prefill", phase="runtime")
                    == [1]
                ),
                timeout=1.0,
            )
            assert time.monotonic() - start_t < 1.0
            text = await rig.metrics()
            assert sum(values(text, "vllm_headroom_oom_events_total", server="prefill-0")) == 1

    asyncio.run(main())


def test_a_spike_between_scrapes_shows_in_the_peak(tmp_path):
    async def main():
        async with Rig(tmp_path) as rig:
            await rig.metrics()  # start a fresh peak window
            rig.gpus.set_used(2, 280 * 1024**3)
            await asyncio.sleep(0.15)
            rig.gpus.set_used(2, 100 * 1024**3)
            await asyncio.sleep(0.15)
            text = await rig.metrics()
            assert values(text, "vllm_headroom_gpu_memory_peak_used_bytes", gpu="2") == [280 * 1024**3]
            assert values(text, "vllm_headroom_gpu_memory_used_bytes", gpu="2") == [100 * 1024**3]
            head = values(text, "vllm_headroom_gpu_memory_headroom_ratio", gpu="2")[0]
            assert abs(head - 8 / 288) < 1e-9

    asyncio.run(main())


def test_broken_targets_are_reported_and_the_rest_keeps_flowing(tmp_path):
    async def main():
        async with Rig(tmp_path) as rig:
            for fault, reason in (
                ("http_500", "http_status"),
                ("slow", "timeout"),
                ("hang_mid_body", "timeout"),
                ("huge", "too_large"),
                ("html", "unparsable"),
                ("garbage", "unparsable"),
            ):
                rig.standins[1].fault = fault
                text = await rig.wait_for(
                    lambda t, reason=reason: (
                        values(t, "vllm_headroom_target_up", server="legacy") == [0]
                        and values(t, "vllm_headroom_scrape_errors_total", server="legacy", reason=reason)[0] > 0
                    )
                )
                assert values(text, "vllm_headroom_target_up", server="prefill-0") == [1], fault
                assert not values(text, "vllm_headroom_kv_cache_usage_ratio", server="legacy"), fault
                rig.standins[1].fault = "ok"
                await rig.wait_for(lambda t: values(t, "vllm_headroom_target_up", server="legacy") == [1])

    asyncio.run(main())


def test_http_endpoints_and_openmetrics(tmp_path):
    async def main():
        async with Rig(tmp_path) as rig:
            base = f"http://127.0.0.1:{rig.port}"
            async with rig.session.get(base + "/healthz") as r:
                assert r.status == 200
            # ready once every server was scraped and every log read once (the log is read on its own thread)
            deadline = time.monotonic() + 60
            while True:
                async with rig.session.get(base + "/readyz") as r:
                    if r.status == 200:
                        break
                    assert r.status == 503 and time.monotonic() < deadline, r.status
                await asyncio.sleep(0.05)
            async with rig.session.get(base + "/") as r:
                page = await r.text()
                assert "prefill-0" in page and "/metrics" in page
            async with rig.session.get(
                base + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
            ) as r:
                assert r.headers["Content-Type"].startswith("application/openmetrics-text")
                body = await r.text()
                assert body.rstrip().endswith("# EOF")
                assert values(body, "vllm_headroom_target_up", server="prefill-0") == [1]

    asyncio.run(main())


def test_engine_ready_drops_when_the_server_stops_answering(tmp_path):
    async def main():
        async with Rig(tmp_path) as rig:
            await rig.wait_for(lambda t: values(t, "vllm_headroom_engine_ready", server="prefill-0") == [1])
            rig.standins[0].fault = "http_500"  # killed without a word in its log (the kernel's OOM killer)
            text = await rig.wait_for(lambda t: values(t, "vllm_headroom_engine_ready", server="prefill-0") == [0])
            assert values(text, "vllm_headroom_engine_stage", server="prefill-0", stage="ready") == [1]
            assert values(text, "vllm_headroom_target_up", server="prefill-0") == [0]

    asyncio.run(main())


def test_fast_text_writer_matches_prometheus_client_byte_for_byte(tmp_path):
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

    from exporter.exposition_writer import text_format

    r = CollectorRegistry()
    Gauge("g", "doc with \\ and\nnewline", ["a"], registry=r).labels('v "q" \\ \n').set(float("nan"))
    Counter("c", "c", ["b"], registry=r).labels("x").inc(1e21)
    Histogram("h", "h", registry=r).observe(0.3)
    Info("i", "i", registry=r).info({"k": "v"})
    assert text_format(r) == generate_latest(r)

    async def main():
        async with Rig(tmp_path) as rig:
            rig.big.serve_requests(3, 10, prompt_tokens=100, cached_tokens=50, output_tokens=5)
            await rig.metrics()
            # the daemon's whole registry, collected twice in a row: same bytes from both writers
            a = text_format(rig.daemon.registry).decode()
            b = generate_latest(rig.daemon.registry).decode()

            def strip(text: str) -> list[str]:
                return [
                    line
                    for line in text.splitlines()
                    if "collect_duration" not in line
                    and not line.startswith(
                        (
                            "process_",
                            "vllm_headroom_gpu_memory_peak",
                            "vllm_headroom_gpu_memory_headroom",
                            "vllm_headroom_gpu_memory_used",
                            "vllm_headroom_scrape_duration",
                            "vllm_headroom_last_scrape",
                            "python_gc",
                        )
                    )
                ]

            assert strip(a) == strip(b)

    asyncio.run(main())


def test_a_scrape_that_finds_the_server_serving_places_a_bare_failure_at_runtime(tmp_path):
    """A log rotated past its readiness line, with stats and access logs turned off, says nothing of serving; the
    scrape does (vLLM answers /metrics only once the engine is built). The same bare failure line with nothing
    else to go on is a startup failure (tests/test_tailer.py)."""

    async def main():
        rig = Rig(tmp_path)
        rig.log.write_text(
            "(APIServer pid=1) WARNING 11-20 10:09:50 [protocol.py:93] The following fields were present\n"
        )
        async with rig:
            await rig.wait_for(
                lambda t: values(t, "vllm_headroom_engine_stage", server="prefill-0", stage="ready") == [1]
            )
            with open(rig.log, "a") as f:
                f.write(OOM + "\n")
            text = await rig.wait_for(
                lambda t: sum(values(t, "vllm_headroom_oom_events_total", server="prefill-0")) == 1, timeout=30
            )
            assert values(text, "vllm_headroom_oom_events_total", server="prefill-0", stage="runtime_unknown") == [1]

    asyncio.run(main())


def test_a_scraped_servers_log_takes_startup_as_the_prior_a_log_alone_the_pastes_one(tmp_path):
    """A scraped server's analyzer hears when it serves (note_serving), so a failure nothing places in a run no scrape
    found serving is a startup's; a log with no scrape keeps triage's prior."""
    log = tmp_path / "v.log"
    log.write_text("")
    cfg = parse_config(
        {
            "servers": [
                {"name": "scraped", "url": "http://127.0.0.1:9/metrics", "log": str(log)},
                {"name": "alone", "url": None, "log": str(log)},
            ],
            "gpu": {"backend": "none"},
        },
        "test",
    )
    daemon = Daemon(cfg)
    priors = {name: s.tailer.analyzer.undecided_stage for name, s in daemon.servers.items() if s.tailer}
    assert priors == {"scraped": "loading_unknown", "alone": UNDECIDED_STAGE}
