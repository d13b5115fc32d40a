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
    data[section] = {"rows": rows, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count()}
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
