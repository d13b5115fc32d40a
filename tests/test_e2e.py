"""End to end with the real servers: simulated vLLM -> vllm-headroom -> Prometheus -> Alertmanager -> webhook.

Every built-in scenario runs at once, each as its own vLLM server on one node, so one Prometheus and one
Alertmanager (Debian's packages, on loopback, 1 s scrape and evaluation) judge them all in well under a
minute. The rules are generated from thresholds whose `for:` durations and windows are short enough for
that; everything else is the product as shipped.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from aiohttp import web

from exporter.demo import build
from exporter.generate import write_outputs
from exporter.generate.dashboards import dashboards, panel_queries
from exporter.generate.thresholds import Thresholds
from exporter.server import build_app
from exporter.simulate.scenario import builtin_scenarios
from exporter.simulate.server import Listener
from tests.conftest import free_port, start_prometheus, webhook_route
from tests.conftest import start_alertmanager as conftest_start_alertmanager
from tests.helpers import panel_query

E2E = Thresholds(
    recording_interval="1s",
    weekly_interval="2s",
    prefix_fast_window="4s",
    prefix_baseline_window="1m",
    kv_queue_window="4s",
    kv_queue_for="2s",
    preemption_window="4s",
    preemption_for="2s",
    gpu_over_budget_for="2s",
    gpu_headroom_critical_for="0s",
    prefix_collapse_for="2s",
    engine_not_ready_for="20s",
    target_down_for="3s",
    kv_series_missing_for="5s",
    exporter_down_for="5s",
    weekly_min_data_hours=0.002,
)
DEADLINE_S = 75


class Rig(threading.Thread):
    """The simulated servers, the daemon and a webhook receiver, on an event loop of their own."""

    def __init__(self, workdir) -> None:
        super().__init__(daemon=True)
        self.workdir = workdir
        self.received: list[dict] = []
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.port = free_port()
        self.hook_port = free_port()

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # surfaced by the test
            self.error = exc
            self.ready.set()

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        daemon, sims = build(builtin_scenarios(), str(self.workdir), interval=0.5)
        self.sims = sims
        app = build_app(daemon, daemon.registry)
        exporter = Listener(app, port=self.port)
        await exporter.setup()
        await exporter.open()

        async def hook(request: web.Request) -> web.Response:
            self.received.extend((await request.json())["alerts"])
            return web.Response(text="ok")

        hook_app = web.Application()
        hook_app.router.add_post("/hook", hook)
        receiver = Listener(hook_app, port=self.hook_port)
        await receiver.setup()
        await receiver.open()
        tasks = [asyncio.create_task(s.run()) for s in sims]
        self.ready.set()
        await self.stop_event.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await exporter.cleanup()
        await receiver.cleanup()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.join(timeout=15)


def start_alertmanager(workdir, hook_port: int):
    return conftest_start_alertmanager(workdir, webhook_route(hook_port, ["alertname", "server", "gpu", "stage"]))


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e")
    write_outputs(E2E, str(d / "gen"))
    rig = Rig(d / "logs")
    (d / "logs").mkdir()
    rig.start()
    rig.ready.wait(20)
    if rig.error:
        raise rig.error
    am, am_port = start_alertmanager(d, rig.hook_port)
    rules = "".join(
        f"  - {d / 'gen' / 'alerts' / n}\n"
        for n in ("vllm-headroom.rules.yaml", "vllm-headroom.recording.yaml", "vllm-headroom.weekly.yaml")
    )
    prom = start_prometheus(
        d,
        f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files:
{rules}
alerting:
  alertmanagers:
    - static_configs: [{{targets: ["127.0.0.1:{am_port}"]}}]
scrape_configs:
  - job_name: vllm-headroom
    static_configs: [{{targets: ["127.0.0.1:{rig.port}"], labels: {{}}}}]
""",
    )
    yield rig, prom
    prom.proc.terminate()
    am.terminate()
    rig.stop()
    prom.proc.wait(10)
    am.wait(10)


def firing(rig: Rig) -> set[tuple[str, str, str]]:
    """(alertname, server or gpu, stage) of every alert that reached the webhook."""
    out = set()
    for a in list(rig.received):
        lab = a["labels"]
        out.add((lab["alertname"], lab.get("server", "gpu" + lab.get("gpu", "")), lab.get("stage", "")))
    return out


