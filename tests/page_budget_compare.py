"""The page-budget replay week judged by the rules of any git revision, to compare alert sets:

    .venv/bin/python -m tests.page_budget_compare [REV]      (default: HEAD's committed rules)

Prints, per server of the replay week, the alert episodes each rule file would raise, and the total of pages and
tickets. Uses the same week and the same evaluation as tests/test_page_budget.py (Debian's Prometheus and promtool).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

from exporter.simulate.week import WEEK_MIN, Week, fleet
from tests.backfill import backfill_rules, blocks_from_openmetrics, passes_by_dependency
from tests.conftest import ROOT, start_prometheus
from tests.test_page_budget import _episodes, _who


def _rules_at(rev: str, name: str) -> dict:
    shown = subprocess.run(["git", "show", f"{rev}:alerts/{name}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        raise SystemExit(f"page_budget_compare: cannot read alerts/{name} at {rev}: {shown.stderr.strip()}")
    return yaml.safe_load(shown.stdout)


def main(argv: list[str]) -> int:
    rev = argv[0] if argv else "HEAD"
    work = Path(tempfile.mkdtemp(prefix="page-budget-"))
    try:
        end = (int(time.time()) // 3600 - 3) * 3600
        start = end - WEEK_MIN * 60
        servers = fleet()
        print(f"building the replay week ({len(servers)} servers) ...", file=sys.stderr)
        Week(servers, start).build().openmetrics(str(work / "week.om"))
        blocks_from_openmetrics(work / "week.om", work / "data")
        print("evaluating the recording rules of", rev, "...", file=sys.stderr)
        recording = _rules_at(rev, "vllm-headroom.recording.yaml")["groups"]
        backfill_rules(work, passes_by_dependency(recording, work, "recording"), start, end)
        prom = start_prometheus(work, "global: {scrape_interval: 1m}\n")
        try:
            rules = _rules_at(rev, "vllm-headroom.rules.yaml")["groups"][0]["rules"]
            episodes = [e for rule in rules for e in _episodes(prom, rule, start, end)]
        finally:
            prom.proc.terminate()
            prom.proc.wait(10)
        for s in servers:
            mine = Counter(f"{e['alert']} ({e['labels']['routing']})" for e in episodes if s.name in _who(e, servers))
            print(f"{s.name:22} {s.incident.kind:26} {dict(mine) or 'nothing'}")
        routing = Counter(e["labels"]["routing"] for e in episodes)
        print(f"total: {routing.get('page', 0)} pages, {routing.get('ticket', 0)} tickets")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
