"""Where `vllm-headroom serve` spends its CPU in the overhead scenario: py-spy samples for a while, then the
functions with the most samples where they ran themselves (self time), and with what they called (total).

    python -m benchmarks.profile_serve [seconds]   (needs py-spy: pip install py-spy; ptrace rights)
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


def main(seconds: int = 60) -> None:
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))
    if spy is None:
        sys.exit("py-spy is not installed: pip install py-spy")
    serve, fleet, port = serve_with_fleet(16, "5s", 20)
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
    text = "\n".join(line.split(";", 1)[1] if line.startswith("thread") else line for line in text.splitlines())
    for name, own, tot in hot_spots(text):
        print(f"{own * 100:5.1f} % self {tot * 100:5.1f} % total  {name}")
    if len(sys.argv) > 2:
        shutil.copy(out, sys.argv[2])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
