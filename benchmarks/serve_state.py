"""Serve a fixed 16-server, 8-GPU state on a port (no scraping), for wrk to load /metrics."""

from __future__ import annotations

import os
import sys
import tempfile

from aiohttp import web

from exporter.config import parse_config
from exporter.daemon import Daemon
from exporter.exposition import parse
from exporter.gpu.fake import FakeGpuBackend
from exporter.gpu.sampler import GpuSampler
from exporter.server import build_app
from exporter.simulate.logs import VllmLogWriter
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics
from exporter.vllm.names import normalize
from exporter.vllm.scrape import ScrapeResult


def build(servers: int = 16) -> Daemon:
    d = tempfile.mkdtemp()
    logs = []
    for i in range(servers):
        path = os.path.join(d, f"vllm-{i}.log")
        w = VllmLogWriter(path)
        w.healthy_startup()
        logs.append(path)
    cfg = parse_config({"servers": [{"name": f"vllm-{i}", "log": logs[i]} for i in range(servers)],
                        "state_dir": os.path.join(d, "state"), "gpu": {"backend": "none"}}, "bench")
    daemon = Daemon(cfg)
    for i, st in enumerate(daemon.servers.values()):
        m = VllmMetrics(engines=2, model_name=f"model-{i % 4}")
        for e in range(2):
            m.set_load(e, EngineLoad(running=12, waiting=1, kv_usage=0.6))
            m.serve_requests(e, 50, prompt_tokens=8000, cached_tokens=3000, output_tokens=300)
        series = normalize(parse(m.render().decode()).samples)
        st.update(ScrapeResult(True, series=series, size_bytes=1), 0.0)
        st.update(ScrapeResult(True, series=series, size_bytes=1), 10.0)
        st.tailer.poll()
    daemon.gpu = GpuSampler(FakeGpuBackend(8), 0.1)
    daemon.gpu.start()
    return daemon


if __name__ == "__main__":
    daemon = build()
    web.run_app(build_app(daemon, daemon.registry, background=False), host="127.0.0.1", port=int(sys.argv[1]),
                print=None, access_log=None)
