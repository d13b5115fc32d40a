"""Serving /metrics under wrk: our 16-server, 8-GPU state vs Debian's prometheus-node-exporter, same machine, same run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
import urllib.request

from benchmarks.common import free_port, record


def wait(url: str, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return len(r.read())
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer")


def wrk(url: str, seconds: int) -> dict:
    out = subprocess.run(["wrk", "-t2", "-c8", f"-d{seconds}s", "--latency", url], capture_output=True, text=True,
                         timeout=seconds + 30).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

    def pct(p: str) -> float:
        m = re.search(rf"\s{p}%\s+([\d.]+)(us|ms|s)", out)
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    return {"req_per_s": rps, "p50_ms": pct("50"), "p99_ms": pct("99")}


def main(seconds: int = 10, repeats: int = 3) -> list[dict]:
    for tool in ("wrk", "prometheus-node-exporter"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed: apt-get install wrk prometheus-node-exporter")
    ours_port, node_port = free_port(), free_port()
    ours = subprocess.Popen([sys.executable, "-m", "benchmarks.serve_state", str(ours_port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    node = subprocess.Popen(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{node_port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sizes = {"ours": wait(f"http://127.0.0.1:{ours_port}/metrics"),
                 "node_exporter": wait(f"http://127.0.0.1:{node_port}/metrics")}
        runs: dict[str, list[dict]] = {"ours": [], "node_exporter": []}
        for _ in range(repeats):  # interleaved, so machine noise hits both alike
            runs["ours"].append(wrk(f"http://127.0.0.1:{ours_port}/metrics", seconds))
            runs["node_exporter"].append(wrk(f"http://127.0.0.1:{node_port}/metrics", seconds))
    finally:
        ours.terminate()
        node.terminate()
    rows = []
    for name, rs in runs.items():
        rs.sort(key=lambda r: r["req_per_s"])
        mid = rs[len(rs) // 2]
        rows.append({"server": name, "bytes": sizes[name], **mid})
        print(f"{name:>14}: {sizes[name]:>7} B, {mid['req_per_s']:8.1f} req/s, p50 {mid['p50_ms']:.2f} ms, "
              f"p99 {mid['p99_ms']:.2f} ms")
    ratio = rows[0]["req_per_s"] / rows[1]["req_per_s"]
    print(f"ours / node_exporter req/s: {ratio:.2f}")
    record("serve", rows + [{"server": "ratio_ours_over_node_exporter", "value": ratio}])
    return rows


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
