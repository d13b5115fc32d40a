"""Overhead of `vllm-headroom serve` as deployed: 8 fake GPUs at 10 Hz, 16 simulated servers scraped every 5 s,
16 growing logs, for 2 minutes. CPU seconds per minute (from /proc) and peak RSS (VmHWM)."""

from __future__ import annotations

import os
import sys
import time

from benchmarks.common import record, serve_with_fleet

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main(seconds: int = 120, warmup: int = 15) -> list[dict]:
    serve, fleet, port = serve_with_fleet(16, "5s", 2)
    try:
        time.sleep(warmup)
        c0, t0 = cpu_seconds(serve.pid), time.monotonic()
        scrape = f"http://127.0.0.1:{port}/metrics"
        import urllib.request

        end = t0 + seconds
        while time.monotonic() < end:  # a Prometheus scraping every 15 s
            with urllib.request.urlopen(scrape, timeout=10) as r:
                r.read()
            time.sleep(min(15, max(0.0, end - time.monotonic())))
        c1, t1 = cpu_seconds(serve.pid), time.monotonic()
        rss = peak_rss_mb(serve.pid)
    finally:
        serve.terminate()
        fleet.terminate()
        serve.wait(10)
    per_min = (c1 - c0) / (t1 - t0) * 60
    row = {"cpu_seconds_per_minute": per_min, "core_percent": per_min / 60 * 100, "peak_rss_mb": rss,
           "duration_s": t1 - t0, "servers": 16, "gpus": 8, "logs": 16}
    print(f"serve: {per_min:.2f} CPU s/min ({row['core_percent']:.2f}% of one core), peak RSS {rss:.1f} MB "
          f"over {t1 - t0:.0f} s")
    record("overhead", [row])
    return [row]


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 120)
