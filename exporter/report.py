"""`vllm-headroom report`: the weekly capacity review as a document, from Prometheus's HTTP API.

Per server: the verdict (tune and keep / monitor and operate / migrate or scale) with its reason and the
evidence behind it, headroom minima and percentiles per day, OOM events by stage with their times, the
prefix-cache hit ratio trend, concurrency against KV-cache headroom (the stable boundary), environment
checks, and the guide's evidence checklist marked found or missing. One self-contained HTML page (inline
SVG plots, readable in print) and the same data as JSON.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import math
from typing import Any

from exporter import catalog
from exporter.duration import prometheus_seconds
from exporter.generate.thresholds import Thresholds
from exporter.generate.weekly import VERDICT_WORDS, VERDICTS
from exporter.promapi import PrometheusAPI

# verdict and reason names come from the rules that record them; the words a reader sees are kept with them
VERDICT_TEXT = dict(VERDICT_WORDS)
REASON_TEXT = {reason: text for _verdict, reason, text in VERDICTS}


def parse_since(text: str) -> float:
    return prometheus_seconds(text)


def _points(series: dict) -> list[tuple[float, float]]:
    return [(float(t), float(v)) for t, v in series["values"] if v not in ("NaN", "+Inf", "-Inf")]


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(math.ceil(q * len(s))) - 1))]


def _per_day(points: list[tuple[float, float]]) -> list[dict]:
    days: dict[str, list[float]] = {}
    for t, v in points:
        days.setdefault(dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d"), []).append(v)
    return [
        {"day": d, "min": min(v), "p05": _quantile(v, 0.05), "p50": _quantile(v, 0.5)} for d, v in sorted(days.items())
    ]


def collect(prom: PrometheusAPI, since_s: float, end: float, t: Thresholds | None = None) -> dict[str, Any]:
    """Everything the page shows, as data."""
    t = t or Thresholds()
    start = end - since_s
    step = max(60.0, since_s / 2000)
    window = f"{int(since_s)}s"
    up = prom.query(f"last_over_time({catalog.series('target_up')}[{window}])", end)
    servers = sorted({r["metric"]["server"] for r in up})
    # where each server runs and what it does: `cluster` (config or external label) and `role` (prefill / decode)
    placement = {r["metric"]["server"]: (r["metric"].get("cluster", ""), r["metric"].get("role", "")) for r in up}
    env_info = prom.query(f"last_over_time({catalog.series('environment_info')}[{window}])", end)
    checks = {
        r["metric"]["check"]: float(r["value"][1])
        for r in prom.query(f"min by (check) (last_over_time({catalog.series('environment_check')}[{window}]))", end)
    }
    gpu_peak = prom.query(f"max(max_over_time({catalog.series('gpu_memory_peak_used_bytes')}[{window}]))", end)
    gpu_min = prom.query(f"min(min_over_time(gpu:vllm_headroom_gpu_memory_headroom_ratio:min[{window}]))", end)
    info = env_info[0]["metric"] if env_info else {}
    report: dict[str, Any] = {
        "prometheus": prom.url,
        "start": start,
        "end": end,
        "since_s": since_s,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": {
            "info": {k: v for k, v in info.items() if k not in ("__name__", "job", "instance")},
            "checks": checks,
            "gpu_peak_used_bytes": float(gpu_peak[0]["value"][1]) if gpu_peak else None,
            "gpu_headroom_min_ratio": float(gpu_min[0]["value"][1]) if gpu_min else None,
        },
        "servers": [],
    }
    for name in servers:
        sel = f'server="{name}"'
        recent = prom.range(f"server:vllm_headroom_capacity_verdict:7d{{{sel}}}", end - 6 * 3600, end, 900)
        verdict = sorted(recent, key=lambda r: float(r["values"][-1][0]))[-1:]  # the newest verdict only
        head = prom.range(f"server:vllm_headroom_kv_cache_headroom_ratio:min{{{sel}}}", start, end, step)
        running = prom.range(f"server:vllm_headroom_requests_running:sum{{{sel}}}", start, end, step)
        hit = prom.range(f"{t.hit_ratio_baseline}{{{sel}}}", start, end, max(step, 3600))
        span = int(max(3 * step, 3600))  # several scrapes in each window, or `increase` sees one sample
        ooms = prom.range(
            f"sum by (stage, phase) (increase({catalog.series('oom_events')}{{{sel}}}[{span}s])) > 0", start, end, step
        )
        cfg = prom.query(f"last_over_time({catalog.series('vllm_config_info')}{{{sel}}}[{window}])", end)
        restarts = prom.query(
            f'sum(increase({catalog.series("log_events")}{{{sel},event="engine_ready"}}[{window}]))', end
        )
        head_pts = _points(head[0]) if head else []
        run_pts = dict(_points(running[0])) if running else {}
        pairs = [(run_pts[tm], h) for tm, h in head_pts if tm in run_pts]
        stable = [c for c, h in pairs if h >= t.kv_headroom_warning_ratio]
        events = []
        for s in ooms:
            last = None
            for tm, v in _points(s):
                if last is None or tm - last > span + step:  # one event shows in every window that holds it
                    events.append(
                        {
                            "time": dt.datetime.fromtimestamp(tm, dt.timezone.utc).isoformat(timespec="minutes"),
                            "stage": s["metric"].get("stage"),
                            "phase": s["metric"].get("phase"),
                            "count": max(1, round(v)),
                        }
                    )  # increase() extrapolates: 1.26 is one
                last = tm
        events.sort(key=lambda e: e["time"])
        config = {
            k: v
            for k, v in (cfg[0]["metric"] if cfg else {}).items()
            if k not in ("__name__", "job", "instance", "server") and v
        }
        v = verdict[0]["metric"] if verdict else {}
        entry = {
            "server": name,
            "cluster": placement[name][0],
            "role": placement[name][1],
            "verdict": v.get("verdict"),
            "reason": v.get("reason"),
            "headroom_per_day": _per_day(head_pts),
            "headroom_min": min((h for _, h in head_pts), default=None),
            "oom_events": events,
            "hit_ratio_trend": [(tm, h) for tm, h in (_points(hit[0]) if hit else [])],
            "concurrency_vs_headroom": pairs,
            "stable_concurrency": max(stable) if stable else None,
            "config": config,
            "restarts": float(restarts[0]["value"][1]) if restarts else 0.0,
        }
        entry["evidence"] = evidence(report["environment"], entry)
        report["servers"].append(entry)
    return report


def evidence(env: dict[str, Any], server: dict[str, Any]) -> list[dict[str, Any]]:
    """The guide's checklist: what the review needs on record, and whether the data had it."""
    info, cfg = env["info"], server["config"]
    items = [
        ("driver version", info.get("driver_version")),
        ("CUDA driver version", info.get("cuda_driver_version")),
        ("GPU model", info.get("gpu_model")),
        ("GPU count", info.get("gpu_count")),
        (
            "parallel sizes (TP / PP / DP)",
            "/".join(cfg.get(k, "?") for k in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"))
            if cfg.get("tensor_parallel_size")
            else None,
        ),
        ("context limit (max_model_len)", cfg.get("max_model_len")),
        ("concurrency limit (max_num_seqs)", cfg.get("max_num_seqs")),
        (
            "cache settings (prefix caching, gpu_memory_utilization)",
            ", ".join(f"{k}={cfg[k]}" for k in ("enable_prefix_caching", "gpu_memory_utilization") if k in cfg) or None,
        ),
        (
            "peak GPU memory",
            f"{env['gpu_peak_used_bytes'] / 2**30:.1f} GiB" if env.get("gpu_peak_used_bytes") else None,
        ),
        ("recovery events (engine restarts)", f"{server['restarts']:g}" if server["restarts"] else None),
    ]
    return [{"item": k, "found": v is not None and v != "", "value": v} for k, v in items]


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.find("<svg") :]


