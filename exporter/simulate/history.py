"""A week of history from the simulator, for the capacity review: vllm-headroom's own /metrics over
simulated servers, at past timestamps, as an OpenMetrics file that `promtool tsdb create-blocks-from
openmetrics` turns into TSDB blocks in seconds.

Each server follows a load curve (`steady` keeps its headroom; `shrinking` loses it day after day and
hits a runtime OOM during prefill on day 5, then restarts). The daemon's real collector writes the series,
so the history carries exactly what a live deployment would have.
"""

from __future__ import annotations

import math
import os
import tempfile
from typing import Callable

from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from exporter import catalog
from exporter.config import parse_config
from exporter.daemon import Daemon
from exporter.exposition_parser import parse
from exporter.gpu.fake import FakeGpuBackend
from exporter.gpu.sampler import GpuSampler
from exporter.simulate.logs import VllmLogWriter
from exporter.simulate.memory import VllmMemoryModel
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics
from exporter.vllm.names import normalize
from exporter.vllm.scrape import ScrapeResult

DAY = 86400
KEEP = (  # family names as OpenMetrics writes them: a counter without `_total`
    catalog.family_name("target_up"),
    catalog.family_name("kv_cache_headroom_ratio"),
    catalog.family_name("kv_cache_usage_ratio"),
    catalog.family_name("requests_running"),
    catalog.family_name("requests_waiting"),
    catalog.family_name("oom_events"),
    catalog.family_name("log_events"),
    catalog.family_name("prefix_cache_hits_tokens"),
    catalog.family_name("prefix_cache_queries_tokens"),
    catalog.family_name("environment_info"),
    catalog.family_name("environment_check"),
    catalog.family_name("vllm_config_info"),
    catalog.family_name("gpu_memory_headroom_ratio"),
    catalog.family_name("gpu_memory_peak_used_bytes"),
    catalog.family_name("preemptions"),
    catalog.family_name("prefix_cache_enabled"),
    catalog.family_name("requests_waiting_by_reason"),
    catalog.family_name("gpu_memory_utilization_ratio"),
    catalog.family_name("gpu_memory_total_bytes"),
    catalog.family_name("engine_ready"),
)


def curves(start: float) -> dict[str, Callable[[float], float]]:
    """KV-cache usage over time per server (0..1)."""
    return {
        "steady": lambda t: 0.45 + 0.2 * math.sin(2 * math.pi * ((t - start) % DAY) / DAY),
        "shrinking": lambda t: min(0.97, 0.55 + 0.42 * (t - start) / (7 * DAY)),
    }


def write_history(path: str, end: float, days: int = 7, step: int = 900, instance: str = "node-1:9478") -> dict:
    """Write the OpenMetrics history; returns facts the caller can check (the OOM's time, the servers)."""
    start = end - days * DAY
    work = tempfile.mkdtemp()
    usage = curves(start)
    logs, sims = {}, {}
    for name in usage:
        logs[name] = os.path.join(work, f"{name}.log")
        w = VllmLogWriter(logs[name], tp=8)
        w.healthy_startup()
        sims[name] = (VllmMetrics(engines=2, model_name="kimi-k3"), w)
    cfg = parse_config(
        {
            "servers": [{"name": n, "log": logs[n]} for n in usage],
            "state_dir": os.path.join(work, "s"),
            "gpu": {"backend": "none"},
        },
        "history",
    )
    daemon = Daemon(cfg)
    gpus = FakeGpuBackend(8)
    memory = VllmMemoryModel()
    daemon.gpu = GpuSampler(gpus, 1.0)
    oom_at = start + 5 * DAY + 3600
    oom_done = False
    families: dict[str, list[str]] = {}
    types: dict[str, str] = {}
    t = start
    while t <= end:
        for name, (m, w) in sims.items():
            u = usage[name](t)
            if name == "shrinking" and not oom_done and t >= oom_at:
                w.oom("prefill")
                w.healthy_startup()  # restarted by its supervisor
                m.restart()
                oom_done = True
            for e in range(2):
                m.set_load(e, EngineLoad(running=int(10 + 50 * u), waiting=int(u > 0.9) * 3, kv_usage=u))
                m.serve_requests(e, 20, prompt_tokens=20_000, cached_tokens=12_000, output_tokens=300)
            st = daemon.servers[name]
            st.update(ScrapeResult(True, series=normalize(parse(m.render().decode()).samples), size_bytes=1), t)
            assert st.tailer is not None  # every simulated server here has a log
            st.tailer.poll()
        for g in range(8):  # vLLM holds its budget from readiness on, whatever the KV usage
            gpus.set_used(g, int(gpus.total * memory.used("ready")))
        daemon.gpu.sample_once()
        _append(openmetrics(daemon.registry).decode(), int(t), families, types, instance)
        t += step
    with open(path, "w", encoding="utf-8") as fh:
        for fam, lines in families.items():
            fh.write(f"# TYPE {fam} {types[fam]}\n")
            fh.write("".join(lines))
        fh.write("# EOF\n")
    return {"start": start, "end": end, "oom_at": oom_at, "servers": sorted(usage)}


def _append(text: str, ts: int, families: dict[str, list[str]], types: dict[str, str], instance: str) -> None:
    fam = None
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            fam = name if name in KEEP and typ in ("gauge", "counter") else None
            if fam:
                types[fam] = typ
            continue
        if fam is None or line.startswith("#") or not line:
            continue
        name, _, value = line.rpartition(" ")
        if name.endswith("_created"):
            continue
        if "{" in name:
            name = name.replace("{", f'{{job="vllm-headroom",instance="{instance}",', 1)
        else:
            name = f'{name}{{job="vllm-headroom",instance="{instance}"}}'
        families.setdefault(fam, []).append(f"{name} {value} {ts}\n")
