"""The collector's /metrics body, pinned: the domains of exporter/collectors/ composed by exporter/metrics.py write
exactly what the one collector before them wrote (families, order, help, labels, values).

A change to an exported series shows here as a diff against tests/fixtures/metrics_body.txt; when the change is
meant, rewrite the file with `VLLM_HEADROOM_UPDATE_BODY=1 .venv/bin/python -m pytest tests/test_metrics_body.py`
and review the diff like any other change of output.
"""

from __future__ import annotations

import dataclasses
import os
import re

from exporter.exposition_writer import text_format
from exporter.metrics import HeadroomCollector
from exporter.state import ServerState
from tests.conftest import ROOT
from tests.helpers import scraped_daemon

BODY = ROOT / "tests" / "fixtures" / "metrics_body.txt"
# values that change from run to run: wall-clock times and the collection's own duration
VOLATILE = re.compile(
    r"^(vllm_headroom_(?:last_scrape_success_timestamp_seconds|log_last_read_timestamp_seconds|collect_duration_seconds)"
    r"(?:\{[^}]*\})?) \S+$",
    re.M,
)


def _body(daemon) -> str:
    return VOLATILE.sub(r"\1 <varies>", text_format(HeadroomCollector(daemon)).decode())


def test_metrics_body_is_unchanged(tmp_path):
    daemon = scraped_daemon(tmp_path, oom_stage="prefill")
    # a second server with no log followed and never answering: ready/stage come from its scrapes alone
    quiet = dataclasses.replace(daemon.servers["s"].config, name="quiet", log=None)
    daemon.servers["quiet"] = ServerState(quiet, daemon.cfg.prefix_cache_window_s, None)
    plain = _body(daemon)
    # the fleet labels: a cluster on everything, and the server that uses GPU 0 on its series
    daemon.gpu_owners = {"0": ("s", "both")}
    daemon.cfg = dataclasses.replace(daemon.cfg, cluster="east")
    body = plain + "# ---- with cluster and GPU owners ----\n" + _body(daemon)
    if os.environ.get("VLLM_HEADROOM_UPDATE_BODY"):
        BODY.write_text(body, encoding="utf-8")
    expected = BODY.read_text(encoding="utf-8")
    assert "<varies>" in expected and 'cluster="east"' in expected and 'server="quiet"' in expected
    assert body == expected, "the /metrics body changed; see this module's docstring"
