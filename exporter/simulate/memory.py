"""GPU memory of one vLLM worker GPU over its life, as vLLM plans it, for the simulator.

vLLM's V1 worker sizes the KV cache as `total x gpu_memory_utilization - profiled peak` (weights, the
activation peak of a max-size dummy batch, non-torch memory): vllm/v1/worker/gpu_worker.py,
`determine_available_memory` (vllm-project/vllm at 0012cf69). The KV blocks are allocated once, up front,
so the memory a GPU shows does not follow KV usage: it sits at the budget from readiness on, full cache or
empty. CUDA graphs are captured after the KV cache is allocated (`compile_or_warm_up_model` calls
`capture_model`), so their memory, small next to the budget, comes on top of it; the sampler warm-up then
preallocates its largest buffers inside what the profile measured. Activation memory during prefill is
reused from the allocator's cache, within the profiled peak: a healthy prefill does not push use past the
budget. What does: another process on the GPU, fragmentation, a leak -- `beyond_budget` here.
"""

from __future__ import annotations

from dataclasses import dataclass

STAGES = ("off", "start", "weights", "profiling", "kv_cache", "ready")


@dataclass(frozen=True)
class VllmMemoryModel:
    """Shares of one GPU's total memory; `used(stage)` is what NVML would show for the vLLM process."""

    utilization: float = 0.92  # --gpu-memory-utilization (0.9 default; 0.92 in some releases)
    context: float = 0.004  # CUDA context and NCCL buffers after init
    weights: float = 0.55  # this rank's shard of the weights
    activation_peak: float = 0.05  # the profile run's torch peak increase
    non_torch: float = 0.01
    graphs: float = 0.004  # CUDA graphs, captured after the KV cache

    def __post_init__(self) -> None:
        if not 0 < self.utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.utilization}")
        if self.kv_cache <= 0:
            raise ValueError(
                "weights and activations exceed the budget: vLLM would refuse to start "
                "(no available memory for the cache blocks)"
            )

    @property
    def kv_cache(self) -> float:
        """The KV cache's share of the GPU: what the budget leaves after the profiled peak."""
        return self.utilization - (self.context + self.weights + self.activation_peak + self.non_torch)

    def used(self, stage: str, beyond_budget: float = 0.0) -> float:
        """Share of the GPU in use at `stage`, plus memory vLLM did not plan for; capped at the card."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r} (known: {', '.join(STAGES)})")
        base = {
            "off": 0.0,
            "start": self.context,
            "weights": self.context + self.weights,
            "profiling": self.context + self.weights + self.activation_peak + self.non_torch,
            "kv_cache": self.utilization,
            "ready": self.utilization + self.graphs,
        }[stage]
        return min(1.0, base + beyond_budget)
