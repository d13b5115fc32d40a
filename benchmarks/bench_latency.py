"""Latency from an OOM line appended to a log to the counter visible on /metrics: p50 and p99 over 100 trials."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

from benchmarks.common import free_port, record
from exporter.exposition import parse

OOM = ("(EngineCore_DP0 pid=2) ERROR 11-20 10:10:07 [core.py:916] torch.OutOfMemoryError: CUDA out of memory. "
       "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 279.28 GiB of which 1.00 GiB is free.\n")
HEALTHY = '(APIServer pid=1) INFO:     10.0.0.5:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'


def ooms(url: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for s in parse(text).samples if s.name == "vllm_headroom_oom_events_total")


def main(trials: int = 100) -> list[dict]:
    d = tempfile.mkdtemp()
    log = os.path.join(d, "vllm.log")
    open(log, "w").close()
    port = free_port()
    cfg = {"listen_address": f"127.0.0.1:{port}", "state_dir": os.path.join(d, "state"), "gpu": {"backend": "none"},
           "servers": [{"name": "vllm-0", "url": f"http://127.0.0.1:{free_port()}/metrics", "log": log}]}
    path = os.path.join(d, "headroom.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    serve = subprocess.Popen([sys.executable, "-m", "exporter", "--log-level", "WARNING", "serve", "--config", path],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    lat = []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                base = ooms(url)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        for i in range(trials):
            with open(log, "a") as f:
                f.write(HEALTHY)  # closes the previous incident: each OOM is a new one
                f.flush()
            time.sleep(0.3)
            start = time.monotonic()
            with open(log, "a") as f:
                f.write(OOM)
                f.flush()
            while ooms(url) < base + i + 1:
                if time.monotonic() - start > 5:
                    raise RuntimeError(f"trial {i}: the OOM did not show within 5 s")
                time.sleep(0.005)
            lat.append(time.monotonic() - start)
    finally:
        serve.terminate()
        serve.wait(10)
    lat.sort()
    row = {"trials": trials, "p50_s": statistics.median(lat), "p99_s": lat[int(0.99 * (len(lat) - 1))],
           "max_s": lat[-1]}
    print(f"OOM line -> /metrics: p50 {row['p50_s'] * 1e3:.0f} ms, p99 {row['p99_s'] * 1e3:.0f} ms, "
          f"max {row['max_s'] * 1e3:.0f} ms over {trials} trials")
    record("latency", [row])
    return [row]


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
