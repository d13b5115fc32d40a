"""`vllm-headroom report` end to end: a week of the simulator's history, backfilled into a real Prometheus
with `promtool tsdb create-blocks-from openmetrics` (and the recording rules with `... from rules`), the
report made from its HTTP API, and the page rendered in headless Chromium (no console errors; a
screenshot that shows the verdict table)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from exporter.generate import write_outputs
from exporter.generate.thresholds import Thresholds
from exporter.simulate.history import write_history
from tests.backfill import backfill_rules, blocks_from_openmetrics, passes_by_dependency
from tests.conftest import start_prometheus


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    """Simulator -> the daemon's collector at past times -> OpenMetrics -> blocks; then the recording rules and
    the weekly rules evaluated by that Prometheus and written back, pass by pass (tests/backfill.py)."""
    d = tmp_path_factory.mktemp("week")
    end = (int(time.time()) // 3600 - 3) * 3600
    facts = write_history(str(d / "week.om"), end, step=900)
    blocks_from_openmetrics(d / "week.om", d / "data")
    rules = d / "rules"
    # samples every 15 minutes: the fast prefix rates need a window holding two of them
    write_outputs(Thresholds(recording_interval="15m", weekly_interval="1h", prefix_fast_window="30m"), str(rules))
    groups = [
        g
        for name in ("vllm-headroom.recording.yaml", "vllm-headroom.weekly.yaml")
        for g in yaml.safe_load((rules / "alerts" / name).read_text())["groups"]
    ]
    # The history has a sample every 15 minutes and the weekly rules one an hour, each pass on its own
    # evaluation offset: look back an hour (a live Prometheus scrapes every 15 s and needs none of this).
    lookback = "--query.lookback-delta=61m"
    backfill_rules(d, passes_by_dependency(groups, d, "rules"), int(facts["start"]), end, lookback)
    prom = start_prometheus(d, "global: {scrape_interval: 1m}\n", lookback)
    yield prom, end, d, facts
    prom.proc.terminate()
    prom.proc.wait(10)


# the week fixture (a simulated week, backfilled pass by pass) counts against the first test using it
@pytest.mark.timeout(900)
def test_report_from_a_backfilled_week(week):
    prom, end, d, facts = week
    out = d / "report.html"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter",
            "report",
            "--prometheus",
            prom.url,
            "--since",
            "7d",
            "--out",
            str(out),
            "--end",
            str(end),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads((d / "report.json").read_text())
    by = {s["server"]: s for s in data["servers"]}
    assert sorted(by) == facts["servers"]
    assert {(s["cluster"], s["role"]) for s in by.values()} == {("", "both")}  # no cluster configured; role default
    assert (by["steady"]["verdict"], by["steady"]["reason"]) == ("tune_and_keep", "stable_headroom")
    # one runtime OOM: reduce, replay and watch (the guide), not scale at once
    assert (by["shrinking"]["verdict"], by["shrinking"]["reason"]) == ("monitor_and_operate", "runtime_oom")
    events = by["shrinking"]["oom_events"]
    assert [(e["stage"], e["phase"]) for e in events] == [("prefill", "runtime")]
    when = dt.datetime.fromisoformat(events[0]["time"]).timestamp()
    assert abs(when - facts["oom_at"]) <= 3600  # the failure shows where the simulator put it
    assert by["steady"]["oom_events"] == []
    assert 7 <= len(by["steady"]["headroom_per_day"]) <= 8
    day = by["steady"]["headroom_per_day"][2]
    assert day["min"] <= day["p05"] <= day["p50"] and 0.3 < day["min"] < 0.4
    assert by["shrinking"]["headroom_min"] < 0.05 and by["steady"]["stable_concurrency"] > 0
    ev = {x["item"]: x for x in by["shrinking"]["evidence"]}
    assert ev["driver version"]["found"] and ev["parallel sizes (TP / PP / DP)"]["value"] == "8/1/1"
    assert not ev["concurrency limit (max_num_seqs)"]["found"]  # the simulated log never states it
    assert ev["context limit (max_model_len)"]["value"] == "1048576"
    assert ev["recovery events (engine restarts)"]["found"]
    assert data["environment"]["checks"] and all(data["environment"]["checks"].values())
    page = out.read_text()
    assert page.count("<svg") >= 6 and "Monitor and operate" in page and "<script" not in page


@pytest.mark.timeout(900)
def test_report_renders_in_chromium_without_console_errors(week):
    prom, end, d, facts = week
    browser = shutil.which("chromium")
    if browser is None:
        pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")
    out = d / "page.html"
    subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--prometheus", prom.url, "--out", str(out), "--end", str(end)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={d / 'chrome'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    shot = d / "shot.png"
    r = subprocess.run(
        [browser, *flags, "--window-size=1200,1400", f"--screenshot={shot}", out.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists() and shot.stat().st_size > 20_000, r.stderr[-2000:]
    console = [line for line in r.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    dom = subprocess.run([browser, *flags, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=120)
    assert 'id="verdicts"' in dom.stdout and "Tune and keep" in dom.stdout


def test_report_says_clearly_when_prometheus_cannot_answer(tmp_path):
    from tests.conftest import free_port

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter",
            "report",
            "--prometheus",
            f"http://127.0.0.1:{free_port()}",
            "--out",
            str(tmp_path / "r.html"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "vllm-headroom report: http://127.0.0.1:" in r.stderr
    assert not (tmp_path / "r.html").exists()
    r = subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--prometheus", "http://127.0.0.1:1", "--since", "a week"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--since: expected a duration such as 7d" in r.stderr
