"""Simulated GPU nodes for the fleet tests and the scale benchmark, in one process on loopback.

Each node has what a Kubernetes GPU node gives the DaemonSet pod: its own kubelet pod-log directory
(`<namespace>_<pod>_<uid>/<container>/0.log`), eight fake GPUs, and its own vllm-headroom daemon on its own
port, configured from one shared config (one ConfigMap) whose `kubernetes` section finds the node's pods.
The vLLM pods are the simulator's stand-ins speaking vLLM's metric and log formats; a pod that is a
worker rank of a server spanning nodes has a log and no API server, as in vLLM.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.config import parse_config
from exporter.daemon import Daemon
from exporter.gpu.fake import FakeGpuBackend
from exporter.gpu.sampler import GpuSampler
from exporter.server import build_app
from exporter.simulate.logs import VllmLogWriter
from exporter.simulate.server import Listener, VllmStandIn, start
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics
from tests.conftest import start_alertmanager as conftest_start_alertmanager
from tests.conftest import webhook_route

GIB = 1024**3


@dataclass
class Pod:
    node: str
    name: str
    namespace: str = "inference"
    serves: bool = True  # False: a worker rank (log only); its server's API runs on another node
    engines: int = 1
    container: str = "vllm"
    kv_usage: float = 0.4
    port: int = 0
    log_path: str = ""
    metrics: VllmMetrics | None = None
    writer: VllmLogWriter | None = None


@dataclass
class Node:
    name: str
    pod_logs: str
    gpus: FakeGpuBackend
    daemon: Daemon | None = None
    port: int = 0
    pods: list[Pod] = field(default_factory=list)


class Fleet(threading.Thread):
    """The nodes and their pods on an event loop of their own. `rules(pods)` gives the shared config's
    `kubernetes.pods` list once the pods' ports are known."""

    def __init__(
        self,
        workdir: str,
        pods: list[Pod],
        rules: Callable[[list[Pod]], list[dict]],
        cluster: str | None = None,
        interval: float = 0.5,
        gpu_sample_s: float = 0.1,
        refresh: str = "1s",
        stats_every: int = 4,
    ) -> None:
        super().__init__(daemon=True)
        self.workdir = workdir
        self.pods = pods
        self.rules = rules
        self.cluster = cluster
        self.interval = interval
        self.gpu_sample_s = gpu_sample_s
        self.refresh = refresh
        self.stats_every = stats_every
        self.nodes: dict[str, Node] = {}
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._runners: list = []

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - surfaced by the caller
            self.error = exc
            self.ready.set()

    def config(self, node: Node) -> dict[str, Any]:
        cfg: dict[str, Any] = {
            "listen_address": "127.0.0.1:9478",
            "gpu": {"backend": "none"},
            "state_dir": os.path.join(self.workdir, "state", node.name),
            "kubernetes": {"pod_logs": node.pod_logs, "refresh": self.refresh, "pods": self.rules(self.pods)},
        }
        if self.cluster:
            cfg["cluster"] = self.cluster
        return cfg

    async def _main(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop_event = asyncio.Event()
        for pod in self.pods:
            node = self.nodes.get(pod.node)
            if node is None:
                gpus = FakeGpuBackend(count=8, total_bytes=288 * GIB)
                for g in range(8):
                    gpus.set_used(g, int(0.9 * 288 * GIB))  # gpu_memory_utilization's budget, filled
                node = self.nodes[pod.node] = Node(
                    pod.node, os.path.join(self.workdir, "nodes", pod.node, "pods"), gpus
                )
            node.pods.append(pod)
            if pod.serves:
                pod.metrics = VllmMetrics(engines=pod.engines, model_name="kimi-k3")
                runner, pod.port = await start(VllmStandIn(pod.metrics).app())
                self._runners.append(runner)
            directory = os.path.join(node.pod_logs, f"{pod.namespace}_{pod.name}_{uuid.uuid4()}", pod.container)
            os.makedirs(directory)
            pod.log_path = os.path.join(directory, "0.log")
            pod.writer = VllmLogWriter(pod.log_path)
            pod.writer.healthy_startup()
        for node in self.nodes.values():
            os.makedirs(
                os.path.join(
                    node.pod_logs,
                    "kube-system_coredns-5d78c9869d-x7x2q_0b0e3f5a-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
                    "coredns",
                )
            )  # not a vLLM pod
            node.daemon = Daemon(parse_config(self.config(node), f"<{node.name}>"))
            node.daemon.gpu = GpuSampler(node.gpus, self.gpu_sample_s)
            listener = Listener(build_app(node.daemon, node.daemon.registry))
            await listener.setup()
            await listener.open()
            node.port = listener.port
            self._runners.append(listener)
        ticker = asyncio.create_task(self._load())
        self.ready.set()
        await self.stop_event.wait()
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
        for r in reversed(self._runners):
            await r.cleanup()

    async def _load(self) -> None:
        """Steady traffic: every engine serves requests, every log prints vLLM's periodic stats line."""
        tick = 0
        while True:
            for pod in self.pods:
                if pod.metrics is not None:
                    for e in range(pod.engines):
                        pod.metrics.set_load(e, EngineLoad(running=8, waiting=0, kv_usage=pod.kv_usage))
                        pod.metrics.serve_requests(e, 2, prompt_tokens=8000, cached_tokens=3000, output_tokens=300)
                if pod.writer is not None and tick % self.stats_every == 0:
                    pod.writer.stats(8, 0, pod.kv_usage, 0.4)
            tick += 1
            await asyncio.sleep(self.interval)

    def targets(self) -> list[str]:
        return [f"127.0.0.1:{n.port}" for n in self.nodes.values()]

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_event.set)
        self.join(timeout=30)


