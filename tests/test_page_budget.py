"""The page budget, judged as the on-call engineer's week: zero pages and zero tickets from healthy servers,
exactly one alert of the right severity (and runbook) per injected incident, and the weekly verdict the guide
gives.

A simulated week (exporter/simulate/week.py: vLLM's memory model, KV saturating at peak hours, preemption and
queue bursts that clear, quiet nights) is backfilled into a real Prometheus; the shipped recording rules and the
weekly rules are evaluated over it by Prometheus' own engine (tests/backfill.py: range queries at each group's
interval, written back as blocks); each shipped alert rule's expression is evaluated at every minute of the week by Prometheus (a range query at the
rule group's 1-minute step) and its `for:` is applied as Prometheus applies it: pending from the first minute the
expression returns the series, firing once that has held for `for:`, resolved at the first minute it does not.
The firing episodes are then delivered to a real Alertmanager with the routing we ship, and the notifications
counted at a webhook.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections import Counter
from typing import Any

import pytest
import yaml

from exporter.duration import prometheus_seconds
from exporter.simulate.week import WEEK_MIN, Week, fleet
from tests.backfill import backfill_rules, blocks_from_openmetrics, passes_by_dependency, query_range
from tests.conftest import ROOT, start_alertmanager, start_prometheus
from tests.fleet_rig import Webhook
from tests.helpers import scraped_daemon

STEP_S = 60  # the rule groups' evaluation interval
# the week fixture (generate, backfill, evaluate: 2-5 minutes on a busy 2-core machine) counts against the first
# test that uses it; each test waits on its results, never on the clock
pytestmark = pytest.mark.timeout(1200)


def _minutes(d: str) -> int:
    return int(prometheus_seconds(d) // 60)


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    d = tmp_path_factory.mktemp("page-budget")
    end = (int(time.time()) // 3600 - 3) * 3600
    start = end - WEEK_MIN * 60
    servers = fleet()
    w = Week(servers, start).build()
    w.openmetrics(str(d / "week.om"))
    blocks_from_openmetrics(d / "week.om", d / "data")
    (d / "week.om").unlink()
    recording = yaml.safe_load((ROOT / "alerts" / "vllm-headroom.recording.yaml").read_text())["groups"]
    backfill_rules(d, passes_by_dependency(recording, d, "recording"), start, end)
    # the weekly rules read 7 days back: evaluated over the week's last hour, that is the verdict at its end
    weekly = yaml.safe_load((ROOT / "alerts" / "vllm-headroom.weekly.yaml").read_text())["groups"]
    backfill_rules(d, passes_by_dependency(weekly, d, "weekly"), end - 3600, end)
    prom = start_prometheus(d, "global: {scrape_interval: 1m}\n")
    rules = yaml.safe_load((ROOT / "alerts" / "vllm-headroom.rules.yaml").read_text())["groups"][0]["rules"]
    episodes = [e for rule in rules for e in _episodes(prom, rule, start, end)]
    yield {
        "prom": prom,
        "start": start,
        "end": end,
        "servers": servers,
        "week": w,
        "episodes": episodes,
        "rules": {r["alert"]: r for r in rules},
        "dir": d,
    }
    prom.proc.terminate()
    prom.proc.wait(10)


def _episodes(prom, rule: dict[str, Any], start: int, end: int) -> list[dict[str, Any]]:
    """Firing episodes of one alert rule over the week: (labels, first firing minute, last minute)."""
    hold = _minutes(rule["for"])
    out = []
    for series in query_range(prom, rule["expr"], start, end, STEP_S):
        minutes = sorted((int(float(ts)) - start) // 60 for ts, _ in series["values"])
        run: list[int] = []
        for m in minutes + [None]:
            if m is not None and run and m == run[-1] + 1:
                run.append(m)
                continue
            if run and run[-1] - run[0] >= hold:  # held for `for:` -> fired
                out.append(
                    {
                        "alert": rule["alert"],
                        "labels": {**series["metric"], **rule["labels"]},
                        "fired_at": run[0] + hold,
                        "until": run[-1],
                    }
                )
            run = [m] if m is not None else []
    return out


def _who(episode: dict[str, Any], servers) -> set[str]:
    """The servers an alert is about: its `server` label, or every server behind its exporter (`instance`)."""
    lab = episode["labels"]
    if "server" in lab:
        return {lab["server"]}
    node = lab.get("instance", "").split(":")[0]
    return {s.name for s in servers if s.node == node}


def test_the_replay_speaks_the_exporters_series(week):
    """Every series of the replay has a name and label names the exporter really exports (checked against the
    daemon's collector over a simulated vLLM and fake GPUs)."""
    from exporter.exposition_parser import parse

    daemon = scraped_daemon(week["dir"])
    from prometheus_client.exposition import generate_latest

    exported = {
        (s.name, frozenset(k for k, _ in s.labels)) for s in parse(generate_latest(daemon.registry).decode()).samples
    }
    names = {n for n, _ in exported}
    replay = set(week["week"].series_names()) - {("up", frozenset())}  # `up` is Prometheus' own
    assert replay, "the replay wrote no series"
    assert {n for n, _ in replay} <= names, sorted({n for n, _ in replay} - names)
    assert replay <= exported, sorted(replay - exported)


def test_a_healthy_week_pages_nobody_and_opens_no_ticket(week):
    healthy = {s.name for s in week["servers"] if s.incident.kind == "none"}
    assert healthy == {"healthy-092", "healthy-097"}
    noisy = [e for e in week["episodes"] if _who(e, week["servers"]) & healthy]
    assert not noisy, noisy


def test_each_incident_raises_exactly_one_alert_of_the_right_kind(week):
    rules = week["rules"]
    for s in week["servers"]:
        if s.incident.kind == "none":
            continue
        mine = [e for e in week["episodes"] if s.name in _who(e, week["servers"])]
        got = Counter(e["alert"] for e in mine)
        assert got == Counter(s.incident.alerts), (
            s.name,
            s.incident.kind,
            [(e["alert"], e["fired_at"], e["until"]) for e in mine],
        )
        for e in mine:  # fired after the incident began, with its rule's severity and runbook
            assert e["fired_at"] >= s.incident.at_min, (s.name, e)
            rule = rules[e["alert"]]
            assert e["labels"]["severity"] == rule["labels"]["severity"]
            assert rule["annotations"]["runbook_url"].endswith(f"/{e['alert']}.md")
            assert (ROOT / "docs" / "runbooks" / f"{e['alert']}.md").exists()
    pages = [e for e in week["episodes"] if e["labels"]["routing"] == "page"]
    assert len(pages) == sum(
        1 for s in week["servers"] for a in s.incident.alerts if rules[a]["labels"]["routing"] == "page"
    )


def test_the_weekly_verdict_is_the_guides(week):
    result = week["prom"].get("/api/v1/query", query="server:vllm_headroom_capacity_verdict:7d", time=str(week["end"]))[
        "data"
    ]["result"]
    got = {r["metric"]["server"]: (r["metric"]["verdict"], r["metric"]["reason"]) for r in result}
    want = {s.name: s.incident.verdict for s in week["servers"]}
    assert got == want


def test_alertmanager_sends_one_page_per_paging_incident(week, tmp_path):
    """The week's firing episodes, replayed in order into a real Alertmanager routed as we ship it (pages to one
    receiver, tickets to another, grouped by alert and server): one page notification per paging incident."""
    hook = Webhook()
    url = f"http://127.0.0.1:{hook.port}"
    shipped = yaml.safe_load((ROOT / "deploy" / "compose" / "alertmanager.yml").read_text())
    # the shipped routing, grouping and inhibition; only the receivers' URLs and the timers are ours
    receivers = [r["name"] for r in shipped["receivers"]]
    for r in shipped["receivers"]:
        r["webhook_configs"] = [{"url": f"{url}/{r['name']}", "send_resolved": False}]
    shipped["route"].update(group_wait="1s", group_interval="1s", repeat_interval="24h")
    for sub in shipped["route"].get("routes", []):
        sub.pop("repeat_interval", None)
    page_receiver = next(sub["receiver"] for sub in shipped["route"]["routes"] if sub["matchers"] == ['routing="page"'])
    assert page_receiver in receivers
    proc, port = start_alertmanager(tmp_path, yaml.safe_dump(shipped))
    try:
        pages = [e for e in week["episodes"] if e["labels"]["routing"] == "page"]
        assert pages
        for e in sorted(pages, key=lambda e: e["fired_at"]):
            labels = {"alertname": e["alert"], **{k: v for k, v in e["labels"].items() if k != "__name__"}}
            body = json.dumps([{"labels": labels}]).encode()
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/v2/alerts", body, {"Content-Type": "application/json"}
            )
            urllib.request.urlopen(req, timeout=10).close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(len(b["alerts"]) for b in hook.received) < len(pages):
            time.sleep(0.2)
        time.sleep(2)  # a second notification for the same incident would come within a group_interval
        paged = [a for b in hook.received if b["receiver"] == page_receiver for a in b["alerts"]]
        assert all(b["receiver"] == page_receiver for b in hook.received)  # no page lands in the ticket queue
        assert (
            len(paged)
            == len(pages)
            == len({(a["labels"]["alertname"], a["labels"].get("server"), a["labels"].get("instance")) for a in paged})
        )
    finally:
        proc.terminate()
        proc.wait(10)
        hook.close()


def test_docs_alerts_table_states_what_the_replay_fired(week):
    """docs/alerts.md lists every shipped alert with how often it fired in the replay; the figures stay true."""
    healthy = {s.name for s in week["servers"] if s.incident.kind == "none"}
    fired: dict[str, list[int]] = {name: [0, 0] for name in week["rules"]}
    for e in week["episodes"]:
        fired[e["alert"]][0 if _who(e, week["servers"]) & healthy else 1] += 1
    table = {}
    for line in (ROOT / "docs" / "alerts.md").read_text().splitlines():
        m = re.match(r"^\| (Vllm\w+) \|.*\| (\d+) / (\d+) \|$", line)
        if m:
            table[m.group(1)] = [int(m.group(2)), int(m.group(3))]
    assert table == fired
