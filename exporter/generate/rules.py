"""The rule files' alert group and its promtool tests, from the alert specs (built once per `generate`).

Every alert carries `severity` (critical / warning / info, the ecosystem's routing key), our `routing` (page /
ticket), a `for:`, a summary that says what is short and by how much, and a runbook. Each comes with cases that
must fire and cases that must not, at the boundary of its threshold. The alerts live per domain in
exporter/generate/alerts/, the recording rules in recording.py, the weekly verdict in weekly.py.
"""

from __future__ import annotations

from typing import Any

from exporter.generate.spec import BASE_LABELS, AlertSpec
from exporter.generate.thresholds import Thresholds


def alert_groups(t: Thresholds, specs: list[AlertSpec]) -> list[dict[str, Any]]:
    rules = []
    for a in specs:
        rule: dict[str, Any] = {
            "alert": a.name,
            "expr": a.expr,
            "for": a.for_,
            "labels": {"severity": a.severity, "routing": a.routing},
        }
        rule["annotations"] = {
            "summary": a.summary,
            "description": a.description,
            "runbook_url": f"{t.runbook_base_url}/{a.name}.md",
        }
        rules.append(rule)
    return [{"name": "vllm-headroom.alerts", "rules": rules}]


def promtool_tests(specs: list[AlertSpec], rule_files: list[str]) -> dict[str, Any]:
    """One promtool test per case; a must-not-fire case expects an empty alert list."""
    tests = []
    for a in specs:
        for c in a.cases:
            exp = []
            if c.fires:
                labels = {k: BASE_LABELS[k] for k in a.by if k in BASE_LABELS}
                labels.update(c.labels)
                labels.update({"severity": a.severity, "routing": a.routing})
                exp = [{"exp_labels": labels}]
            tests.append(
                {
                    "name": f"{a.name}: {c.name}",
                    "interval": c.interval,
                    "input_series": [{"series": s, "values": v} for s, v in c.series],
                    "alert_rule_test": [{"eval_time": c.eval_time, "alertname": a.name, "exp_alerts": exp}],
                }
            )
    return {"rule_files": rule_files, "evaluation_interval": "1m", "tests": tests}
