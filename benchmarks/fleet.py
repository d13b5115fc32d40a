"""A fleet of simulated vLLM servers and growing logs in one process, for the serving and overhead benchmarks.

Prints one JSON line {"ports": [...], "logs": [...]} once everything listens, then runs until killed.

Log mixes: `vllm` (the default), what a busy vLLM server writes: an access line per answered request and each DP
engine's stats line every 10 s (VLLM_LOG_STATS_INTERVAL's default); `stats`, a stress mix that makes every other
line a stats line (50 times vLLM's rate; the stage machine reads each one).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from exporter.simulate.logs import VllmLogWriter
from exporter.simulate.server import VllmStandIn, start
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics

STATS_EVERY_S = 10.0
MIXES = ("vllm", "stats")


async def main(n: int, workdir: str, lines_per_s: float, churn: bool = False, mix: str = "vllm") -> None:
    """With `churn`, DP engines come back renumbered every 20 s and logs are rotated by rename every 30 s."""
    metrics, ports, logs, writers, standins = [], [], [], [], []
    for i in range(n):
        m = VllmMetrics(engines=2, model_name=f"model-{i % 4}")
        standin = VllmStandIn(m)
        standins.append(standin)
        _, port = await start(standin.app())
        path = os.path.join(workdir, f"vllm-{i}.log")
        w = VllmLogWriter(path)
        w.healthy_startup()
        metrics.append(m)
        ports.append(port)
        logs.append(path)
        writers.append(w)
    print(json.dumps({"ports": ports, "logs": logs}), flush=True)
    tick = 0
    start_t = asyncio.get_running_loop().time()
    last_churn = last_rotate = last_stats = start_t
    while True:
        now = asyncio.get_running_loop().time()
        if churn and now - last_churn >= 20:
            last_churn = now
            for i, st in enumerate(standins):
                metrics[i] = st.metrics = VllmMetrics(
                    engines=2, model_name=f"model-{i % 4}", first_engine=(metrics[i].first_engine + 2) % 1000
                )
        if churn and now - last_rotate >= 30:
            last_rotate = now
            for path in logs:
                os.replace(path, path + ".1")
        for m, w in zip(metrics, writers, strict=True):
            for e in range(2):
                m.set_load(e, EngineLoad(running=10 + tick % 5, waiting=tick % 3, kv_usage=0.4 + 0.1 * (tick % 5)))
                m.serve_requests(e, 3, prompt_tokens=8000, cached_tokens=3000, output_tokens=300)
            if lines_per_s and mix == "stats":
                w.stats(10, 0, 0.5, 0.4)  # two lines: a stats line and an access line
            elif lines_per_s:
                w.answered(2)
        if lines_per_s and mix == "vllm" and now - last_stats >= STATS_EVERY_S:
            last_stats = now
            for w in writers:
                w.engine_stats(2, 10 + tick % 5, tick % 3, 0.4 + 0.1 * (tick % 5), 0.4)
        tick += 1
        await asyncio.sleep(2.0 / lines_per_s if lines_per_s else 1.0)


if __name__ == "__main__":
    asyncio.run(
        main(
            int(sys.argv[1]),
            sys.argv[2],
            float(sys.argv[3]) if len(sys.argv) > 3 else 2.0,
            "churn" in sys.argv[4:],
            "stats" if "stats" in sys.argv[4:] else "vllm",
        )
    )
