"""`vllm-headroom demo`: simulated vLLM servers and the daemon on 127.0.0.1, live data in seconds."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import tempfile

from exporter.config import parse_config
from exporter.daemon import Daemon
from exporter.gpu.fake import FakeGpuBackend
from exporter.gpu.sampler import GpuSampler
from exporter.server import build_app
from exporter.simulate.scenario import SimulatedServer, load_scenario
from exporter.simulate.server import Listener

log = logging.getLogger("vllm_headroom.demo")
DEFAULT_SCENARIOS = ("healthy", "shrinking_headroom", "runtime_oom_prefill", "gpu_spike")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(scenarios: list[str], workdir: str, interval: float = 1.0,
          gpus: FakeGpuBackend | None = None) -> tuple[Daemon, list[SimulatedServer]]:
    """The daemon and its simulated servers, wired together (the demo and the end-to-end tests share this)."""
    gpus = gpus or FakeGpuBackend(count=8, total_bytes=288 * 1024**3)
    sims, servers = [], []
    for name in scenarios:
        scenario = load_scenario(name)
        port = _free_port()
        path = os.path.join(workdir, f"{scenario.name}.log")
        open(path, "a").close()
        sims.append(SimulatedServer(scenario.name.replace("_", "-"), scenario, path, port, gpus))
        servers.append({"name": scenario.name.replace("_", "-"), "url": f"http://127.0.0.1:{port}/metrics",
                        "interval": interval, "timeout": min(interval, 1.0), "log": path})
    cfg = parse_config({"listen_address": "127.0.0.1:9478", "servers": servers, "gpu": {"backend": "none"},
                        "state_dir": os.path.join(workdir, "state"), "windows": {"prefix_cache_hit_ratio": "30s"}},
                       "<demo>")
    daemon = Daemon(cfg)
    daemon.gpu = GpuSampler(gpus, 0.05)
    return daemon, sims


async def _main(port: int, scenarios: list[str], workdir: str) -> None:
    daemon, sims = build(scenarios, workdir)
    app = build_app(daemon, daemon.registry)
    listener = Listener(app, port=port)
    await listener.setup()
    await listener.open()
    tasks = [asyncio.create_task(s.run(), name=f"sim-{s.name}") for s in sims]
    base = f"http://127.0.0.1:{listener.port}"
    print(f"\nvLLM Headroom demo: {len(sims)} simulated vLLM servers, 8 fake GB300 GPUs\n")
    print(f"  exporter      {base}/metrics   (landing page {base}/)")
    for s in sims:
        print(f"  {s.name:<22} http://127.0.0.1:{s.listener.port}/metrics   log {s.log.path}")
    print(f"""
What to look at:
  curl -s {base}/metrics | grep -E 'engine_stage.*\\}} 1|kv_cache_headroom_ratio|oom_events_total.*\\}} [1-9]'
  - shrinking-headroom: KV-cache headroom falls toward 0, requests queue, preemptions climb
  - runtime-oom-prefill: a runtime OOM during prefill (oom_events_total{{stage="prefill",phase="runtime"}}), then
    a restart (engine_stage goes through weight_loading .. ready)
  - gpu-spike: gpu_memory_peak_used_bytes{{gpu="3"}} catches 150 ms spikes that used_bytes misses
  - vllm-headroom triage {os.path.join(workdir, 'runtime_oom_prefill.log')}
Ctrl-C stops everything.
""", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("stopping...", flush=True)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await listener.cleanup()


def run(port: int = 9478, scenarios: list[str] | None = None, workdir: str | None = None) -> int:
    names = list(scenarios or DEFAULT_SCENARIOS)
    for name in names:
        load_scenario(name)  # fail early, with the list of built-in scenarios
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="vllm-headroom-demo-")
    try:
        asyncio.run(_main(port, names, workdir))
    except OSError as exc:
        log.error("demo cannot listen on 127.0.0.1:%d: %s", port, exc)
        return 2
    if own:
        print(f"logs kept in {workdir}")
    return 0
