"""The catalog (exporter/catalog.py) is what the collector really builds, and docs/metrics.md is written from it."""

from __future__ import annotations

from exporter.catalog import FAMILIES, PREFIX
from exporter.generate.metrics_doc import metrics_doc
from exporter.reexport import reexport_families
from tests.conftest import ROOT
from tests.helpers import scraped_daemon

FLEET_LABELS = {"role", "cluster"}  # added beside `server` to every family that has it


def _collected(tmp_path):
    return list(scraped_daemon(tmp_path, oom_stage="prefill").registry.collect())


def test_every_family_the_collector_builds_is_in_the_catalog_as_described(tmp_path):
    catalog = {PREFIX + f.name: f for f in FAMILIES}
    reexported = {PREFIX + base for base, _typ in reexport_families().values()}
    seen = set()
    for fam in _collected(tmp_path):
        if not fam.name.startswith(PREFIX) or fam.name in reexported:
            continue
        assert fam.name in catalog, f"{fam.name} is exported but not in exporter/catalog.py"
        f = catalog[fam.name]
        assert fam.type == f.type, fam.name
        for s in fam.samples:
            assert set(s.labels) - FLEET_LABELS == set(f.labels), (fam.name, s.labels, f.labels)
        seen.add(fam.name)
    assert seen == set(catalog), f"in the catalog but never built: {sorted(set(catalog) - seen)}"


def test_docs_metrics_md_is_written_from_the_catalog():
    text = metrics_doc()
    assert (ROOT / "docs" / "metrics.md").read_text() == text
    for f in FAMILIES:
        assert f"`{f.exported}`" in text