def plots(server: dict[str, Any], t: Thresholds) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    days = server["headroom_per_day"]
    if days:
        fig, ax = plt.subplots(figsize=(6.5, 2.4))
        x = range(len(days))
        ax.plot(x, [d["p50"] for d in days], marker="o", label="median")
        ax.plot(x, [d["p05"] for d in days], marker="o", label="p05")
        ax.plot(x, [d["min"] for d in days], marker="o", label="minimum")
        ax.axhline(t.kv_headroom_warning_ratio, color="orange", ls="--", lw=1, label="p05 line (with recurring OOMs)")
        ax.set_xticks(list(x), [d["day"][5:] for d in days])
        ax.set_ylim(0, 1)
        ax.set_ylabel("KV headroom")
        ax.legend(fontsize=7, ncol=5, loc="lower left")
        out["headroom"] = _svg(fig)
        plt.close(fig)
    pairs = server["concurrency_vs_headroom"]
    if pairs:
        fig, ax = plt.subplots(figsize=(6.5, 2.4))
        ax.scatter([c for c, _ in pairs], [h for _, h in pairs], s=4, alpha=0.5)
        ax.axhline(t.kv_headroom_warning_ratio, color="orange", ls="--", lw=1)
        if server["stable_concurrency"] is not None:
            ax.axvline(server["stable_concurrency"], color="green", ls=":", lw=1)
        ax.set_xlabel("running requests")
        ax.set_ylabel("KV headroom")
        ax.set_ylim(0, 1)
        out["concurrency"] = _svg(fig)
        plt.close(fig)
    trend = server["hit_ratio_trend"]
    if trend:
        fig, ax = plt.subplots(figsize=(6.5, 2.0))
        times = [dt.datetime.fromtimestamp(tm, dt.timezone.utc) for tm, _ in trend]
        ax.plot(times, [h for _, h in trend])  # type: ignore[arg-type]  # matplotlib converts datetimes itself
        ax.set_ylim(0, 1)
        ax.set_ylabel("prefix hit ratio (1 d)")
        fig.autofmt_xdate()
        out["hit"] = _svg(fig)
        plt.close(fig)
    return out


