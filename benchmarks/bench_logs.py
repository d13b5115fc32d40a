"""Log scanning: our tailer + stage machine vs Debian's mtail (`--one_shot`) on the same vLLM logs, with the
raw read speed of the file as the ceiling. The event counts must agree before speeds count.

Shapes (see `generate`): the benchmark's mix, the same with lines of about 80, 200, 500 and 2000 bytes, the
mix as the kubelet writes it (CRI), and a traceback-heavy failing server. Up to 500,000 lines (150 MB) each.
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

from benchmarks.common import RESULTS, record
from exporter.config import LogSource
from exporter.logs.tailer import LogTailer
from exporter.simulate.logs import API, access_line, log_line, stats_message

PROG = os.path.join(os.path.dirname(__file__), "vllm_log.mtail")


ENGINE = "EngineCore_DP0 pid=212"
SHAPES = ("mix", "80B", "200B", "500B", "2000B", "cri", "traceback")
_PROMPT = (
    "Summarize the incident report: the node ran out of memory at 3 a.m. and the on-call engineer "
    "restarted the server twice before the KV cache settled; list what to check first next time. "
)


def _fit(line: str, pad: str, width: int | None) -> str:
    """Grow (or shrink) the free text `pad` stands for, so the line is about `width` bytes."""
    if width is None:
        return line.replace("{pad}", pad)
    room = width - (len(line) - len("{pad}"))
    text = (pad * (room // max(1, len(pad)) + 1))[: max(1, room)]
    return line.replace("{pad}", text)


def _traceback(t: str, proc: str, last: str) -> list[str]:
    """A traceback as vLLM's EngineCore or API server logs it: header, frames with their code, exception."""

    def p(msg: str) -> str:
        return log_line(proc, "ERROR", "core.py:916", msg, t)

    frames = [
        ("/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", 701, "run_engine_core"),
        ("/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", 728, "run_busy_loop"),
        ("/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", 754, "_process_engine_step"),
        ("/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", 289, "step"),
        ("/usr/lib/python3.12/site-packages/vllm/v1/executor/abstract.py", 87, "execute_model"),
        ("/usr/lib/python3.12/site-packages/vllm/v1/worker/gpu_worker.py", 342, "execute_model"),
        ("/usr/lib/python3.12/site-packages/torch/utils/_contextlib.py", 116, "decorate_context"),
        ("/usr/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", 2211, "execute_model"),
    ]
    out = [p("Traceback (most recent call last):")]
    for path, line, func in frames:
        out += [p(f'  File "{path}", line {line}, in {func}'), p("    return func(*args, **kwargs)")]
    return out + [p(last)]


