"""Scenarios for the simulated vLLM: YAML lists of steps that drive its /metrics, its log and the fake GPUs.

Steps run in order: `start` (a new process: the port refuses, the log prints the startup), `load_weights`,
`size_kv_cache`, `ready` (the port opens), `serve` (load ramps linearly over `seconds`), `oom` (the log
prints a real-format failure for `stage`; the process dies), `wait`, and `repeat` (from the top).

GPU memory follows vLLM's plan (exporter/simulate/memory.py): the budget `gpu_memory_utilization` x total is
claimed at KV-cache sizing and held from then on, whatever the KV usage; `beyond_budget` ramps memory vLLM did
not plan for (another process, a leak), and `spike_used` briefly takes a GPU to that share of its total.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from exporter.config import ConfigError, parse_yaml
from exporter.gpu.fake import FakeGpuBackend
from exporter.simulate.logs import STAGES, VllmLogWriter
from exporter.simulate.memory import VllmMemoryModel
from exporter.simulate.server import Listener, VllmStandIn
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics

log = logging.getLogger("vllm_headroom.simulate")
ACTIONS = ("start", "load_weights", "size_kv_cache", "ready", "serve", "oom", "wait", "repeat")
RAMPS = ("running", "waiting", "kv_usage", "prefix_hit", "beyond_budget")
NUMBERS = ("seconds", "requests_per_s", "preemptions_per_s", "spike_every", "spike_used", "spike_ms")
TICK_S = 0.25
STATS_EVERY_S = 2.0


class ScenarioError(ValueError):
    pass


@dataclass
class Scenario:
    name: str
    description: str
    steps: list[dict[str, Any]]
    gpus: list[str] = field(default_factory=list)  # fake GPUs this server's load drives
    gpu_memory_utilization: float = 0.92


def builtin_scenarios() -> list[str]:
    return sorted(
        p.name[:-5]
        for p in resources.files("exporter.simulate").joinpath("scenarios").iterdir()
        if p.name.endswith(".yaml")
    )


def load_scenario(name_or_path: str) -> Scenario:
    if os.path.exists(name_or_path):
        with open(name_or_path, encoding="utf-8") as fh:
            text, name = fh.read(), os.path.basename(name_or_path).rsplit(".", 1)[0]
    else:
        ref = resources.files("exporter.simulate").joinpath("scenarios").joinpath(f"{name_or_path}.yaml")
        if not ref.is_file():
            raise ScenarioError(f"no scenario {name_or_path!r}; built in: {', '.join(builtin_scenarios())}")
        text, name = ref.read_text(encoding="utf-8"), name_or_path
    try:
        data = parse_yaml(text, name_or_path)
    except ConfigError as exc:
        raise ScenarioError(str(exc)) from None
    return parse_scenario(data, name)


def parse_scenario(data: Any, name: str) -> Scenario:
    if not isinstance(data, dict) or not isinstance(data.get("steps"), list) or not data["steps"]:
        raise ScenarioError(f"{name}: expected a mapping with a non-empty `steps` list")
    for i, step in enumerate(data["steps"]):
        where = f"{name}: steps[{i}]"
        if not isinstance(step, dict) or step.get("action") not in ACTIONS:
            raise ScenarioError(f"{where}: expected an action, one of {', '.join(ACTIONS)}")
        for key, value in step.items():
            if key == "action":
                continue
            if key in RAMPS:
                if not (
                    isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value)
                ):
                    raise ScenarioError(f"{where}.{key}: expected [from, to]")
            elif key in NUMBERS:
                if not isinstance(value, (int, float)) or value < 0:
                    raise ScenarioError(f"{where}.{key}: expected a number of at least 0")
            elif key == "stage":
                if value not in STAGES:
                    raise ScenarioError(f"{where}.stage: expected one of {', '.join(STAGES)}")
            else:
                raise ScenarioError(f"{where}.{key}: unknown key")
    util = data.get("gpu_memory_utilization", 0.92)
    if isinstance(util, bool) or not isinstance(util, (int, float)) or not 0 < util <= 1:
        raise ScenarioError(f"{name}: gpu_memory_utilization: expected a share in (0, 1], got {util!r}")
    unknown = set(data) - {"description", "steps", "gpus", "gpu_memory_utilization"}
    if unknown:
        raise ScenarioError(f"{name}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    return Scenario(
        name, str(data.get("description", "")), data["steps"], [str(g) for g in data.get("gpus", [])], float(util)
    )


class SimulatedServer:
    """One simulated vLLM server: a listener on a fixed port, its log file, and the GPUs it loads."""

    def __init__(
        self,
        name: str,
        scenario: Scenario,
        log_path: str,
        port: int,
        gpus: FakeGpuBackend | None = None,
        engines: int = 1,
        old_names: bool = False,
    ) -> None:
        self.name = name
        self.scenario = scenario
        self.metrics = VllmMetrics(
            engines=engines, old_names=old_names, gpu_memory_utilization=scenario.gpu_memory_utilization
        )
        self.memory = VllmMemoryModel(utilization=scenario.gpu_memory_utilization)
        self.standin = VllmStandIn(self.metrics)
        self.listener = Listener(self.standin.app(), port=port)
        self.log = VllmLogWriter(log_path, gpu_memory_utilization=scenario.gpu_memory_utilization)
        self.gpus = gpus
        self._carry = {"requests": 0.0, "preemptions": 0.0}

    async def run(self) -> None:
        await self.listener.setup()
        try:
            while True:
                for step in self.scenario.steps:
                    if step["action"] == "repeat":
                        break
                    await self._step(step)
                else:
                    return
        finally:
            await self.listener.cleanup()

    def _gpu(self, stage: str, beyond_budget: float = 0.0) -> None:
        self._set_gpus(self.memory.used(stage, beyond_budget))

    def _set_gpus(self, fraction: float) -> None:
        if self.gpus is not None:
            for g in self.scenario.gpus:
                self.gpus.set_used(g, int(self.gpus.total * fraction))

    async def _step(self, step: dict[str, Any]) -> None:
        action = step["action"]
        seconds = float(step.get("seconds", 0))
        if action == "start":
            self.standin.serving = False
            await self.listener.close()
            self.metrics.restart()
            self.log.start()
            self._gpu("start")
        elif action == "load_weights":
            await asyncio.sleep(seconds)
            self.log.weights_loaded()
            self._gpu("weights")
        elif action == "size_kv_cache":
            await asyncio.sleep(seconds)
            self._gpu("profiling")
            self.log.kv_cache_sized()
            self._gpu("kv_cache")
        elif action == "ready":
            await asyncio.sleep(seconds)
            self._gpu("ready")
            self.log.ready()
            self.standin.serving = True
            await self.listener.open()
        elif action == "serve":
            await self._serve(step, seconds)
        elif action == "oom":
            self.log.oom(step["stage"])
            self.standin.serving = False
            await self.listener.close()
            self._gpu("off")
        elif action == "wait":
            await asyncio.sleep(seconds)

    async def _serve(self, step: dict[str, Any], seconds: float) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        next_stats = start
        next_spike = start + float(step.get("spike_every", 0) or 0)
        while True:
            now = loop.time()
            frac = min(1.0, (now - start) / seconds) if seconds else 1.0
            v = {k: step[k][0] + (step[k][1] - step[k][0]) * frac if k in step else None for k in RAMPS}
            for e in range(self.metrics.engines):
                self.metrics.set_load(
                    e, EngineLoad(int(v["running"] or 0), int(v["waiting"] or 0), float(v["kv_usage"] or 0))
                )
            self._carry["requests"] += float(step.get("requests_per_s", 0)) * TICK_S
            self._carry["preemptions"] += float(step.get("preemptions_per_s", 0)) * TICK_S
            n, p = int(self._carry["requests"]), int(self._carry["preemptions"])
            self._carry["requests"] -= n
            self._carry["preemptions"] -= p
            if n or p:
                hit = float(v["prefix_hit"] or 0)
                self.metrics.serve_requests(
                    0,
                    n,
                    prompt_tokens=20_000,
                    cached_tokens=int(20_000 * hit),
                    output_tokens=400,
                    ttft_s=0.3 + 2 * float(v["kv_usage"] or 0),
                    queue_s=0.05 * int(v["waiting"] or 0),
                    preemptions=p,
                )
            beyond = float(v["beyond_budget"] or 0)
            self._gpu("ready", beyond)
            if step.get("spike_every") and now >= next_spike:
                self._set_gpus(float(step.get("spike_used", 0.99)))
                await asyncio.sleep(float(step.get("spike_ms", 150)) / 1000)
                self._gpu("ready", beyond)
                next_spike = now + float(step["spike_every"])
            if now >= next_stats:
                self.log.stats(
                    int(v["running"] or 0),
                    int(v["waiting"] or 0),
                    float(v["kv_usage"] or 0),
                    float(v["prefix_hit"] or 0),
                )
                next_stats = now + STATS_EVERY_S
            if frac >= 1.0:
                return
            await asyncio.sleep(TICK_S)