EXPECTED = {
    ("VllmRuntimeOOM", "runtime-oom-prefill", "prefill"),
    ("VllmLoadingStageOOM", "loading-oom-weights", "weight_loading"),
    ("VllmLoadingStageOOM", "loading-oom-kv-cache", "kv_cache_alloc"),
    ("VllmPreemptionsRising", "shrinking-headroom", ""),
    ("VllmRequestsQueueingKVCacheFull", "shrinking-headroom", ""),
    ("VllmPrefixCacheHitRatioCollapsed", "prefix-collapse", ""),
    ("VllmGPUMemoryHeadroomCritical", "gpu3", ""),
}
HEALTHY = ("healthy", "healthy-high-utilization")


def test_each_scenario_raises_its_alerts_and_no_others(stack):
    rig, prom = stack
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and not EXPECTED <= firing(rig):
        time.sleep(1)
    got = firing(rig)
    assert EXPECTED <= got, f"missing: {sorted(EXPECTED - got)}; got {sorted(got)}"
    servers = {server for _, server, _ in got}
    # healthy servers at utilization 0.92 and 0.97, KV cache full at peak with no queue: nothing at all
    assert not servers & set(HEALTHY), [g for g in got if g[1] in HEALTHY]
    assert not {g for g in got if g[1] in ("gpu0", "gpu1", "gpu2")}  # their GPUs sit at the budget by design
    # a loading-stage OOM never pages as a runtime OOM, and a runtime OOM is never a loading one
    assert not {g for g in got if g[0] == "VllmRuntimeOOM" and g[1].startswith("loading-")}
    assert not {g for g in got if g[0] == "VllmLoadingStageOOM" and g[1] == "runtime-oom-prefill"}
    assert not {g for g in got if g[0].startswith("VllmGPUMemory") and g[1] != "gpu3"}
    assert not {g for g in got if g[0] == "VllmRequestsQueueingKVCacheFull" and g[1] != "shrinking-headroom"}
    labels = {a["labels"]["alertname"]: a["labels"] for a in rig.received}
    assert labels["VllmRuntimeOOM"]["severity"] == "critical" and labels["VllmRuntimeOOM"]["routing"] == "page"
    assert labels["VllmLoadingStageOOM"]["routing"] == "ticket"
    ann = next(a["annotations"] for a in rig.received if a["labels"]["alertname"] == "VllmRuntimeOOM")
    assert ann["runbook_url"].endswith("/VllmRuntimeOOM.md") and "prefill" in ann["summary"]


def test_every_dashboard_panel_returns_data_during_the_scenarios(stack):
    rig, prom = stack
    deadline = time.monotonic() + DEADLINE_S
    pending: list = []
    while time.monotonic() < deadline:
        pending = []
        for name, board in dashboards(E2E).items():
            for title, expr in panel_queries(board):
                answer = prom.query(panel_query(expr, "runtime-oom-prefill", "10s"))
                assert answer["status"] == "success", (name, title, expr, answer.get("error"))
                if not answer["data"]["result"]:
                    pending.append((name, title, expr))
        if not pending:
            break
        time.sleep(2)
    assert not pending, f"panels without data: {pending}"


def test_capacity_verdicts_follow_the_scenarios(stack):
    rig, prom = stack
    want = {
        "runtime-oom-prefill": ("monitor_and_operate", "runtime_oom"),
        "loading-oom-weights": ("migrate_or_scale", "weights_cannot_load"),
        "loading-oom-kv-cache": ("tune_and_keep", "loading_config_failure"),
        "healthy": ("tune_and_keep", "stable_headroom"),
        "healthy-high-utilization": ("tune_and_keep", "stable_headroom"),
    }
    deadline = time.monotonic() + DEADLINE_S
    got: dict = {}
    while time.monotonic() < deadline:
        result = prom.query("server:vllm_headroom_capacity_verdict:7d")["data"]["result"]
        got = {r["metric"]["server"]: (r["metric"]["verdict"], r["metric"]["reason"]) for r in result}
        if all(got.get(k) == v for k, v in want.items()):
            break
        time.sleep(1)
    for server, verdict in want.items():
        assert got.get(server) == verdict, (server, got)
    assert len([s for s in got if s == "healthy"]) == 1  # exactly one verdict per server
