"""Memory over a soak: `serve` with 16 servers whose DP engines churn and whose logs rotate, RSS every 10 s."""

from __future__ import annotations

import sys
import time
import urllib.request

from benchmarks.bench_overhead import peak_rss_mb
from benchmarks.common import record, serve_with_fleet


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main(seconds: int = 600) -> list[dict]:
    serve, fleet, port = serve_with_fleet(16, "2s", 4, churn=True, window="60s")
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
    row = {
        "duration_s": samples[-1][0],
        "rss_first_minute_mb": max(first),
        "rss_last_minute_mb": max(last),
        "peak_rss_mb": peak,
        "samples": len(samples),
    }
    print(
        f"RSS: first minute {row['rss_first_minute_mb']:.1f} MB, last minute {row['rss_last_minute_mb']:.1f} MB, "
        f"peak {peak:.1f} MB over {row['duration_s']:.0f} s"
    )
    record("soak", [row])
    return [row]


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 600)
