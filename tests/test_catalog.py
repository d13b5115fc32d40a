"""The catalog (exporter/catalog.py) is what the collector really builds, and docs/metrics.md is written from it."""

from __future__ import annotations

import time

from exporter.catalog import FAMILIES, PREFIX
from exporter.config import parse_config
from exporter.daemon import Daemon
from exporter.exposition_parser import parse
from exporter.generate.metrics_doc import metrics_doc
from exporter.gpu.fake import FakeGpuBackend
from exporter.gpu.sampler import GpuSampler
from exporter.reexport import reexport_families
from exporter.simulate.logs import VllmLogWriter
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics
from exporter.vllm.names import normalize
from exporter.vllm.scrape import ScrapeResult
from tests.conftest import ROOT

FLEET_LABELS = {"role", "cluster"}  # added beside `server` to every family that has it


def _collected(tmp_path):
    log = tmp_path / "s.log"
    w = VllmLogWriter(str(log))
    w.healthy_startup()
    w.oom("prefill")
    cfg = {
        "servers": [{"name": "s", "log": str(log)}],
        "state_dir": str(tmp_path / "state"),
        "gpu": {"backend": "none"},
    }
    daemon = Daemon(parse_config(cfg, "catalog"))
    daemon.gpu = GpuSampler(FakeGpuBackend(2), 1.0)
    daemon.gpu.sample_once()
    vllm = VllmMetrics(engines=2, waiting_by_reason=True)
    vllm.set_load(0, EngineLoad(running=3, waiting=1, kv_usage=0.5))
    vllm.serve_requests(0, 2, prompt_tokens=100, cached_tokens=50, output_tokens=10)
    st = daemon.servers["s"]
    st.update(ScrapeResult(True, series=normalize(parse(vllm.render().decode()).samples), size_bytes=1), time.time())
    st.tailer.poll()
    return list(daemon.registry.collect())


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
