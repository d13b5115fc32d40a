"""The simulator's GPU memory follows vLLM's plan: the budget is claimed at KV sizing and held whatever the load."""

from __future__ import annotations

import asyncio
import re

import pytest

from exporter.gpu.fake import FakeGpuBackend
from exporter.simulate.memory import VllmMemoryModel
from exporter.simulate.scenario import SimulatedServer, load_scenario
from tests.conftest import free_port


def test_kv_cache_gets_what_the_budget_leaves_after_the_profiled_peak():
    m = VllmMemoryModel(utilization=0.9, context=0.01, weights=0.5, activation_peak=0.05, non_torch=0.02)
    assert m.kv_cache == pytest.approx(0.9 - 0.58)
    assert m.used("weights") < m.used("profiling") < m.used("kv_cache") == pytest.approx(0.9)
    assert m.used("ready") == pytest.approx(0.9 + m.graphs)  # CUDA graphs come after the KV cache
    assert m.used("ready", beyond_budget=0.5) == 1.0  # capped at the card


def test_weights_over_the_budget_are_refused_as_vllm_refuses_them():
    with pytest.raises(ValueError, match="no available memory for the cache blocks"):
        VllmMemoryModel(utilization=0.5, weights=0.48)
    with pytest.raises(ValueError, match="unknown stage"):
        VllmMemoryModel().used("serving")


@pytest.mark.parametrize("scenario, util", [("healthy", 0.92), ("healthy_high_utilization", 0.97)])
def test_a_healthy_simulated_server_sits_at_its_budget_while_kv_usage_swings(tmp_path, scenario, util):
    """The old simulator showed 82-84 % used while claiming 0.92; vLLM shows its budget from readiness on."""
    sc = load_scenario(scenario)
    assert sc.gpu_memory_utilization == util
    gpus = FakeGpuBackend(count=8)
    server = SimulatedServer("s", sc, str(tmp_path / "s.log"), free_port(), gpus)
    seen: list[tuple[float, float]] = []

    async def run() -> None:
        task = asyncio.create_task(server.run())
        while len(seen) < 12:
            await asyncio.sleep(0.25)
            if server.standin.serving:
                g = sc.gpus[0]
                used = gpus.read_memory(g).used_bytes / gpus.total
                kv = re.search(r"^vllm:kv_cache_usage_perc\{[^}]*\} (\S+)$", server.metrics.render().decode(), re.M)
                seen.append((used, float(kv.group(1)) if kv else -1.0))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run())
    used = {round(u, 4) for u, _ in seen}
    assert len({kv for _, kv in seen}) > 1 and min(kv for _, kv in seen) >= 0, seen  # the KV usage moved
    assert used == {round(VllmMemoryModel(utilization=util).used("ready"), 4)}, seen
    assert 'gpu_memory_utilization="%g"' % util in server.metrics.render().decode()
