"""Latency from an OOM line appended to a log to the counter visible on /metrics: p50 and p99 over 100 trials,
three runs (a fresh `serve` each), medians with the spread.

Each OOM line is written after a random pause (0.3-0.8 s, as wide as the daemon's 0.5 s log poll,
exporter/daemon.py TAIL_INTERVAL_S), so it lands at a random point of the poll, as a real failure does. A fixed
pause would fall at the same phase of the poll every time and report that phase (0.3 s against the 250 ms poll
of before made the p99 look like 208 ms).
"""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

from benchmarks.common import free_port, record
from exporter import catalog
from exporter.exposition_parser import parse
from exporter.simulate.logs import ACCESS_OK, log_line

OOM = (
    log_line(
        "EngineCore_DP0 pid=2",
        "ERROR",
        "core.py:916",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "279.28 GiB of which 1.00 GiB is free.",
        "11-20 10:10:07",
    )
    + "\n"
)
HEALTHY = ACCESS_OK + "\n"


def ooms(url: str) -> float:
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for s in parse(text).samples if s.name == catalog.series("oom_events"))


def one_run(trials: int, seed: int) -> dict:
    rng = random.Random(seed)
    d = tempfile.mkdtemp()
    log = os.path.join(d, "vllm.log")
    open(log, "w").close()
    port = free_port()
    cfg = {
        "listen_address": f"127.0.0.1:{port}",
        "state_dir": os.path.join(d, "state"),
        "gpu": {"backend": "none"},
        "servers": [{"name": "vllm-0", "url": f"http://127.0.0.1:{free_port()}/metrics", "log": log}],
    }
    path = os.path.join(d, "headroom.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    serve = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--log-level", "WARNING", "serve", "--config", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
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
            time.sleep(rng.uniform(0.3, 0.8))  # a random phase of the 0.5 s poll
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
    return {
        "trials": trials,
        "p50_s": statistics.median(lat),
        "p99_s": lat[int(0.99 * (len(lat) - 1))],
        "max_s": lat[-1],
    }


def main(trials: int = 100, runs: int = 3) -> list[dict]:
    results = [one_run(trials, seed) for seed in range(runs)]
    for r in results:
        print(
            f"OOM line -> /metrics: p50 {r['p50_s'] * 1e3:.0f} ms, p99 {r['p99_s'] * 1e3:.0f} ms, "
            f"max {r['max_s'] * 1e3:.0f} ms over {trials} trials",
            flush=True,
        )
    row = {"trials": trials, "runs": runs}
    for key in ("p50_s", "p99_s", "max_s"):
        values = [r[key] for r in results]
        row.update({key: statistics.median(values), key[:-2] + "_min_s": min(values), key[:-2] + "_max_s": max(values)})
    record("latency", [row])
    return [row]


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
