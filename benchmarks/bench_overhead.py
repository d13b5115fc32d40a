"""Overhead of `vllm-headroom serve` as deployed: 8 fake GPUs at 10 Hz, N simulated servers scraped every 5 s,
N logs growing at 20 lines/s, and a Prometheus scraping /metrics every 15 s with its own headers. CPU seconds
(from /proc, so other load on the machine does not count) per minute and peak RSS (VmHWM).

N = 16 is the scenario the target is about; N = 1 and 64 give the cost of each added server (a least-squares
slope over the three, with the two segment slopes to show it is linear). Three runs per N, interleaved. The logs
hold what vLLM writes (benchmarks.fleet's `vllm` mix: access lines, each engine's stats every 10 s); one more
row, 16 servers with the `stats` stress mix (every other line a stats line), runs interleaved with them.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import urllib.request

from benchmarks.common import record, serve_with_fleet, wait_ready

TICKS = os.sysconf("SC_CLK_TCK")
SIZES = (1, 16, 64)
PROMETHEUS = {
    "Accept": "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
    "escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "Accept-Encoding": "gzip",
}


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


STRESS = (16, "stats")


def one_run(servers: int, seconds: float, warmup: float, mix: str = "vllm") -> dict:
    serve, fleet, port = serve_with_fleet(servers, "5s", 20, mix=mix)
    try:
        wait_ready(port)
        time.sleep(warmup)
        c0, t0 = cpu_seconds(serve.pid), time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:  # a Prometheus scraping every 15 s
            req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=PROMETHEUS)
            with urllib.request.urlopen(req, timeout=10) as r:
                r.read()
            time.sleep(min(15, max(0.0, end - time.monotonic())))
        c1, t1 = cpu_seconds(serve.pid), time.monotonic()
        rss = peak_rss_mb(serve.pid)
    finally:
        serve.terminate()
        fleet.terminate()
        serve.wait(10)
        fleet.wait(10)
    return {"core_percent": (c1 - c0) / (t1 - t0) * 100, "peak_rss_mb": rss, "duration_s": t1 - t0}


def _slope(points: list[tuple[float, float]]) -> float:
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def main(seconds: int = 60, repeats: int = 3, warmup: int = 10) -> list[dict]:
    runs: dict[tuple[int, str], list[dict]] = {(n, "vllm"): [] for n in SIZES}
    runs[STRESS] = []
    for _ in range(repeats):  # interleaved: a noisy minute hits every size alike
        for n, mix in runs:
            r = one_run(n, seconds, warmup, mix)
            runs[(n, mix)].append(r)
            print(
                f"{n:>3} servers ({mix} log mix): {r['core_percent']:.2f} % of a core, peak RSS "
                f"{r['peak_rss_mb']:.1f} MB",
                flush=True,
            )
    rows = []
    for (n, mix), rs in runs.items():
        cores = [r["core_percent"] for r in rs]
        rows.append(
            {
                "servers": n,
                "log_mix": mix,
                "gpus": 8,
                "logs": n,
                "log_lines_per_s": 20,
                "scrape_interval_s": 5,
                "core_percent": statistics.median(cores),
                "core_percent_min": min(cores),
                "core_percent_max": max(cores),
                "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs),
                "runs": len(rs),
                "duration_s": statistics.median(r["duration_s"] for r in rs),
            }
        )
    points = [(r["servers"], r["core_percent"]) for r in rows if r["log_mix"] == "vllm"]
    slope = _slope(points)
    seg = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(points, points[1:], strict=False)]
    rows.append({"servers": "slope", "core_percent_per_server": slope, "segments": seg})
    print(f"per added server: {slope:.4f} % of a core (segments {', '.join(f'{s:.4f}' for s in seg)})")
    record("overhead", rows)
    return rows


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60, int(sys.argv[2]) if len(sys.argv) > 2 else 3)
