"""Where `vllm-headroom serve` spends its CPU in the overhead scenario: py-spy samples for a while, then the
functions with the most samples where they ran themselves (self time), and with what they called (total).

    python -m benchmarks.profile_serve [seconds] [raw output file] [servers]
    (needs py-spy: pip install py-spy; ptrace rights; 16 servers unless told)
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchmarks.bench_serve import HEADERS
from benchmarks.common import serve_with_fleet


def hot_spots(collapsed: str, top: int = 8) -> list[tuple[str, float, float]]:
    """(function, self share, total share) from py-spy's collapsed stacks, idle waits left out."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")" if " (" in f else f
            for f in stack.split(";")
        ]
        leaf = frames[-1]
        if any(w in leaf for w in ("select (", "epoll", "wait (threading", "_worker (concurrent", "poll (")):
            continue  # sleeping, not working
        n = int(count)
        samples += n
        own[leaf] += n
        for f in set(frames):
            total[f] += n
    return [(f, own[f] / samples, total[f] / samples) for f, _ in own.most_common(top)] if samples else []


# Where a sample's CPU goes: the first of these a stack meets, read from its leaf to its root (function names as
# py-spy writes them); a stack that meets none is booked to its thread's fallback below.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("log: stage machine (per line)", ("LogAnalyzer.", "parse_record", "_LogFamilies")),
    ("log: state save (json + fsync)", ("LogTailer.save_state",)),
    ("log: stat and rotation checks", ("_replaced_in_place", "_check_rotation", "needs_poll", "LogTailer._drain")),
    ("log: read and split", ("LogTailer.",)),
    ("scrape: parse", ("parse (exposition_parser", "_columns", "_by_line")),
    ("scrape: normalize", ("normalize (",)),
    ("scrape: state update", ("ServerState.update",)),
    ("scrape: HTTP client (aiohttp)", ("_fetch (", "fetch_metrics", "_scrape_loop")),
    ("/metrics: build and encode", ("ExpositionCache.body",)),
    ("/metrics: HTTP server", ("RequestHandler", "_handle_request")),
    ("GPU sampling", ("GpuSampler",)),
)
THREAD_FALLBACK = {"logs": "log: thread hops", "gpu-sampler": "GPU sampling"}


def parts(collapsed: str) -> list[tuple[str, float]]:
    """(part, share of the busy samples), largest first: the profile split into the daemon's costs."""
    counts: collections.Counter[str] = collections.Counter()
    for line in collapsed.splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        thread = frames[0].split(": ", 1)[-1] if frames[0].startswith("thread") else ""
        if any(w in frames[-1] for w in ("select (", "epoll", "wait (threading", "_worker (concurrent", "poll (")):
            continue
        part = None
        for frame in reversed(frames):
            part = next((name for name, keys in PARTS if any(k in frame for k in keys)), None)
            if part is not None:
                break
        if part is None:
            part = next((p for t, p in THREAD_FALLBACK.items() if thread.startswith(t)), "event loop and other")
        counts[part] += int(n)
    total = sum(counts.values())
    return [(p, c / total) for p, c in counts.most_common()] if total else []


def main(seconds: int = 60, servers: int = 16) -> None:
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if spy is None:
        sys.exit("py-spy is not installed: pip install py-spy")
    serve, fleet, port = serve_with_fleet(servers, "5s", 20)
    out = tempfile.mktemp(suffix=".txt")
    try:
        time.sleep(15)
        rec = subprocess.Popen(
            [
                spy,
                "record",
                "--pid",
                str(serve.pid),
                "--duration",
                str(seconds),
                "--rate",
                "200",
                "--format",
                "raw",
                "--threads",
                "--nonblocking",
                "-o",
                out,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        end = time.monotonic() + seconds
        while time.monotonic() < end:  # a Prometheus scraping every 15 s, with its headers
            req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=HEADERS["prometheus"])
            with urllib.request.urlopen(req, timeout=10) as r:
                r.read()
            time.sleep(min(15.0, max(0.0, end - time.monotonic())))
        rec.wait(seconds + 60)
    finally:
        serve.terminate()
        fleet.terminate()
    with open(out) as f:
        text = f.read()
    print("by part:")
    for part, share in parts(text):
        print(f"{share * 100:5.1f} %  {part}")
    # without the thread frame; a sample with no Python frame at all (a thread in native code) is left out
    text = "\n".join(
        line.split(";", 1)[1] if line.startswith("thread") else line for line in text.splitlines() if ";" in line
    )
    for name, own, tot in hot_spots(text):
        print(f"{own * 100:5.1f} % self {tot * 100:5.1f} % total  {name}")
    if len(sys.argv) > 2:
        shutil.copy(out, sys.argv[2])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60, int(sys.argv[3]) if len(sys.argv) > 3 else 16)