def generate(path: str, lines: int = 2_000_000, seed: int = 1, shape: str = "mix") -> dict[str, int]:
    """A busy V1 server's log: access, request, stats and engine lines; rare OOMs, preemptions, rejections.

    Shapes: `mix` as written; `NB`: the free text of every busy line (prompts, request ids, URLs) grown or cut
    so lines are about N bytes; `cri`: the mix as the kubelet writes it (CRI); `traceback`: a failing server,
    a 20-line traceback every 40 lines (request errors, and an OOM every 2,000 lines).
    """
    rng = random.Random(seed)
    width = int(shape[:-1]) if shape.endswith("B") else None
    counts = {"oom": 0, "preemption": 0, "context_rejected": 0}
    t = "11-20 10:10:07"
    out: list[str] = []
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        while n < lines:
            r = rng.random()
            oom_due = (n % 100_000 == 50_000) if shape != "traceback" else (n % 2_000 == 1_000)
            if oom_due:
                block = [
                    log_line(
                        ENGINE,
                        "ERROR",
                        "dump_input.py:79",
                        "Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[], "
                        "num_scheduled_tokens={c-1: 1})",
                        t,
                    )
                ]
                block += _traceback(
                    t,
                    ENGINE,
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
                    "has a total capacity of 279.28 GiB of which 1.0 GiB is free.",
                )
                counts["oom"] += 1
            elif shape == "traceback" and n % 40 == 20:
                block = _traceback(
                    t,
                    API,
                    "ValueError: This model's maximum context length is "
                    "1048576 tokens. However, you requested 1100000 tokens.",
                )
                counts["context_rejected"] += 1
            elif r < 0.60:
                client = f"10.0.{rng.randrange(256)}.{rng.randrange(256)}:{rng.randrange(1024, 65535)}"
                block = [
                    _fit(access_line(client, "/v1/chat/completions?user={pad}"), f"{rng.getrandbits(32):08x}", width)
                ]
            elif r < 0.80:
                block = [
                    _fit(
                        log_line(
                            API,
                            "INFO",
                            "logger.py:40",
                            f"Received request chatcmpl-{rng.getrandbits(64):016x}: prompt: '{{pad}}', params: "
                            "SamplingParams(n=1, temperature=0.7, max_tokens=1024), lora_request: None.",
                            t,
                        ),
                        _PROMPT,
                        width,
                    )
                ]
            elif r < 0.90:
                prompt_tps, gen_tps = rng.uniform(1000, 20000), rng.uniform(100, 900)
                running, waiting = rng.randrange(64), rng.randrange(8)
                kv, hit = rng.uniform(0, 1), rng.uniform(0, 1)
                stats = stats_message(running, waiting, kv, hit, prompt_tps, gen_tps)
                block = [log_line(API, "INFO", "loggers.py:123", stats, t)]
            elif r < 0.9995:
                block = [
                    _fit(
                        log_line(ENGINE, "INFO", "scheduler.py:512", "Added request {pad} to the waiting queue.", t),
                        f"chatcmpl-{rng.getrandbits(64):016x}",
                        width,
                    )
                ]
            elif r < 0.99975:
                # the older logger's shape, without brackets (vllm/logger.py `_FORMAT` "%(levelname)s %(asctime)s
                # %(filename)s:%(lineno)d] %(message)s" in the V0 releases): log_line writes the current one
                block = [
                    f"WARNING {t} scheduler.py:1491] Sequence group cmpl-{rng.getrandbits(32):08x} is preempted by "
                    f"PreemptionMode.RECOMPUTE mode because there is not enough KV cache space."
                ]
                counts["preemption"] += 1
            else:
                block = [
                    log_line(
                        API,
                        "ERROR",
                        "serving_chat.py:222",
                        "ValueError: This model's maximum context length is 1048576 tokens. However, you requested "
                        "1100000 tokens.",
                        t,
                    )
                ]
                counts["context_rejected"] += 1
            if shape == "cri":
                block = [f"2026-11-20T10:10:07.{n % 1_000_000_000:09d}Z stdout F {b}" for b in block]
            out.extend(block)
            n += len(block)
            if len(out) >= 10_000:
                fh.write("\n".join(out) + "\n")
                out = []
        if out:
            fh.write("\n".join(out) + "\n")
    counts["lines"] = n
    return counts


def ours(path: str, fmt: str = "plain") -> tuple[float, float, dict[str, int]]:
    start, cpu = time.perf_counter(), time.process_time()
    t = LogTailer("bench", LogSource(path, fmt), None)
    t.poll()
    wall, used = time.perf_counter() - start, time.process_time() - cpu
    c = t.analyzer.counts
    return (
        wall,
        used,
        {
            "oom": c["oom"],
            "preemption": c["preemption"],
            "context_rejected": c["context_rejected"],
            "lines": t.health.lines_read,
        },
    )


