"""Serving /metrics under wrk: `vllm-headroom serve` with LIVE state vs Debian's prometheus-node-exporter.

Ours scrapes 16 simulated vLLM servers (2 DP engines each, every 5 s), follows their 16 growing logs and
samples 8 fake GPUs at 10 Hz while wrk loads it, so its state (and its cached /metrics body) changes several
times a second, as node_exporter collects on every request. Two request shapes, each measured in paired,
interleaved runs (ours, then node_exporter, same seconds of machine noise):
- `prometheus`: the Accept and Accept-Encoding headers Prometheus 3.x sends (scrape/scrape.go `acceptHeader`,
  `acceptEncodingHeader`, v3.14.0): OpenMetrics first, gzip;
- `plain`: no Accept header and no compression (curl, wrk's default).
"""

from __future__ import annotations

import gzip
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request

from benchmarks.common import free_port, record, serve_with_fleet, wait_ready

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
HEADERS = {"prometheus": {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}, "plain": {}}


def wait(url: str, headers: dict[str, str], timeout: float = 60) -> tuple[int, int, str]:
    """(bytes on the wire, bytes decoded, Content-Type) once the URL answers 200."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
                wire = r.read()
                body = gzip.decompress(wire) if r.headers.get("Content-Encoding") == "gzip" else wire
                return len(wire), len(body), r.headers.get("Content-Type", "")
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer") from None
            time.sleep(0.2)


def wrk(url: str, seconds: int, headers: dict[str, str]) -> dict:
    args = ["wrk", "-t2", "-c8", f"-d{seconds}s", "--latency"]
    for k, v in headers.items():
        args += ["-H", f"{k}: {v}"]
    out = subprocess.run(args + [url], capture_output=True, text=True, timeout=seconds + 30).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def pct(p: str) -> float:
        m = re.search(rf"\s{p}%\s+([\d.]+)(us|ms|s)", out)
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    return {"req_per_s": rps, "p50_ms": pct("50"), "p99_ms": pct("99")}


def main(seconds: int = 10, repeats: int = 3) -> list[dict]:
    for tool in ("wrk", "prometheus-node-exporter"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed: apt-get install wrk prometheus-node-exporter")
    serve, fleet, ours_port = serve_with_fleet(16, "5s", 2)
    node_port = free_port()
    node = subprocess.Popen(
        ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{node_port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    urls = {"ours": f"http://127.0.0.1:{ours_port}/metrics", "node_exporter": f"http://127.0.0.1:{node_port}/metrics"}
    rows = []
    try:
        wait_ready(ours_port)
        for shape, headers in HEADERS.items():
            sizes = {name: wait(url, headers) for name, url in urls.items()}
            runs: dict[str, list[dict]] = {"ours": [], "node_exporter": []}
            ratios = []
            for _ in range(repeats):  # paired and interleaved, so machine noise hits both alike
                for name, url in urls.items():
                    runs[name].append(wrk(url, seconds, headers))
                ratios.append(runs["ours"][-1]["req_per_s"] / runs["node_exporter"][-1]["req_per_s"])
            for name, rs in runs.items():
                wire, body, ctype = sizes[name]
                rows.append(
                    {
                        "headers": shape,
                        "server": name,
                        "wire_bytes": wire,
                        "body_bytes": body,
                        "content_type": ctype.split(";")[0],
                        "req_per_s": statistics.median(r["req_per_s"] for r in rs),
                        "req_per_s_runs": [r["req_per_s"] for r in rs],
                        "p50_ms": statistics.median(r["p50_ms"] for r in rs),
                        "p99_ms": statistics.median(r["p99_ms"] for r in rs),
                    }
                )
                print(
                    f"{shape:>10} {name:>14}: {wire:>7} B on the wire ({body} B), {rows[-1]['req_per_s']:8.1f} "
                    f"req/s, p50 {rows[-1]['p50_ms']:.2f} ms, p99 {rows[-1]['p99_ms']:.2f} ms",
                    flush=True,
                )
            rows.append(
                {
                    "headers": shape,
                    "server": "ratio_ours_over_node_exporter",
                    "value": statistics.median(ratios),
                    "min": min(ratios),
                    "max": max(ratios),
                    "runs": ratios,
                }
            )
            print(
                f"{shape:>10} ours / node_exporter req/s: {statistics.median(ratios):.2f} "
                f"({min(ratios):.2f}-{max(ratios):.2f})",
                flush=True,
            )
    finally:
        node.terminate()
        serve.terminate()
        fleet.terminate()
        serve.wait(10)
    record("serve", rows)
    return rows


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
