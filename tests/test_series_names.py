"""Series names come from the catalog (exporter/catalog.py `series`, `family_name`): rules, dashboards, the report
and the simulators spell no `vllm_headroom_*` name of their own, so renaming a family renames it everywhere, and
no name the exporter does not export can creep back into the package."""

from __future__ import annotations

import re

import pytest

from exporter import catalog
from exporter.generate import outputs
from exporter.generate.thresholds import Thresholds
from tests.conftest import ROOT

# an exported name; `level:vllm_headroom_x:operation` recording-rule names are not exported series
NAME = re.compile(r"(?<![\w:])vllm_headroom_[a-z0-9_]+\b(?!:)")
# the modules that build queries and series over the exporter's names: they take every one from the catalog
TAKERS = ("exporter/generate", "exporter/report.py", "exporter/report_needs.py", "exporter/simulate")


def _known() -> set[str]:
    out = set()
    for family, sample in catalog.NAMES.values():
        out |= {family, sample, sample + "_bucket", sample + "_sum", sample + "_count"}
    return out


def _mentions(paths) -> list[tuple[str, str]]:
    found = []
    for path in paths:
        for name in NAME.findall(path.read_text(encoding="utf-8")):
            found.append((str(path.relative_to(ROOT)), name))
    return found


def test_every_name_the_package_mentions_is_exported():
    mentions = _mentions(sorted((ROOT / "exporter").rglob("*.py")))
    assert mentions, "the scan found no name at all: the pattern is broken"
    stale = [(path, name) for path, name in mentions if name not in _known()]
    assert not stale, f"names nothing exports (rename them in exporter/catalog.py, or use catalog.series): {stale}"


def test_rules_dashboards_report_and_simulators_spell_no_name_of_their_own():
    paths = []
    for part in TAKERS:
        p = ROOT / part
        paths += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    assert len(paths) > 10
    spelled = _mentions(paths)
    assert not spelled, f"take these from exporter/catalog.py (catalog.series / catalog.family_name): {spelled}"


def test_series_and_family_names():
    counter = next(f for f in catalog.FAMILIES if f.type == "counter")
    gauge = next(f for f in catalog.FAMILIES if f.type == "gauge")
    assert catalog.series(counter.name) == catalog.PREFIX + counter.name + "_total"
    assert catalog.family_name(counter.name) == catalog.PREFIX + counter.name
    assert catalog.series(gauge.name) == catalog.family_name(gauge.name) == catalog.PREFIX + gauge.name
    with pytest.raises(KeyError, match="'oom_event' is no family vllm-headroom exports"):
        catalog.series("oom_event")


def test_renaming_a_family_in_the_catalog_renames_it_in_rules_and_dashboards(monkeypatch):
    old = catalog.series("oom_events")
    monkeypatch.setitem(catalog.NAMES, "oom_events", ("vllm_headroom_oom_failures", "vllm_headroom_oom_failures_total"))
    files = {path: text for path, text in outputs(Thresholds()).items() if path != "docs/metrics.md"}
    users = [path for path, text in files.items() if "vllm_headroom_oom_failures_total" in text]
    assert "alerts/vllm-headroom.rules.yaml" in users and "alerts/vllm-headroom.recording.yaml" in users
    assert any(path.startswith("dashboards/") for path in users), users
    assert [path for path, text in files.items() if old in text] == []
