"""`make bench`: every benchmark in one run, then docs/performance.md from their results."""

from __future__ import annotations

import json
import platform
import sys
import time

from benchmarks import bench_latency, bench_logs, bench_overhead, bench_parse, bench_serve
from benchmarks.common import RESULTS, ROOT

TARGETS = {
    "parse": "≥ 10× prometheus_client, same samples",
    "logs": "≥ mtail's lines/s, same event counts",
    "serve": "≥ 0.5× node_exporter's req/s",
    "overhead": "≤ 1 % of one core, ≤ 60 MB RSS",
    "latency": "p99 ≤ 1 s",
}


def write_doc() -> str:
    r = json.loads(RESULTS.read_text())
    out = ["# Performance", "",
           "Measured by `make bench` (`python -m benchmarks.run`) on this project's CI-sized machine: "
           f"{r['parse']['cpus']} cores, shared and noisy, so every figure is a median of repeated runs and every "
           "comparison is a ratio against the peer measured in the same run on the same input.", ""]
    p = r["parse"]["rows"]
    out += ["## Exposition parsing (vs `prometheus_client.parser`)", "",
            "vLLM payloads made with prometheus_client as vLLM makes them (full histograms); samples compared "
            "before timing.", "",
            "| DP engines | bytes | samples | ours ms | prometheus_client ms | speed-up |", "| --- | --- | --- | --- | --- | --- |"]
    out += [f"| {x['engines']} | {x['bytes']} | {x['samples']} | {x['ours_ms']:.2f} | {x['prometheus_client_ms']:.2f} | "
            f"{x['speedup']:.1f}× |" for x in p]
    lg = {x["tool"]: x for x in r["logs"]["rows"]}
    ratio = lg["ratio_ours_over_mtail"]["value"]
    out += ["", f"## Log scanning (vs Debian's mtail `--one_shot`), {lg['ratio_ours_over_mtail']['lines']:,} lines", "",
            "Tailer + stage machine against an mtail program counting the same events "
            "(`benchmarks/vllm_log.mtail`); counts asserted equal first.", "",
            "| reader | wall s | CPU s | lines/s |", "| --- | --- | --- | --- |"]
    out += [f"| {k} | {lg[k]['wall_s']:.2f} | {lg[k]['cpu_s']:.2f} | {lg[k]['lines_per_s']:,.0f} |"
            for k in ("ours", "mtail", "raw")]
    out += ["", f"ours / mtail: **{ratio:.2f}×** (raw = reading the file and counting newlines: the ceiling)."]
    sv = {x["server"]: x for x in r["serve"]["rows"]}
    out += ["", "## Serving /metrics under wrk (vs prometheus-node-exporter)", "",
            "16 servers × 2 DP engines with re-exported histograms, 8 GPUs; `wrk -t2 -c8 -d10s`, 3 interleaved runs.", "",
            "| server | body bytes | req/s | p50 ms | p99 ms |", "| --- | --- | --- | --- | --- |"]
    out += [f"| {k} | {sv[k]['bytes']} | {sv[k]['req_per_s']:.1f} | {sv[k]['p50_ms']:.1f} | {sv[k]['p99_ms']:.1f} |"
            for k in ("ours", "node_exporter")]
    out += ["", f"ours / node_exporter req/s: **{sv['ratio_ours_over_node_exporter']['value']:.2f}**."]
    o = r["overhead"]["rows"][0]
    out += ["", "## Overhead of `serve`", "",
            f"8 fake GPUs sampled at 10 Hz, 16 simulated servers scraped every 5 s, 16 logs growing, scraped by a "
            f"client every 15 s, {o['duration_s']:.0f} s after a warm-up:", "",
            f"- CPU: **{o['cpu_seconds_per_minute']:.2f} s per minute = {o['core_percent']:.2f} % of one core**",
            f"- peak RSS (VmHWM): **{o['peak_rss_mb']:.1f} MB**"]
    la = r["latency"]["rows"][0]
    out += ["", "## OOM line to counter", "",
            f"{la['trials']} trials: an OOM line appended to a followed log until `oom_events_total` shows it on "
            f"/metrics: p50 **{la['p50_s'] * 1e3:.0f} ms**, p99 **{la['p99_s'] * 1e3:.0f} ms**, max "
            f"{la['max_s'] * 1e3:.0f} ms."]
    if "soak" in r:
        so = r["soak"]["rows"][0]
        out += ["", "## Memory soak (`make soak`)", "",
                f"{so['duration_s']:.0f} s, 16 servers whose DP engines come back renumbered every 20 s, logs "
                f"rotated every 30 s, scraped every 2 s: RSS {so['rss_first_minute_mb']:.1f} MB in the first "
                f"minute, {so['rss_last_minute_mb']:.1f} MB in the last, peak {so['peak_rss_mb']:.1f} MB."]
    met = {
        "parse": min(x["speedup"] for x in p) >= 10,
        "logs": ratio >= 1.0,
        "serve": sv["ratio_ours_over_node_exporter"]["value"] >= 0.5,
        "overhead": o["core_percent"] <= 1.0 and o["peak_rss_mb"] <= 60,
        "latency": la["p99_s"] <= 1.0,
    }
    out += ["", "## Targets", "", "| benchmark | target | this run |", "| --- | --- | --- |"]
    out += [f"| {k} | {v} | {'met' if met[k] else '**missed**'} |" for k, v in TARGETS.items()]
    out += ["", "## What profiling changed (py-spy, cProfile; before → after, same benchmark)", "",
            "- Parsing 4.5× → ~9×: one regex pass over the whole payload for the plain `name{labels} value` shape "
            "(the careful line scanner stays as the fallback for escapes, exemplars and bad lines), label blocks and "
            "`key=\"value\"` pairs parsed once per payload, samples as tuples. The remaining gap to 10× is the "
            "per-sample Python work (one tuple and one float per sample); the 10× target is still missed.",
            "- Log scanning 0.31× → 1.08× mtail: request logs (users' prompts), access lines and the stats line "
            "take fast paths; one prefilter search decides whether a line can matter; one anchored match reads "
            "vLLM's prefix; plain logs are decoded once per 1 MiB chunk.",
            "- Serving 0.15× → 1.14× node_exporter: our own text writer (byte-identical to `generate_latest`, "
            "which validated every label name of every sample), vLLM's re-exported series rendered once per "
            "scrape instead of once per /metrics answer, and the unused inter-token and e2e latency histograms "
            "no longer re-exported.",
            "- Overhead 1.97 % → 1.12 % of a core: state saved every 10 s instead of every second (offsets and "
            "counters are saved together, so an older save only re-reads), and a quiet log costs a `stat` on the "
            "event loop instead of a thread hand-off and a read. The rest is mostly aiohttp's client doing 3.2 "
            "scrapes per second; ≤ 1 % is still missed by a little."]
    out += ["", f"_Last run: {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}._", ""]
    text = "\n".join(out)
    (ROOT / "docs" / "performance.md").write_text(text)
    return text


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--doc-only":
        print(write_doc())
        return
    bench_parse.main()
    bench_logs.main()
    bench_serve.main()
    bench_overhead.main()
    bench_latency.main()
    print(write_doc())


if __name__ == "__main__":
    main()
