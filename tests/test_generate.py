"""Generated rules, dashboards and runbooks: fresh, valid for promtool and Prometheus, consistent with thresholds."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from exporter.config import ConfigError
from exporter.generate import outputs
from exporter.generate.alerts import alert_specs
from exporter.generate.dashboards import dashboards, panel_queries
from exporter.generate.recording import recording_rules
from exporter.generate.thresholds import Thresholds, load_thresholds
from exporter.generate.weekly import weekly_rules
from tests.conftest import ROOT, need
from tests.helpers import panel_query

DEFAULT = Thresholds()


def test_committed_outputs_match_a_fresh_generate():
    stale = [
        rel
        for rel, content in outputs(DEFAULT).items()
        if not (ROOT / rel).exists() or (ROOT / rel).read_text(encoding="utf-8") != content
    ]
    assert not stale, f"run `vllm-headroom generate` and commit: stale {stale}"
    generated = set(outputs(DEFAULT))
    on_disk = {
        str(p.relative_to(ROOT))
        for d in ("alerts", "dashboards", "docs/runbooks")
        for p in (ROOT / d).rglob("*")
        if p.is_file()
    }
    assert on_disk <= generated, f"files no generate writes: {sorted(on_disk - generated)}"


def test_promtool_checks_the_rules():
    promtool = need("promtool")
    files = [
        str(ROOT / "alerts" / n)
        for n in ("vllm-headroom.rules.yaml", "vllm-headroom.recording.yaml", "vllm-headroom.weekly.yaml")
    ]
    r = subprocess.run([promtool, "check", "rules", *files], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def _rules_under_test(dest, shipped_rules: str | None = None):
    """A copy of alerts/ for promtool: the shipped rule files as they are, and the alert rules of the shipped file
    without their annotations (promtool compares annotations exactly, and the summaries quote the firing value).
    Nothing else is changed: the test below checks that, so promtool tests the expressions that ship."""
    (dest / "tests").mkdir(parents=True)
    for name in ("vllm-headroom.recording.yaml", "vllm-headroom.weekly.yaml"):
        (dest / name).write_text((ROOT / "alerts" / name).read_text())
    for test in (ROOT / "alerts" / "tests").glob("*.test.yaml"):
        (dest / "tests" / test.name).write_text(test.read_text())
    shipped = yaml.safe_load(shipped_rules or (ROOT / "alerts" / "vllm-headroom.rules.yaml").read_text())
    for group in shipped["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (dest / "tests" / "alerts.rules-without-annotations.yaml").write_text(yaml.safe_dump(shipped, sort_keys=False))
    return dest / "tests"


def test_promtool_reads_the_shipped_alert_rules(tmp_path):
    tests = _rules_under_test(tmp_path / "alerts")
    under_test = yaml.safe_load((tests / "alerts.rules-without-annotations.yaml").read_text())
    shipped = yaml.safe_load((ROOT / "alerts" / "vllm-headroom.rules.yaml").read_text())
    for group in shipped["groups"]:
        for rule in group["rules"]:
            assert rule.pop("annotations")["runbook_url"].startswith("https://")
    assert under_test == shipped
    assert (
        yaml.safe_load((ROOT / "alerts" / "tests" / "alerts.test.yaml").read_text())["rule_files"][0]
        == "alerts.rules-without-annotations.yaml"
    )


@pytest.mark.parametrize("name", ["alerts.test.yaml", "recording.test.yaml", "weekly.test.yaml"])
def test_promtool_unit_tests_pass(name, tmp_path):
    promtool = need("promtool")
    tests = _rules_under_test(tmp_path / "alerts")
    r = subprocess.run([promtool, "test", "rules", name], cwd=tests, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_promtool_tests_can_fail(tmp_path):
    """A rule off by a hair at its threshold must break its boundary test."""
    promtool = need("promtool")
    shipped = (ROOT / "alerts" / "vllm-headroom.rules.yaml").read_text()
    bent = shipped.replace(f">= {DEFAULT.kv_queue_page_requests:g}\n", f"> {DEFAULT.kv_queue_page_requests:g}\n")
    assert bent != shipped
    tests = _rules_under_test(tmp_path / "alerts", bent)
    r = subprocess.run(
        [promtool, "test", "rules", "alerts.test.yaml"], cwd=tests, capture_output=True, text=True, timeout=600
    )
    assert r.returncode != 0
    assert "VllmRequestsQueueingKVCacheFull: exactly the page level on average fires" in r.stdout + r.stderr


def test_every_alert_is_complete():
    rules = yaml.safe_load((ROOT / "alerts" / "vllm-headroom.rules.yaml").read_text())["groups"][0]["rules"]
    assert len(rules) >= 20
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["labels"]["routing"] in ("page", "ticket"), rule["alert"]
        assert re.match(r"^\d+[smh]$", rule["for"]), rule["alert"]
        ann = rule["annotations"]
        assert ann["summary"] and ann["description"]
        assert ann["runbook_url"].endswith(f"/{rule['alert']}.md")
        assert (ROOT / "docs" / "runbooks" / f"{rule['alert']}.md").exists()
    for spec in alert_specs(DEFAULT):
        assert any(c.fires for c in spec.cases) and any(not c.fires for c in spec.cases), spec.name
    pages = {r["alert"] for r in rules if r["labels"]["routing"] == "page"}
    assert {
        "VllmRuntimeOOM",
        "VllmRequestsQueueingKVCacheFull",
        "VllmGPUMemoryHeadroomCritical",
        "VllmTargetDown",
        "VllmHeadroomExporterDown",
        "VllmHeadroomExporterAbsent",
    } == pages
    assert "VllmLoadingStageOOM" not in pages  # a loading-stage OOM must not page as a runtime OOM


def test_advice_in_rules_and_runbooks_follows_the_guide():
    specs = {s.name: s for s in alert_specs(DEFAULT)}
    loading = specs["VllmLoadingStageOOM"]
    text = " ".join([loading.summary, loading.description, *loading.runbook.values()]).lower()
    assert "does not help" in text
    assert "lower concurrency" not in text.replace("lowering concurrency does not help", "")
    # vLLM's own check that max_num_seqs fits a hybrid model's state cache (vllm/config/compilation.py) is the one
    # loading failure whose remedy is max_num_seqs; named with that check only, never as a general move
    exception = re.search(r"one exception[^.]*mamba cache blocks[^.]*\.", text)
    assert exception is not None
    assert "max-num-seqs" not in text.replace(exception.group(0), "")
    runtime = specs["VllmRuntimeOOM"]
    first = runtime.runbook["first"].lower()
    assert "reduce" in first and "replay the same request set" in first and "hardware" not in first


def test_thresholds_feed_rules_tests_and_dashboards_alike(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("kv_queue_page_requests: 4\ngpu_over_budget_warning_ratio: 0.05\nselector: 'job=\"gpu-nodes\"'\n")
    t = load_thresholds(str(path))
    files = outputs(t)
    assert "[10m]) >= 4\n" in files["alerts/vllm-headroom.rules.yaml"]
    assert 'vllm_headroom_requests_waiting{job="gpu-nodes"}' in files["alerts/vllm-headroom.recording.yaml"]
    assert "> 0.05\n" in files["alerts/vllm-headroom.rules.yaml"]
    board = json.loads(files["dashboards/vllm-headroom-oncall.json"])
    over = next(p for p in board["panels"] if p.get("title") == "GPU memory beyond vLLM's budget")
    steps = [s["value"] for s in over["fieldConfig"]["defaults"]["thresholds"]["steps"]]
    assert 0.05 in steps and DEFAULT.gpu_over_budget_warning_ratio not in steps


def test_bad_thresholds_are_refused(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(
        "kv_queue_page_requets: 2\nkv_full_ratio: 1.5\nkv_queue_for: soon\nrunbook_base_url: docs/runbooks\n"
    )
    with pytest.raises(ConfigError) as err:
        load_thresholds(str(path))
    text = str(err.value)
    assert "kv_queue_page_requets: unknown threshold" in text and "did you mean kv_queue_page_requests" in text
    assert "kv_full_ratio: expected a ratio between 0 and 1" in text
    assert "kv_queue_for: expected a Prometheus duration" in text


def test_dashboards_lint():
    for name, board in dashboards(DEFAULT).items():
        assert board["uid"] == name
        names = [v["name"] for v in board["templating"]["list"]]
        assert names[0] == "datasource" and {"job", "cluster", "role", "instance", "server", "model"} <= set(names)
        for panel in board["panels"]:
            if panel.get("type") == "row":
                continue
            assert panel["datasource"] == "${datasource}", (name, panel["title"])
            for target in panel["targets"]:
                expr = target["expr"]
                assert 'job=~"$job"' in expr and 'instance=~"$instance"' in expr, (name, panel["title"], expr)
                if not target.get("instant"):
                    for window in re.findall(r"\[([^\]]+)\]", expr):
                        assert window == "$__rate_interval", (name, panel["title"], expr)


def exported_names() -> set[str]:
    """Every series name the daemon can export, read from a real collector run."""
    import asyncio  # noqa: F401

    from prometheus_client import generate_latest

    from exporter.config import parse_config
    from exporter.daemon import Daemon
    from exporter.exposition_parser import parse
    from exporter.gpu.fake import FakeGpuBackend
    from exporter.gpu.sampler import GpuSampler
    from exporter.simulate.vllm_metrics import VllmMetrics
    from exporter.vllm.names import normalize
    from exporter.vllm.scrape import ScrapeResult

    d = Daemon(parse_config({"servers": [{"name": "s", "log": "/nonexistent.log"}], "state_dir": "/tmp/x-unused"}))
    d.gpu = GpuSampler(FakeGpuBackend(2), 0.1)
    d.gpu.sample_once()
    m = VllmMetrics(engines=2)
    d.servers["s"].update(ScrapeResult(True, series=normalize(parse(m.render().decode()).samples)), 0)
    text = generate_latest(d.registry).decode()
    out = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split()
            out.add(name)
            if typ == "counter":
                out.add(name + "_total")
            if typ == "histogram":
                out.update(name + s for s in ("_bucket", "_sum", "_count"))
    return out


def _referenced(expr: str) -> set[str]:
    words = set(re.findall(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?=\{|\[|\)|$|\s)", expr))
    return {w for w in words if w.startswith(("vllm_headroom_", "server:", "gpu:")) or w == "up"}


def test_every_referenced_series_exists():
    known = exported_names() | {"up"}
    known |= {r["record"] for g in recording_rules(DEFAULT) + weekly_rules(DEFAULT) for r in g["rules"]}
    refs: dict[str, set[str]] = {}
    for name, board in dashboards(DEFAULT).items():
        for title, expr in panel_queries(board):
            for metric in _referenced(expr):
                refs.setdefault(metric, set()).add(f"{name}: {title}")
    for g in recording_rules(DEFAULT) + weekly_rules(DEFAULT):
        for r in g["rules"]:
            for metric in _referenced(r["expr"]):
                refs.setdefault(metric, set()).add(r["record"])
    for spec in alert_specs(DEFAULT):
        for metric in _referenced(spec.expr):
            refs.setdefault(metric, set()).add(spec.name)
    assert len(refs) > 20
    missing = {m: sorted(where) for m, where in refs.items() if m not in known}
    assert not missing, f"referenced but never exported or recorded: {missing}"


def test_every_panel_query_parses_in_a_real_prometheus(prometheus):
    for name, board in dashboards(DEFAULT).items():
        for title, expr in panel_queries(board):
            answer = prometheus.query(panel_query(expr))
            assert answer["status"] == "success", (name, title, expr, answer.get("error"))


def test_prometheus_loads_the_generated_rules(prometheus):
    groups = prometheus.get("/api/v1/rules")["data"]["groups"]
    names = {g["name"] for g in groups}
    assert names == {"vllm-headroom.alerts", "vllm-headroom.recording", "vllm-headroom.weekly"}
    alerts = [r for g in groups for r in g["rules"] if r["type"] == "alerting"]
    assert len(alerts) == len(alert_specs(DEFAULT))


def test_example_thresholds_file_lists_the_defaults():
    assert load_thresholds(str(ROOT / "deploy" / "thresholds.example.yaml")) == DEFAULT


def test_thresholds_are_read_as_config_is(tmp_path):
    """One YAML reader for config, thresholds, web config and scenarios: duplicate keys refused, lines named."""
    path = tmp_path / "t.yaml"
    path.write_text("kv_full_ratio: 0.9\nkv_full_ratio: 0.8\n")
    with pytest.raises(ConfigError, match="duplicate key 'kv_full_ratio'"):
        load_thresholds(str(path))
    path.write_text("kv_full_ratio: [0.9\n")
    with pytest.raises(ConfigError, match=r"t\.yaml: line \d+, column \d+: invalid YAML"):
        load_thresholds(str(path))
    path.write_bytes(b"kv_full_ratio: \xff\n")
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        load_thresholds(str(path))
