"""Backfilling history into a real Prometheus: samples from OpenMetrics, then recording rules evaluated by
Prometheus' own engine pass by pass, each pass reading the blocks the ones before it wrote (a rule that reads
another rule's output needs that output on disk first)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from exporter.duration import prometheus_seconds
from exporter.exposition_writer import sample_head
from tests.conftest import Prometheus, need, start_prometheus


def blocks_from_openmetrics(om: Path, data: Path) -> None:
    """One block for the whole history (promtool rereads the input once per block range otherwise)."""
    r = subprocess.run(
        [
            need("promtool"),
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "-q",
            "--max-block-duration=192h",
            str(om),
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]


def passes_by_dependency(groups: list[dict[str, Any]], workdir: Path, tag: str, keep=lambda rule: True) -> list[Path]:
    """The recording rules of `groups`, split into files by how deep they read other recorded series."""
    rules = [(g, r) for g in groups for r in g["rules"] if "record" in r and keep(r)]
    recorded = {r["record"] for _, r in rules}
    depth: dict[int, int] = {}
    for _ in rules:  # relax until stable: at most one round per rule
        for i, (_, r) in enumerate(rules):
            reads = {n for n in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", r["expr"]) if n in recorded}
            d = 1 + max(
                (depth.get(j, 0) for j, (_, o) in enumerate(rules) if o["record"] in reads and j != i), default=-1
            )
            depth[i] = max(depth.get(i, 0), d)
    files = []
    for level in sorted(set(depth.values())):
        picked = [(g, r) for i, (g, r) in enumerate(rules) if depth[i] == level]
        by_group: dict[str, dict[str, Any]] = {}
        for g, r in picked:
            by_group.setdefault(g["name"], {"name": g["name"], "interval": g.get("interval", "1m"), "rules": []})[
                "rules"
            ].append(r)
        path = workdir / f"{tag}-pass-{level}.yaml"
        path.write_text(yaml.safe_dump({"groups": list(by_group.values())}, sort_keys=False))
        files.append(path)
    return files


def backfill_rules(workdir: Path, passes: list[Path], start: int, end: int, *prom_args: str) -> None:
    """Evaluate each pass over [start, end] against a Prometheus on `workdir/data`, adding its results there.

    Each recording rule is evaluated by Prometheus' engine at its group's interval from `start` (a range query:
    what `promtool tsdb create-blocks-from rules` does too), and a pass's results go in as one block. promtool's
    rule backfill writes a block per rule and two hours — over two thousand for a week — and every later pass
    and query then reads them all; one block keeps the replay's setup a fraction of that."""
    for path in passes:
        groups = yaml.safe_load(path.read_text())["groups"]
        prom = start_prometheus(workdir, "global: {scrape_interval: 1m}\n", *prom_args)
        try:
            recorded: dict[str, list[str]] = {}
            for group in groups:
                step = int(prometheus_seconds(group.get("interval", "1m")))
                for rule in group["rules"]:
                    lines = recorded.setdefault(rule["record"], [])
                    for first in range(start, end + 1, step * MAX_POINTS):
                        last = min(end, first + step * (MAX_POINTS - 1))
                        for series in prom.api.range(rule["expr"], first, last, step):
                            labels = {k: v for k, v in series["metric"].items() if k != "__name__"}
                            labels.update(rule.get("labels") or {})
                            head = sample_head(rule["record"], labels)
                            lines += [f"{head} {value} {t}" for t, value in series["values"]]
        finally:
            prom.proc.terminate()
            prom.proc.wait(10)
        om = workdir / f"{path.stem}.om"
        with om.open("w", encoding="utf-8") as out:
            for name, lines in recorded.items():
                if lines:
                    out.write(f"# TYPE {name} gauge\n" + "\n".join(lines) + "\n")
            out.write("# EOF\n")
        blocks_from_openmetrics(om, workdir / "data")


MAX_POINTS = 10_000  # Prometheus answers at most 11,000 points per series of a range query


def query_range(prom: Prometheus, expr: str, start: int, end: int, step: int) -> list[dict[str, Any]]:
    """The result of a range query; PrometheusError (naming the query) if Prometheus refuses it."""
    return prom.api.range(expr, start, end, step)
