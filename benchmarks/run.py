"""`make bench`: every benchmark in one run, then a `summary` in benchmarks/results.json and docs/performance.md
from the rows behind it."""

from __future__ import annotations

import json
import os
import platform
import sys
import time

from benchmarks import bench_latency, bench_logs, bench_overhead, bench_parse, bench_serve
from benchmarks.common import RESULTS, ROOT

# (summary key, target, met?) -- issue 17's figures
TARGETS = {
    "parse_speedup": ("≥ 10× prometheus_client (cold, 1-128 engines, worst)", lambda v: v >= 10),
    "parse_speedup_with_escapes": ("≥ 8× with escapes / exemplars / CRLF (worst)", lambda v: v >= 8),
    "log_speedup_vs_mtail": ("≥ 3× mtail's lines/s on every shape (worst)", lambda v: v >= 3),
    "serve_ratio_vs_node_exporter": ("≥ 1× node_exporter's req/s, Prometheus' headers", lambda v: v >= 1),
    "serve_ratio_vs_node_exporter_plain": ("≥ 1× node_exporter's req/s, plain requests", lambda v: v >= 1),
    "overhead_core_percent": ("≤ 1 % of one core (16 servers, 8 GPUs, 16 logs)", lambda v: v <= 1),
    "overhead_core_percent_per_server": ("≤ 0.02 % of a core per added server", lambda v: v <= 0.02),
    "rss_mb": ("≤ 60 MB peak RSS (16 servers)", lambda v: v <= 60),
    "oom_to_counter_p99_s": ("p99 ≤ 1 s", lambda v: v <= 1),
}


def summarize(r: dict) -> dict:
    parse = r["parse"]["rows"]
    logs = r["logs"]["rows"]
    serve = {(x["headers"], x["server"]): x for x in r["serve"]["rows"]}
    over = {x["servers"]: x for x in r["overhead"]["rows"] if x.get("log_mix", "vllm") == "vllm"}
    return {
        "parse_speedup": min(x["speedup"] for x in parse if x["case"] == "cold"),
        "parse_speedup_with_escapes": min(x["speedup"] for x in parse if x["case"] in ("escape", "exemplar", "crlf")),
        "parse_speedup_steady": min(x["speedup"] for x in parse if x["case"] == "steady"),
        "log_speedup_vs_mtail": min(x["ratio"] for x in logs),
        "log_speedup_vs_mtail_worst_shape": min(logs, key=lambda x: x["ratio"])["shape"],
        "serve_ratio_vs_node_exporter": serve[("prometheus", "ratio_ours_over_node_exporter")]["value"],
        "serve_ratio_vs_node_exporter_plain": serve[("plain", "ratio_ours_over_node_exporter")]["value"],
        "overhead_core_percent": over[16]["core_percent"],
        "overhead_core_percent_per_server": over["slope"]["core_percent_per_server"],
        "rss_mb": over[16]["peak_rss_mb"],
        "oom_to_counter_p99_s": r["latency"]["rows"][0]["p99_s"],
    }


def _load(r: dict, section: str) -> str:
    """How busy the machine was, and when: a section re-run on its own (`python -m benchmarks.bench_logs`) says so."""
    when = r[section].get("measured_at", "?")
    return (
        f"load average {r[section].get('loadavg_1m', float('nan')):.1f} on {r[section]['cpus']} cores; measured {when}"
    )


