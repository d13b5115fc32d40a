"""`vllm-headroom report` end to end: a week of history backfilled into a real Prometheus with
`promtool tsdb create-blocks-from openmetrics`, the report made from its HTTP API, and the page rendered
in headless Chromium (no console errors; a screenshot that shows the verdict table)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import need, start_prometheus

STEP = 300
DAY = 86400


def backfill_text(end: int) -> str:
    start = end - 7 * DAY
    times = list(range(start, end + 1, STEP))
    fams: dict[str, tuple[str, list[str]]] = {}

    def add(name: str, typ: str, labels: str, fn) -> None:
        lines = fams.setdefault(name, (typ, []))[1]
        sample = name + ("_total" if typ == "counter" else "")
        for t in times:
            v = fn(t)
            if v is not None:
                lines.append(f"{sample}{{{labels}}} {v} {t}")

    base = 'job="vllm-headroom",instance="node-1:9478"'
    for server, verdict, reason in (("steady", "tune_and_keep", "stable_headroom"),
                                    ("oomy", "migrate_or_scale", "runtime_oom")):
        s = f'{base},server="{server}"'
        add("vllm_headroom_target_up", "gauge", s, lambda t: 1)
        daily = (lambda t: 0.55 + 0.2 * math.sin(2 * math.pi * (t % DAY) / DAY)) if server == "steady" else \
            (lambda t: max(0.02, 0.4 - 0.35 * ((t - start) / (7 * DAY))))
        add("server:vllm_headroom_kv_cache_headroom_ratio:min", "gauge", s, daily)
        add("server:vllm_headroom_requests_running:sum", "gauge", s, lambda t, d=daily: round(60 * (1 - d(t))))
        add("server:vllm_headroom_prefix_cache_hit:ratio_increase1d", "gauge", s, lambda t: 0.6)
        add("server:vllm_headroom_capacity_verdict:7d", "gauge", f'{s},verdict="{verdict}",reason="{reason}"',
            lambda t: 1)
        oom_at = start + 5 * DAY + 3600
        add("vllm_headroom_oom_events", "counter", f'{s},stage="prefill",phase="runtime"',
            lambda t: (1 if t >= oom_at else 0) if server == "oomy" else 0)
        add("vllm_headroom_log_events", "counter", f'{s},event="engine_ready"',
            lambda t: 1 + (1 if server == "oomy" and t >= oom_at + 600 else 0))
        cfg = ('tensor_parallel_size="8",pipeline_parallel_size="1",data_parallel_size="2",max_model_len="1048576",'
               'gpu_memory_utilization="0.92",enable_prefix_caching="true"')
        if server == "steady":
            cfg += ',max_num_seqs="64"'
        add("vllm_headroom_vllm_config_info", "gauge", f"{s},{cfg}", lambda t: 1)
    add("vllm_headroom_environment_info", "gauge", base + ',driver_version="580.65.06",cuda_driver_version="13.0",'
        'gpu_model="NVIDIA GB300",gpu_count="8",vendor="nvidia"', lambda t: 1)
    for check in ("driver_min_version", "gpu_count"):
        add("vllm_headroom_environment_check", "gauge", f'{base},check="{check}"', lambda t: 1)
    add("gpu:vllm_headroom_gpu_memory_headroom_ratio:min", "gauge", f'{base},gpu="0"', lambda t: 0.12)
    add("vllm_headroom_gpu_memory_peak_used_bytes", "gauge", f'{base},gpu="0",uuid="GPU-0",gpu_model="NVIDIA GB300",'
        'vendor="nvidia"', lambda t: 250 * 2**30)
    out = []
    for name, (typ, lines) in fams.items():
        out.append(f"# TYPE {name} {typ}")
        out.extend(lines)
    return "\n".join(out) + "\n# EOF\n"


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    promtool = need("promtool")
    d = tmp_path_factory.mktemp("week")
    end = (int(time.time()) // 3600 - 3) * 3600
    (d / "week.om").write_text(backfill_text(end))
    data = d / "data"
    r = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(d / "week.om"), str(data)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    prom = start_prometheus(d, "global: {scrape_interval: 1m}\n")
    yield prom, end, d
    prom.proc.terminate()
    prom.proc.wait(10)


def test_report_from_a_backfilled_week(week):
    prom, end, d = week
    out = d / "report.html"
    r = subprocess.run([sys.executable, "-m", "exporter", "report", "--prometheus", prom.url, "--since", "7d",
                        "--out", str(out), "--end", str(end)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = json.loads((d / "report.json").read_text())
    by = {s["server"]: s for s in data["servers"]}
    assert (by["steady"]["verdict"], by["steady"]["reason"]) == ("tune_and_keep", "stable_headroom")
    assert (by["oomy"]["verdict"], by["oomy"]["reason"]) == ("migrate_or_scale", "runtime_oom")
    assert [(e["stage"], e["phase"]) for e in by["oomy"]["oom_events"]] == [("prefill", "runtime")]
    assert by["steady"]["oom_events"] == []
    assert 7 <= len(by["steady"]["headroom_per_day"]) <= 8
    day = by["steady"]["headroom_per_day"][2]
    assert day["min"] <= day["p05"] <= day["p50"] and 0.3 < day["min"] < 0.4
    assert by["oomy"]["headroom_min"] < 0.1 and by["steady"]["stable_concurrency"] > 0
    ev = {x["item"]: x for x in by["oomy"]["evidence"]}
    assert ev["driver version"]["found"] and ev["parallel sizes (TP / PP / DP)"]["value"] == "8/1/2"
    assert not ev["concurrency limit (max_num_seqs)"]["found"]  # the log of that server never said
    assert ev["recovery events (engine restarts)"]["found"]
    assert {x["item"]: x for x in by["steady"]["evidence"]}["concurrency limit (max_num_seqs)"]["found"]
    page = out.read_text()
    assert page.count("<svg") >= 6 and "Migrate or scale" in page and "<script" not in page


def test_report_renders_in_chromium_without_console_errors(week):
    prom, end, d = week
    browser = shutil.which("chromium")
    if browser is None:
        pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")
    out = d / "page.html"
    subprocess.run([sys.executable, "-m", "exporter", "report", "--prometheus", prom.url, "--out", str(out),
                    "--end", str(end)], check=True, capture_output=True, timeout=120)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={d / 'chrome'}", "--enable-logging=stderr", "--v=0"]
    shot = d / "shot.png"
    r = subprocess.run([browser, *flags, "--window-size=1200,1400", f"--screenshot={shot}", out.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000, r.stderr[-2000:]
    console = [line for line in r.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    dom = subprocess.run([browser, *flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    assert 'id="verdicts"' in dom.stdout and "Tune and keep" in dom.stdout


def test_report_says_clearly_when_prometheus_cannot_answer(tmp_path):
    from tests.conftest import free_port

    r = subprocess.run([sys.executable, "-m", "exporter", "report", "--prometheus", f"http://127.0.0.1:{free_port()}",
                        "--out", str(tmp_path / "r.html")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "vllm-headroom report: http://127.0.0.1:" in r.stderr
    assert not (tmp_path / "r.html").exists()
    r = subprocess.run([sys.executable, "-m", "exporter", "report", "--prometheus", "http://127.0.0.1:1", "--since",
                        "a week"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--since: expected a duration such as 7d" in r.stderr