def mtail(path: str) -> tuple[float, float, dict[str, int]]:
    binary = shutil.which("mtail")
    if binary is None:
        sys.exit("mtail is not installed: apt-get install mtail")
    progs = tempfile.mkdtemp()
    shutil.copy(PROG, progs)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    r = subprocess.run(
        [binary, "--progs", progs, "--logs", path, "--one_shot", "--one_shot_format", "json", "--logtostderr"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    data = json.loads(r.stdout)

    def value(name: str) -> int:
        return int(
            sum(p["Value"]["Value"] for p in data[name][0]["LabelValues"]) if data[name][0].get("LabelValues") else 0
        )

    return (
        wall,
        cpu,
        {
            "oom": value("vllm_oom_events_total"),
            "preemption": value("vllm_preemptions_total"),
            "context_rejected": value("vllm_context_rejected_total"),
        },
    )


def raw(path: str) -> float:
    start = time.perf_counter()
    n = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            n += chunk.count(b"\n")
    return time.perf_counter() - start


def main(lines: int = 500_000, repeats: int = 3, shapes: tuple[str, ...] = SHAPES) -> list[dict]:
    """Every shape (or those named): event counts asserted equal first, then paired runs (ours, mtail, raw) on the
    same file. Shapes not re-run keep their rows in results.json, marked with when they were measured."""
    rows = []
    for shape in shapes:
        d = tempfile.mkdtemp()
        path = os.path.join(d, "vllm.log")
        width = int(shape[:-1]) if shape.endswith("B") else 200
        n = min(lines, 150_000_000 // width)  # about 150 MB at most per file
        want = generate(path, n, shape=shape)
        size = os.path.getsize(path)
        fmt = "cri" if shape == "cri" else "plain"
        runs: dict[str, list[tuple[float, float]]] = {"ours": [], "mtail": [], "raw": []}
        ratios = []
        for _ in range(repeats):
            w, c, got = ours(path, fmt)
            assert got == want, f"{shape}: vllm-headroom counted {got}, the log has {want}"
            runs["ours"].append((w, c))
            mw, mc, got = mtail(path)
            assert got == {k: want[k] for k in ("oom", "preemption", "context_rejected")}, f"{shape}: mtail {got}"
            runs["mtail"].append((mw, mc))
            runs["raw"].append((raw(path), 0.0))
            ratios.append(mw / w)
        row = {
            "shape": shape,
            "lines": want["lines"],
            "bytes": size,
            "bytes_per_line": size / want["lines"],
            "events": {k: want[k] for k in ("oom", "preemption", "context_rejected")},
        }
        for name, values in runs.items():
            wall = statistics.median(v[0] for v in values)
            row[f"{name}_wall_s"] = wall
            row[f"{name}_cpu_s"] = statistics.median(v[1] for v in values)
            row[f"{name}_lines_per_s"] = want["lines"] / wall
        row.update(ratio=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios), runs=repeats)
        row["measured_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
        rows.append(row)
        print(
            f"{shape:>9}: {want['lines']:>8} lines, {row['bytes_per_line']:5.0f} B/line; ours "
            f"{row['ours_lines_per_s'] / 1e3:7.0f} k lines/s, mtail {row['mtail_lines_per_s'] / 1e3:7.0f} k lines/s, "
            f"raw {row['raw_lines_per_s'] / 1e3:7.0f} k; ours/mtail {row['ratio']:.2f}x "
            f"({row['ratio_min']:.2f}-{row['ratio_max']:.2f})",
            flush=True,
        )
        shutil.rmtree(d)
    if shapes != SHAPES:  # a partial re-run: the other shapes' rows stay as they were
        old = json.loads(RESULTS.read_text()).get("logs", {}).get("rows", []) if RESULTS.exists() else []
        fresh = {x["shape"]: x for x in rows}
        rows = [fresh.pop(x["shape"], x) for x in old if x["shape"] in SHAPES] + list(fresh.values())
        rows.sort(key=lambda x: SHAPES.index(x["shape"]))
    record("logs", rows)
    return rows


if __name__ == "__main__":
    # python -m benchmarks.bench_logs [LINES [SHAPE,SHAPE...]]
    picked = tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else SHAPES
    unknown = sorted(set(picked) - set(SHAPES))
    if unknown:
        sys.exit(f"unknown shape(s) {', '.join(unknown)}; expected some of {', '.join(SHAPES)}")
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500_000, shapes=picked)