def render_html(report: dict[str, Any], t: Thresholds | None = None) -> str:
    t = t or Thresholds()
    e = html.escape
    start = dt.datetime.fromtimestamp(report["start"], dt.timezone.utc).strftime("%Y-%m-%d %H:%M")
    end = dt.datetime.fromtimestamp(report["end"], dt.timezone.utc).strftime("%Y-%m-%d %H:%M")

    def row(s: dict[str, Any]) -> str:
        low = "" if s["headroom_min"] is None else f"{s['headroom_min']:.0%}"
        stable = "" if s["stable_concurrency"] is None else f"{s['stable_concurrency']:g}"
        return (
            f"<tr class='{e(s['verdict'] or 'unknown')}'><td>{e(s['server'])}</td><td>{e(s.get('cluster', ''))}</td>"
            f"<td>{e(s.get('role', ''))}</td>"
            f"<td><b>{e(VERDICT_TEXT.get(s['verdict'] or '', 'no verdict yet'))}</b></td>"
            f"<td>{e(REASON_TEXT.get(s['reason'] or '', s['reason'] or ''))}</td><td>{low}</td>"
            f"<td>{len(s['oom_events'])}</td><td>{stable}</td></tr>"
        )

    rows = "".join(row(s) for s in report["servers"])
    env = report["environment"]
    checks = (
        "".join(
            f"<tr><td>{e(k)}</td><td>{'pass' if v else '<b>FAIL</b>'}</td></tr>"
            for k, v in sorted(env["checks"].items())
        )
        or "<tr><td colspan=2>no checks reported</td></tr>"
    )
    info = ", ".join(f"{e(k)}={e(str(v))}" for k, v in sorted(env["info"].items())) or "not reported"
    sections = []
    for s in report["servers"]:
        p = plots(s, t)
        oom = (
            "".join(
                f"<tr><td>{e(o['time'])}</td><td>{e(str(o['phase']))}</td><td>{e(str(o['stage']))}</td>"
                f"<td>{o['count']:g}</td></tr>"
                for o in s["oom_events"]
            )
            or "<tr><td colspan=4>none</td></tr>"
        )
        days = "".join(
            f"<tr><td>{d['day']}</td><td>{d['min']:.1%}</td><td>{d['p05']:.1%}</td><td>{d['p50']:.1%}</td></tr>"
            for d in s["headroom_per_day"]
        )
        ev = "".join(
            f"<tr><td>{e(x['item'])}</td><td>{'found' if x['found'] else '<b>missing</b>'}</td>"
            f"<td>{e(str(x['value'] or ''))}</td></tr>"
            for x in s["evidence"]
        )
        stable_text = "none" if s["stable_concurrency"] is None else f"{s['stable_concurrency']:g} running requests"
        sections.append(f"""
<section><h2>{e(s["server"])}: {e(VERDICT_TEXT.get(s["verdict"] or "", "no verdict yet"))}</h2>
<p>{e(REASON_TEXT.get(s["reason"] or "", ""))}</p>
<h3>KV-cache headroom per day</h3>{p.get("headroom", "")}
<table><tr><th>day</th><th>minimum</th><th>p05</th><th>median</th></tr>{days}</table>
<h3>Memory failures by stage</h3><table><tr><th>time (UTC)</th><th>phase</th><th>stage</th><th>count</th></tr>{oom}</table>
<h3>Concurrency against KV-cache headroom</h3>{p.get("concurrency", "")}
<p>Highest concurrency with headroom above the warning line ({t.kv_headroom_warning_ratio:.0%}):
{stable_text}</p>
<h3>Prefix-cache hit ratio</h3>{p.get("hit", "<p>no prefix-cache traffic</p>")}
<h3>Evidence checklist</h3><table><tr><th>item</th><th></th><th>value</th></tr>{ev}</table>
</section>""")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>vLLM capacity review {start} to {end}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #111; max-width: 60em; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1em; }}
th, td {{ border: 1px solid #999; padding: 0.25em 0.6em; text-align: left; font-size: 0.9em; }}
tr.migrate_or_scale td {{ background: #fde2e2; }} tr.monitor_and_operate td {{ background: #fff4d6; }}
tr.tune_and_keep td {{ background: #e3f6e3; }}
section {{ page-break-before: always; }} svg {{ max-width: 100%; height: auto; }}
@media print {{ body {{ margin: 0; }} }}
</style></head><body>
<h1>vLLM capacity review</h1>
<p>{start} to {end} UTC, from {e(report["prometheus"])}; generated {e(report["generated_at"])}.</p>
<h2>Verdicts</h2>
<table id="verdicts"><tr><th>server</th><th>cluster</th><th>role</th><th>verdict</th><th>why</th><th>KV headroom min</th><th>OOM events</th>
<th>stable concurrency</th></tr>{rows}</table>
<h2>Environment</h2><p>{info}</p>
<table><tr><th>check</th><th></th></tr>{checks}</table>
{"".join(sections)}
</body></html>
"""