class Webhook:
    """Alertmanager's webhook receiver on loopback: every notification, as posted."""

    def __init__(self) -> None:
        import json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        received = self.received = []  # type: list[dict]

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_alertmanager(workdir, hook_port: int, group_by: list[str]):
    return conftest_start_alertmanager(workdir, webhook_route(hook_port, group_by, group_wait="2s"))


def dashboard_queries(node: Any) -> list[str]:
    """Every `expr` in a dashboard's JSON, wherever the panel or row keeps it."""
    if isinstance(node, dict):
        own = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return own + [e for v in node.values() for e in dashboard_queries(v)]
    if isinstance(node, list):
        return [e for v in node for e in dashboard_queries(v)]
    return []


def fill_variables(expr: str) -> str:
    """Grafana's variables made concrete: ranges and intervals as durations, every other variable any value."""
    import re

    expr = re.sub(r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}", "1m", expr)
    expr = re.sub(r'(\w+)\s*=~?\s*"\$\{?\w+\}?"', r'\1=~".*"', expr)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


def wait_health(url: str, proc, log_path, timeout: float = 60) -> None:
    """Wait for a VictoriaMetrics component's /health; its log tells why when it exits instead."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited: " + Path(log_path).read_text(encoding="utf-8")[-2000:])
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{proc.args[0]} did not become healthy in {timeout:g} s")


class VmStack:
    """Debian's victoria-metrics, vmagent and vmalert on loopback: vmagent scrapes the nodes and remote-writes
    into VictoriaMetrics, vmalert evaluates rule files against it, writes recording rules back and sends alerts
    to Alertmanager. `rule_files` are evaluated as given, except group intervals (`interval`)."""

    def __init__(
        self,
        workdir,
        targets: list[str],
        rule_files: list,
        alertmanager_port: int,
        cluster: str,
        scrape_interval: str = "1s",
        group_interval: str | None = "2s",
    ) -> None:
        import subprocess

        import yaml

        from tests.conftest import free_port, need

        self.workdir = workdir
        self.procs: list = []
        vm_port, agent_port, alert_port = free_port(), free_port(), free_port()
        self.url = f"http://127.0.0.1:{vm_port}"
        self.vmalert_url = f"http://127.0.0.1:{alert_port}"

        def launch(binary: str, *args: str):
            log = workdir / f"{binary}.log"
            proc = subprocess.Popen(
                [need(binary), *args, "-loggerLevel=WARN"], stdout=subprocess.DEVNULL, stderr=open(log, "wb")
            )  # noqa: SIM115 - the child process owns it
            self.procs.append(proc)
            return proc, log

        # latencyOffset 0: instant queries see the newest samples (the default hides the last 30 s)
        proc, log = launch(
            "victoria-metrics",
            f"-httpListenAddr=127.0.0.1:{vm_port}",
            f"-storageDataPath={workdir / 'vm-data'}",
            "-retentionPeriod=1d",
            "-search.latencyOffset=0s",
            "-search.disableCache",
        )
        wait_health(self.url, proc, log)
        (workdir / "scrape.yml").write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval},
                    "scrape_configs": [{"job_name": "vllm-headroom", "static_configs": [{"targets": targets}]}],
                }
            )
        )
        proc, log = launch(
            "vmagent",
            f"-httpListenAddr=127.0.0.1:{agent_port}",
            f"-promscrape.config={workdir / 'scrape.yml'}",
            f"-remoteWrite.url={self.url}/api/v1/write",
            f"-remoteWrite.label=cluster={cluster}",
            f"-remoteWrite.tmpDataPath={workdir / 'vmagent'}",
            "-remoteWrite.flushInterval=1s",
        )
        wait_health(f"http://127.0.0.1:{agent_port}", proc, log)
        rules = []
        for i, path in enumerate(rule_files):
            doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
            if group_interval:
                for group in doc.get("groups", []):
                    group["interval"] = group_interval
            out = workdir / f"rules-{i}-{os.path.basename(str(path))}"
            out.write_text(yaml.safe_dump(doc, sort_keys=False))
            rules.append(f"-rule={out}")
        proc, log = launch(
            "vmalert",
            f"-httpListenAddr=127.0.0.1:{alert_port}",
            *rules,
            f"-datasource.url={self.url}",
            f"-remoteWrite.url={self.url}",
            f"-remoteRead.url={self.url}",
            f"-notifier.url=http://127.0.0.1:{alertmanager_port}",
            "-evaluationInterval=1s",
            "-datasource.queryStep=5s",
            "-remoteWrite.flushInterval=500ms",
            f"-external.label=cluster={cluster}",
        )
        wait_health(self.vmalert_url, proc, log)

    def get(self, path: str, **params: str) -> dict:
        import json
        import urllib.error
        import urllib.parse
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.url}{path}?{urllib.parse.urlencode(params)}", timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as err:  # 4xx/5xx for a bad query: the body says why
            return json.loads(err.read())

    def query(self, expr: str) -> dict:
        return self.get("/api/v1/query", query=expr)

    def stop(self) -> None:
        import subprocess

        for proc in reversed(self.procs):
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:  # a stuck process is killed, never left behind
                proc.kill()
                proc.wait(10)
