"""Shared helpers: medians over repeats, free ports, and the results table that docs/performance.md shows."""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results.json"


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(section: str, rows: list[dict]) -> None:
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    data[section] = {
        "rows": rows,
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpus": os.cpu_count(),
        "loadavg_1m": os.getloadavg()[0],
    }  # how busy the shared machine was as the section ended
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")


def serve_with_fleet(
    servers: int, interval: str, lines_per_s: float, churn: bool = False, window: str = "5m", mix: str = "vllm"
) -> tuple:
    """`vllm-headroom serve` (8 fake GPUs at 10 Hz) watching a fleet of simulated servers and their logs (`mix`:
    benchmarks.fleet.MIXES).

    Returns (serve process, fleet process, exporter port); the caller terminates both.
    """
    import subprocess
    import sys
    import tempfile

    import yaml

    d = tempfile.mkdtemp()
    args = [sys.executable, "-m", "benchmarks.fleet", str(servers), d, str(lines_per_s), mix]
    args += ["churn"] if churn else []
    fleet = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    info = json.loads(fleet.stdout.readline())
    port = free_port()
    cfg = {
        "listen_address": f"127.0.0.1:{port}",
        "state_dir": os.path.join(d, "state"),
        "gpu": {"backend": "fake", "fake_count": 8, "sample_interval": "100ms"},
        "windows": {"prefix_cache_hit_ratio": window},
        "servers": [
            {"name": f"vllm-{i}", "url": f"http://127.0.0.1:{p}/metrics", "interval": interval, "log": info["logs"][i]}
            for i, p in enumerate(info["ports"])
        ],
    }
    path = os.path.join(d, "headroom.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    serve = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--log-level", "WARNING", "serve", "--config", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return serve, fleet, port


def wait_ready(port: int, timeout: float = 120, what: str = "vllm-headroom serve") -> None:
    """Wait for a daemon's /readyz on loopback; RuntimeError naming it when it never answers."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} never became ready") from None
            time.sleep(0.2)
