"""Memory over a soak: `serve` with 16 servers whose DP engines churn and whose logs rotate, RSS every 10 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

from benchmarks.bench_overhead import peak_rss_mb
from benchmarks.common import free_port, record


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main(seconds: int = 600) -> list[dict]:
    d = tempfile.mkdtemp()
    fleet = subprocess.Popen([sys.executable, "-m", "benchmarks.fleet", "16", d, "4", "churn"],
                             stdout=subprocess.PIPE, text=True)
    info = json.loads(fleet.stdout.readline())
    port = free_port()
    cfg = {"listen_address": f"127.0.0.1:{port}", "state_dir": os.path.join(d, "state"),
           "gpu": {"backend": "fake", "fake_count": 8, "sample_interval": "100ms"},
           "windows": {"prefix_cache_hit_ratio": "60s"},
           "servers": [{"name": f"vllm-{i}", "url": f"http://127.0.0.1:{p}/metrics", "interval": "2s",
                        "log": info["logs"][i]} for i, p in enumerate(info["ports"])]}
    path = os.path.join(d, "headroom.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    serve = subprocess.Popen([sys.executable, "-m", "exporter", "--log-level", "WARNING", "serve", "--config", path],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples = []
    try:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            time.sleep(10)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                r.read()
            samples.append((time.monotonic() - start, rss_mb(serve.pid)))
            print(f"{samples[-1][0]:6.0f} s  RSS {samples[-1][1]:6.1f} MB", flush=True)
        peak = peak_rss_mb(serve.pid)
    finally:
        serve.terminate()
        fleet.terminate()
    first = [r for t, r in samples if t <= 70]
    last = [r for t, r in samples if t >= samples[-1][0] - 60]
    row = {"duration_s": samples[-1][0], "rss_first_minute_mb": max(first), "rss_last_minute_mb": max(last),
           "peak_rss_mb": peak, "samples": len(samples)}
    print(f"RSS: first minute {row['rss_first_minute_mb']:.1f} MB, last minute {row['rss_last_minute_mb']:.1f} MB, "
          f"peak {peak:.1f} MB over {row['duration_s']:.0f} s")
    record("soak", [row])
    return [row]


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 600)
