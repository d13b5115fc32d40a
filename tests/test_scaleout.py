"""The scale-out path with the real parts: simulated nodes -> vmagent -> VictoriaMetrics -> vmalert -> Alertmanager.

Four simulated GPU nodes (8 GPUs, a prefill and a decode server each, found from the nodes' pod log
directories as in Kubernetes) are scraped by vmagent, which remote-writes into VictoriaMetrics with a
`cluster` label. vmalert evaluates whatever rule files `alerts/` holds (only the group intervals are
shortened, so a week's verdict shows in seconds), writes the recording rules back and sends alerts to
Alertmanager. `vllm-headroom report` then reads VictoriaMetrics' Prometheus API, and every dashboard query
is evaluated there. Debian's `victoria-metrics` package ships all three binaries (`make test` installs it).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.conftest import ROOT
from tests.fleet_rig import (
    Fleet,
    Pod,
    VmStack,
    Webhook,
    dashboard_queries,
    fill_variables,
    start_alertmanager,
)

NODES = 4
DEADLINE_S = 60
CLUSTER = "ci-east"
PODS = [
    Pod(f"node-{n}", f"pd{n}-{role}-0", engines=2 if role == "decode" else 1, kv_usage=0.5 if role == "decode" else 0.3)
    for n in range(NODES)
    for role in ("prefill", "decode")
]
SERVERS = sorted(p.name for p in PODS)


def rules(pods: list[Pod]) -> list[dict]:
    """One rule per pod (each stand-in has its own port); in a cluster, one templated rule covers them all."""
    out = []
    for p in pods:
        role = p.name.split("-")[1]
        out.append(
            {
                "pod": re.escape(p.name),
                "server": p.name,
                "role": role,
                "log_format": "auto",
                "url": f"http://127.0.0.1:{p.port}/metrics",
                "interval": "1s",
                "timeout": "1s",
                "gpus": [0, 1, 2, 3] if role == "prefill" else [4, 5, 6, 7],
            }
        )
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    d = tmp_path_factory.mktemp("scaleout")
    fleet = Fleet(str(d), PODS, rules, interval=1.0, gpu_sample_s=0.5, stats_every=5)
    fleet.start()
    fleet.ready.wait(30)
    if fleet.error:
        raise fleet.error
    hook = Webhook()
    am, am_port = start_alertmanager(d, hook.port, ["alertname", "cluster", "server", "stage"])
    vm = None
    try:
        vm = VmStack(d, fleet.targets(), sorted((ROOT / "alerts").glob("*.yaml")), am_port, CLUSTER)
        yield fleet, vm, hook, am_port
    finally:
        if vm is not None:
            vm.stop()
        am.terminate()
        am.wait(10)
        fleet.stop()
        hook.close()


def _result(vm: VmStack, expr: str) -> list[dict]:
    answer = vm.query(expr)
    assert answer.get("status") == "success", (expr, answer)
    return answer["data"]["result"]


def _wait(vm: VmStack, expr: str, ok, deadline: float) -> list[dict]:
    got: list[dict] = []
    while time.monotonic() < deadline:
        got = _result(vm, expr)
        if ok(got):
            return got
        time.sleep(0.5)
    return got


def test_series_arrive_once_each_with_cluster_server_and_role(stack):
    _, vm, _, _ = stack
    deadline = time.monotonic() + DEADLINE_S
    expr = "count by (cluster, server, role) (vllm_headroom_target_up == 1)"
    got = _wait(vm, expr, lambda r: len(r) == len(SERVERS), deadline)
    assert sorted(
        (r["metric"]["server"], r["metric"]["role"], r["metric"]["cluster"], r["value"][1]) for r in got
    ) == sorted((s, s.split("-")[1], CLUSTER, "1") for s in SERVERS)
    gpus = _wait(
        vm, "count by (server, role) (vllm_headroom_gpu_memory_used_bytes)", lambda r: len(r) == len(SERVERS), deadline
    )
    assert {r["metric"]["server"]: r["value"][1] for r in gpus} == {s: "4" for s in SERVERS}


def test_vmalert_writes_the_recording_and_weekly_rules_back(stack):
    _, vm, _, _ = stack
    deadline = time.monotonic() + DEADLINE_S
    recorded = _wait(
        vm,
        "count by (server) (server:vllm_headroom_kv_cache_headroom_ratio:min)",
        lambda r: len(r) == len(SERVERS),
        deadline,
    )
    assert sorted(r["metric"]["server"] for r in recorded) == SERVERS
    verdicts = _wait(
        vm, "count by (server) (server:vllm_headroom_capacity_verdict:7d)", lambda r: len(r) == len(SERVERS), deadline
    )
    assert {r["metric"]["server"]: r["value"][1] for r in verdicts} == {s: "1" for s in SERVERS}  # one each


def test_a_runtime_oom_reaches_alertmanager_once(stack):
    fleet, vm, hook, am_port = stack
    deadline = time.monotonic() + DEADLINE_S
    _wait(vm, "vllm_headroom_engine_ready == 1", lambda r: len(r) == len(SERVERS), deadline)
    victim = next(p for p in fleet.pods if p.name == "pd1-decode-0")
    assert victim.writer is not None
    victim.writer.oom("decode")
    groups: list = []
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{am_port}/api/v2/alerts/groups", timeout=5) as r:
            groups = [g for g in json.loads(r.read()) if g["labels"].get("alertname") == "VllmRuntimeOOM"]
        if groups and any(n["groupLabels"].get("alertname") == "VllmRuntimeOOM" for n in hook.received):
            break
        time.sleep(0.5)
    assert [g["labels"] for g in groups] == [
        {"alertname": "VllmRuntimeOOM", "cluster": CLUSTER, "server": "pd1-decode-0", "stage": "decode"}
    ]
    pages = [n for n in hook.received if n["groupLabels"].get("alertname") == "VllmRuntimeOOM"]
    assert len({n["groupKey"] for n in pages}) == 1
    # nothing else pages: the other seven servers are healthy
    others = {
        a["labels"].get("server") for n in hook.received for a in n["alerts"] if a["labels"].get("routing") == "page"
    }
    assert others <= {"pd1-decode-0"}, hook.received


def test_report_reads_victoriametrics_prometheus_api(stack, tmp_path):
    _, vm, _, _ = stack
    deadline = time.monotonic() + DEADLINE_S
    _wait(
        vm, "count by (server) (server:vllm_headroom_capacity_verdict:7d)", lambda r: len(r) == len(SERVERS), deadline
    )
    out = tmp_path / "report.html"
    run = subprocess.run(
        [sys.executable, "-m", "exporter", "report", "--prometheus", vm.url, "--since", "1h", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    data = json.loads((tmp_path / "report.json").read_text())
    assert sorted(s["server"] for s in data["servers"]) == SERVERS
    assert out.read_text().count("pd0-prefill-0") >= 1


def test_every_dashboard_query_evaluates_on_victoriametrics(stack):
    _, vm, _, _ = stack
    boards = sorted((ROOT / "dashboards").glob("*.json"))
    assert boards
    errors, count = [], 0
    for board in boards:
        for expr in dashboard_queries(json.loads(board.read_text())):
            count += 1
            answer = vm.query(fill_variables(expr))
            if answer.get("status") != "success":
                errors.append((board.name, expr, answer.get("error")))
    assert count > 10 and not errors, errors
