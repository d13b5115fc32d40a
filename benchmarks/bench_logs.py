"""Log scanning: our tailer + stage machine vs Debian's mtail (`--one_shot`) on the same 2,000,000-line vLLM
log, with the raw read speed of the file as the ceiling. The event counts must agree before speeds count.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import record
from exporter.config import LogSource
from exporter.logs.tailer import LogTailer

PROG = os.path.join(os.path.dirname(__file__), "vllm_log.mtail")


def generate(path: str, lines: int = 2_000_000, seed: int = 1) -> dict[str, int]:
    """A busy V1 server's log: access, request, stats and engine lines; rare OOMs, preemptions, rejections."""
    rng = random.Random(seed)
    counts = {"oom": 0, "preemption": 0, "context_rejected": 0}
    t = "11-20 10:10:07"
    out = []
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        while n < lines:
            r = rng.random()
            if n % 100_000 == 50_000:
                block = [
                    f"(EngineCore_DP0 pid=212) ERROR {t} [dump_input.py:79] Dumping scheduler output for model "
                    f"execution: SchedulerOutput(scheduled_new_reqs=[], num_scheduled_tokens={{c-1: 1}})",
                    f"(EngineCore_DP0 pid=212) ERROR {t} [core.py:916] Traceback (most recent call last):",
                    f'(EngineCore_DP0 pid=212) ERROR {t} [core.py:916]   File "/usr/lib/vllm/v1/worker/gpu_model_runner.py"'
                    f", line 2211, in execute_model",
                    f"(EngineCore_DP0 pid=212) ERROR {t} [core.py:916] torch.OutOfMemoryError: CUDA out of memory. "
                    f"Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 279.28 GiB of which 1.0 GiB is free.",
                ]
                counts["oom"] += 1
            elif r < 0.60:
                block = [f'(APIServer pid=1) INFO:     10.0.{rng.randrange(256)}.{rng.randrange(256)}:{rng.randrange(1024, 65535)}'
                         f' - "POST /v1/chat/completions HTTP/1.1" 200 OK']
            elif r < 0.80:
                block = [f"(APIServer pid=1) INFO {t} [logger.py:40] Received request chatcmpl-{rng.getrandbits(64):016x}: "
                         f"prompt: 'Summarize the incident report: the node ran out of memory at 3 a.m. ...', params: "
                         f"SamplingParams(n=1, temperature=0.7, max_tokens=1024), lora_request: None."]
            elif r < 0.90:
                block = [f"(APIServer pid=1) INFO {t} [loggers.py:123] Engine 000: Avg prompt throughput: "
                         f"{rng.uniform(1000, 20000):.1f} tokens/s, Avg generation throughput: {rng.uniform(100, 900):.1f}"
                         f" tokens/s, Running: {rng.randrange(64)} reqs, Waiting: {rng.randrange(8)} reqs, GPU KV cache "
                         f"usage: {rng.uniform(0, 100):.1f}%, Prefix cache hit rate: {rng.uniform(0, 100):.1f}%"]
            elif r < 0.9995:
                block = [f"(EngineCore_DP0 pid=212) INFO {t} [scheduler.py:512] Added request chatcmpl-"
                         f"{rng.getrandbits(64):016x} to the waiting queue."]
            elif r < 0.99975:
                block = [f"WARNING {t} scheduler.py:1491] Sequence group cmpl-{rng.getrandbits(32):08x} is preempted by "
                         f"PreemptionMode.RECOMPUTE mode because there is not enough KV cache space."]
                counts["preemption"] += 1
            else:
                block = [f"(APIServer pid=1) ERROR {t} [serving_chat.py:222] ValueError: This model's maximum context "
                         f"length is 1048576 tokens. However, you requested 1100000 tokens."]
                counts["context_rejected"] += 1
            out.extend(block)
            n += len(block)
            if len(out) >= 10_000:
                fh.write("\n".join(out) + "\n")
                out = []
        if out:
            fh.write("\n".join(out) + "\n")
    counts["lines"] = n
    return counts


def ours(path: str) -> tuple[float, float, dict[str, int]]:
    start, cpu = time.perf_counter(), time.process_time()
    t = LogTailer("bench", LogSource(path, "plain"), None)
    t.poll()
    wall, used = time.perf_counter() - start, time.process_time() - cpu
    c = t.analyzer.counts
    return wall, used, {"oom": c["oom"], "preemption": c["preemption"], "context_rejected": c["context_rejected"],
                        "lines": t.health.lines_read}


def mtail(path: str) -> tuple[float, float, dict[str, int]]:
    binary = shutil.which("mtail")
    if binary is None:
        sys.exit("mtail is not installed: apt-get install mtail")
    progs = tempfile.mkdtemp()
    shutil.copy(PROG, progs)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run([binary, "--progs", progs, "--logs", path, "--one_shot", "--one_shot_format", "json",
                        "--logtostderr"], capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    data = json.loads(r.stdout)
    def value(name: str) -> int:
        return int(sum(p["Value"]["Value"] for p in data[name][0]["LabelValues"]) if data[name][0].get("LabelValues")
                   else 0)
    return wall, cpu, {"oom": value("vllm_oom_events_total"), "preemption": value("vllm_preemptions_total"),
                       "context_rejected": value("vllm_context_rejected_total")}


def raw(path: str) -> float:
    start = time.perf_counter()
    n = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            n += chunk.count(b"\n")
    return time.perf_counter() - start


def main(lines: int = 2_000_000, repeats: int = 3) -> list[dict]:
    d = tempfile.mkdtemp()
    path = os.path.join(d, "vllm.log")
    want = generate(path, lines)
    print(f"log: {want['lines']} lines, {os.path.getsize(path) / 1e6:.0f} MB; events {want}")
    runs = {"ours": [], "mtail": [], "raw": []}
    for _ in range(repeats):
        w, c, got = ours(path)
        assert got == want, f"vllm-headroom counted {got}, the log has {want}"
        runs["ours"].append((w, c))
        w, c, got = mtail(path)
        assert got == {k: want[k] for k in ("oom", "preemption", "context_rejected")}, f"mtail counted {got}"
        runs["mtail"].append((w, c))
        runs["raw"].append((raw(path), 0.0))
    rows = []
    for name, values in runs.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        rows.append({"tool": name, "wall_s": wall, "cpu_s": cpu, "lines_per_s": want["lines"] / wall})
        print(f"{name:>6}: {wall:6.2f} s wall, {cpu:6.2f} s CPU, {want['lines'] / wall / 1e3:8.0f} k lines/s")
    ratio = rows[1]["wall_s"] / rows[0]["wall_s"]
    print(f"ours / mtail speed: {ratio:.2f}x")
    record("logs", rows + [{"tool": "ratio_ours_over_mtail", "value": ratio, "lines": want["lines"]}])
    shutil.rmtree(d)
    return rows


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000)
