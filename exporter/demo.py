"""`vllm-headroom demo`: simulated vLLM servers and the daemon on 127.0.0.1, live data in seconds."""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import shutil
import signal
import socket
import sys
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
# What to look at, per built-in scenario (the server is named after it, `_` as `-`). Others show their description.
HINTS = {
    "healthy": "the KV cache fills at peak with no queue and GPUs 0-1 sit at the 0.92 budget (vLLM by design): "
    "nothing should page",
    "healthy_high_utilization": "GPU 2 sits at its 0.97 budget all day, by design: nothing should page",
    "shrinking_headroom": "KV-cache headroom falls toward 0, requests wait for capacity, preemptions climb: pages",
    "runtime_oom_prefill": 'a runtime OOM during prefill (oom_events_total{stage="prefill",phase="runtime"}), then a '
    "restart (engine_stage goes through weight_loading .. ready)",
    "gpu_spike": 'gpu_memory_peak_used_bytes{gpu="3"} catches 150 ms spikes that used_bytes misses',
    "prefix_collapse": "prefix_cache_hit_ratio falls when repeat prompts stop hitting the cache",
    "loading_oom_weights": 'an OOM while loading weights (oom_events_total{stage="weight_loading",phase="loading"}), '
    "again after each restart; engine_ready stays 0",
    "loading_oom_kv_cache": 'the KV cache cannot be allocated (oom_events_total{stage="kv_cache_alloc"}); the engine '
    "never becomes ready",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def own_command() -> str:
    """How to run vllm-headroom again as the user typed it: the bare name only where PATH finds this one."""
    script = sys.argv[0]
    if os.path.basename(script) == "vllm-headroom":
        found = shutil.which("vllm-headroom")
        if found and os.path.realpath(found) == os.path.realpath(script):
            return "vllm-headroom"
        return shlex.quote(os.path.abspath(script))
    return f"{shlex.quote(sys.executable)} -m exporter"


def build(
    scenarios: list[str], workdir: str, interval: float = 1.0, gpus: FakeGpuBackend | None = None, port: int = 9478
) -> tuple[Daemon, list[SimulatedServer]]:
    """The daemon and its simulated servers, wired together (the demo and the end-to-end tests share this)."""
    gpus = gpus or FakeGpuBackend(count=8, total_bytes=288 * 1024**3)
    sims, servers = [], []
    for name in scenarios:
        scenario = load_scenario(name)
        sim_port = _free_port()
        path = os.path.join(workdir, f"{scenario.name}.log")
        open(path, "a").close()
        sims.append(SimulatedServer(scenario.name.replace("_", "-"), scenario, path, sim_port, gpus))
        servers.append(
            {
                "name": scenario.name.replace("_", "-"),
                "url": f"http://127.0.0.1:{sim_port}/metrics",
                "interval": interval,
                "timeout": min(interval, 1.0),
                "log": path,
            }
        )
    cfg = parse_config(
        {
            "listen_address": f"127.0.0.1:{port}",
            "servers": servers,
            "gpu": {"backend": "none"},
            "state_dir": os.path.join(workdir, "state"),
            "windows": {"prefix_cache_hit_ratio": "30s"},
        },
        "<demo>",
    )
    daemon = Daemon(cfg)
    daemon.gpu = GpuSampler(gpus, 0.05)
    return daemon, sims


async def _main(port: int, scenarios: list[str], workdir: str) -> None:
    daemon, sims = build(scenarios, workdir, port=port)
    app = build_app(daemon, daemon.registry)
    listener = Listener(app, port=port)
    await listener.setup()
    try:
        await listener.open()
    except OSError as exc:
        await listener.cleanup()
        raise CannotListen(port, exc) from None
    tasks = [asyncio.create_task(s.run(), name=f"sim-{s.name}") for s in sims]
    base = f"http://127.0.0.1:{listener.port}"
    print(f"\nvLLM Headroom demo: {len(sims)} simulated vLLM servers, 8 fake GB300 GPUs\n")
    print(f"  exporter      {base}/metrics   (landing page {base}/)")
    for s in sims:
        print(f"  {s.name:<22} http://127.0.0.1:{s.listener.port}/metrics   log {s.log.path}")
    print(hints(base, sims), flush=True)
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


def hints(base: str, sims: list[SimulatedServer]) -> str:
    """What to look at, for the scenarios of this run only, with commands that run as printed."""
    lines = [
        "",
        "What to look at:",
        f"  curl -s {base}/metrics | grep -E 'engine_stage.*\\}} 1|kv_cache_headroom_ratio|"
        "oom_events_total.*\\} [1-9]'",
    ]
    for s in sims:
        lines.append(f"  - {s.name}: {HINTS.get(s.scenario.name, s.scenario.description)}")
    command = own_command()
    for s in sims:
        if any(step.get("action") == "oom" for step in s.scenario.steps):
            lines.append(f"  - {command} triage {shlex.quote(s.log.path)}")
    lines += ["Ctrl-C stops everything.", ""]
    return "\n".join(lines)


class CannotListen(Exception):
    """The exporter's port could not be bound: said as such, and only then (not for a bad --workdir)."""

    def __init__(self, port: int, exc: OSError) -> None:
        super().__init__(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}")


def run(port: int = 9478, scenarios: list[str] | None = None, workdir: str | None = None) -> int:
    names = list(scenarios or DEFAULT_SCENARIOS)
    for name in names:
        load_scenario(name)  # fail early, with the list of built-in scenarios
    if workdir is not None and not os.path.isdir(workdir):
        print(
            f"vllm-headroom demo: --workdir {workdir}: not a directory (create it, or leave --workdir out "
            "for a new temporary one)",
            file=sys.stderr,
        )
        return 2
    if workdir is not None and not os.access(workdir, os.W_OK | os.X_OK):
        print(f"vllm-headroom demo: --workdir {workdir}: not writable", file=sys.stderr)
        return 2
    own = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="vllm-headroom-demo-")
    try:
        asyncio.run(_main(port, names, workdir))
    except CannotListen as exc:
        print(f"vllm-headroom demo: {exc} (another process has the port? try --port)", file=sys.stderr)
        return 2
    if own:
        print(f"logs kept in {workdir}")
    return 0