def write_doc() -> str:
    r = json.loads(RESULTS.read_text())
    s = r["summary"]
    out = [
        "# Performance",
        "",
        "Measured by `make bench` (`python -m benchmarks.run`; results in `benchmarks/results.json`, whose "
        "`summary` holds the figures below) on this project's CI-sized machine: "
        f"{r['parse']['cpus']} cores, shared with other jobs while it ran (the load average is given per "
        "section), so absolute times are noisy: every comparison is a ratio from paired runs (ours and the peer "
        "on the same input, one right after the other), the median of at least three pairs, with the spread.",
        "",
        "## Targets (issue 17)",
        "",
        "| figure | target | this run | |",
        "| --- | --- | --- | --- |",
    ]
    for key, (target, ok) in TARGETS.items():
        v = s[key]
        shown = f"{v:.2f}" if key != "overhead_core_percent_per_server" else f"{v:.3f}"
        out.append(f"| `{key}` | {target} | {shown} | {'met' if ok(v) else '**missed**'} |")
    p = r["parse"]["rows"]
    out += [
        "",
        "## Exposition parsing (vs `prometheus_client.parser`)",
        "",
        f"vLLM payloads as vLLM makes them (prometheus_client, full histograms); samples compared before timing; "
        f"each side the fastest of 3 tries with the GC off, 5 paired runs (3 at 128 engines); {_load(r, 'parse')}. "
        "`cold`: a fresh parse; `steady`: label blocks kept across scrapes, as the daemon does per server; "
        "`escape`/`exemplar`/`crlf`: one escaped label value, one exemplar, or CRLF line ends (cold; those "
        "lines fall back to the careful scanner one by one, the rest stays on the fast path).",
        "",
        "| case | DP engines | bytes | samples | ours ms | prometheus_client ms | speed-up (spread) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    out += [
        f"| {x['case']} | {x['engines']} | {x['bytes']} | {x['samples']} | {x['ours_ms']:.2f} | "
        f"{x['prometheus_client_ms']:.2f} | {x['speedup']:.1f}× ({x['speedup_min']:.1f}-{x['speedup_max']:.1f}) |"
        for x in p
    ]
    lg = r["logs"]["rows"]
    out += [
        "",
        "## Log scanning (vs Debian's mtail `--one_shot`)",
        "",
        "Tailer + stage machine against an mtail program counting the same events (`benchmarks/vllm_log.mtail`); "
        "event counts asserted equal for every shape and run before any speed counts; 3 paired runs; "
        f"{_load(r, 'logs')}. Wall-clock lines/s (mtail uses several threads; ours one); raw = reading the file "
        "and counting newlines.",
        "",
        "| shape | lines | bytes/line | ours lines/s | mtail lines/s | raw lines/s | ours CPU s | mtail CPU s | "
        "ours / mtail (spread) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    out += [
        f"| {x['shape']} | {x['lines']:,} | {x['bytes_per_line']:.0f} | {x['ours_lines_per_s']:,.0f} | "
        f"{x['mtail_lines_per_s']:,.0f} | {x['raw_lines_per_s']:,.0f} | {x['ours_cpu_s']:.2f} | "
        f"{x['mtail_cpu_s']:.2f} | **{x['ratio']:.2f}×** ({x['ratio_min']:.2f}-{x['ratio_max']:.2f}) |"
        for x in lg
    ]
    sv = r["serve"]["rows"]
    out += [
        "",
        "## Serving /metrics under wrk (vs prometheus-node-exporter)",
        "",
        "`vllm-headroom serve` with live state: scraping 16 simulated vLLM servers (2 DP engines each, every 5 s), "
        "following their 16 logs (20 lines/s each) and sampling 8 fake GPUs at 10 Hz while `wrk -t2 -c8 -d10s` "
        "loads it; node_exporter collects on every request. `prometheus`: the headers Prometheus 3.x sends "
        "(OpenMetrics preferred, `Accept-Encoding: gzip`); `plain`: no Accept header, no compression. 3 paired, "
        f"interleaved runs per shape; {_load(r, 'serve')}.",
        "",
        "| headers | server | content type | bytes on the wire | body bytes | req/s | p50 ms | p99 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for x in sv:
        if x["server"] == "ratio_ours_over_node_exporter":
            out.append(
                f"| {x['headers']} | **ours / node_exporter** | | | | **{x['value']:.2f}×** "
                f"({x['min']:.2f}-{x['max']:.2f}) | | |"
            )
        else:
            out.append(
                f"| {x['headers']} | {x['server']} | {x['content_type']} | {x['wire_bytes']} | {x['body_bytes']} "
                f"| {x['req_per_s']:.1f} | {x['p50_ms']:.1f} | {x['p99_ms']:.1f} |"
            )
    ov = r["overhead"]["rows"]
    slope = next(x for x in ov if x["servers"] == "slope")
    out += [
        "",
        "## Overhead of `serve`",
        "",
        "8 fake GPUs sampled at 10 Hz, N simulated servers scraped every 5 s, N logs growing at 20 lines/s, "
        "/metrics scraped every 15 s with Prometheus' headers; CPU time of the `serve` process from /proc (so the "
        f"machine's other load does not count in it) over {ov[0]['duration_s']:.0f} s after a warm-up; 3 "
        f"interleaved runs per N; {_load(r, 'overhead')}. Log mix `vllm`: what a busy vLLM server writes, an "
        "access line per answered request and each DP engine's stats line every 10 s (VLLM_LOG_STATS_INTERVAL's "
        "default, vllm/envs.py); `stats`: a stress mix, every other line a stats line (50 times vLLM's rate, each "
        "read by the stage machine), the mix of the rounds before.",
        "",
        "| servers | log mix | % of one core (spread) | peak RSS MB |",
        "| --- | --- | --- | --- |",
    ]
    out += [
        f"| {x['servers']} | {x.get('log_mix', 'stats')} | {x['core_percent']:.2f} "
        f"({x['core_percent_min']:.2f}-{x['core_percent_max']:.2f}) | {x['peak_rss_mb']:.1f} |"
        for x in ov
        if x["servers"] != "slope"
    ]
    out += [
        "",
        f"Per added server: **{slope['core_percent_per_server']:.3f} % of a core** (`vllm` mix; least squares over "
        f"1, 16 and 64; the segments 1→16 and 16→64 give {slope['segments'][0]:.3f} and {slope['segments'][1]:.3f}: "
        "linear within the noise).",
    ]
    la = r["latency"]["rows"][0]
    out += [
        "",
        "## OOM line to counter",
        "",
        f"An OOM line appended to a followed log until `oom_events_total` shows it on /metrics, {la['trials']} "
        f"trials per run, {la['runs']} runs: p50 **{la['p50_s'] * 1e3:.0f} ms**, p99 **{la['p99_s'] * 1e3:.0f} ms** "
        f"(runs {la['p99_min_s'] * 1e3:.0f}-{la['p99_max_s'] * 1e3:.0f} ms), max {la['max_s'] * 1e3:.0f} ms. Each "
        "line is written at a random phase of the daemon's 0.5 s log poll (0.25 s before issue 17's overhead "
        "round), so the figure is the poll interval plus the work, as a real failure sees it (a fixed pause once "
        "reported one phase of the poll: 208 ms).",
    ]
    if "soak" in r:
        so = r["soak"]["rows"][0]
        out += [
            "",
            "## Memory soak (`make soak`)",
            "",
            f"{so['duration_s']:.0f} s, 16 servers whose DP engines come back renumbered every 20 s, logs "
            f"rotated every 30 s, scraped every 2 s: RSS {so['rss_first_minute_mb']:.1f} MB in the first "
            f"minute, {so['rss_last_minute_mb']:.1f} MB in the last, peak {so['peak_rss_mb']:.1f} MB "
            f"(measured {r['soak']['measured_at']}).",
        ]
    notes = ROOT / "benchmarks" / "performance_notes.md"
    if notes.exists():
        out += ["", notes.read_text().rstrip()]
    out += ["", f"_Last run: {time.strftime('%Y-%m-%d')}, Python {platform.python_version()}._", ""]
    text = "\n".join(out)
    (ROOT / "docs" / "performance.md").write_text(text)
    return text


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--doc-only":
        print(write_doc())
        return
    print(f"load average at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    bench_parse.main()
    bench_logs.main()
    bench_serve.main()
    bench_overhead.main()
    bench_latency.main()
    r = json.loads(RESULTS.read_text())
    r["summary"] = summarize(r)
    RESULTS.write_text(json.dumps(r, indent=2) + "\n")
    print(json.dumps(r["summary"], indent=1))
    print(write_doc())


if __name__ == "__main__":
    main()
