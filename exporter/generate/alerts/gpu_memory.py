"""GPU memory judged against the budget vLLM was given (gpu_memory_utilization x total), not against the card."""

from __future__ import annotations

from exporter import catalog
from exporter.generate.spec import (
    GPU_BY,
    AlertSpec,
    Case,
    after,
    gpu_series,
    num,
    server_series,
)
from exporter.generate.thresholds import Thresholds


def specs(t: Thresholds) -> list[AlertSpec]:
    out: list[AlertSpec] = []
    gpu_runbook = {
        "meaning": "A GPU's memory peaked beyond the budget vLLM was given (`--gpu-memory-utilization` x total). vLLM "
        "claims that budget at start and fills what weights and activations leave with KV cache, so use "
        "at the budget is normal; use beyond it is memory vLLM did not plan for: another process on the "
        "GPU, an activation spike the profile missed, fragmentation, or a leak.",
        "confirm": f"`gpu:vllm_headroom_gpu_memory_over_budget:ratio` and `{catalog.series('gpu_memory_peak_used_bytes')}` "
        "(max over a trailing window of 10 Hz samples) per GPU; "
        f"`{catalog.series('gpu_process_memory_used_bytes')}` for other processes on the GPU; "
        f"`{catalog.series('gpu_memory_utilization_ratio')}` for the budget; whether the excess grows under the "
        "same load.",
        "first": "Find what uses memory beyond the budget: stop other processes on the GPU; cap "
        "`--max-num-batched-tokens` if prefill spikes overshoot; restart to clear fragmentation and record "
        "whether it returns. Lowering `--gpu-memory-utilization` shrinks the KV cache and is not the fix "
        "for memory someone else takes.",
        "scale": "If vLLM itself keeps overshooting its budget at the target load after that, the GPU count cannot "
        "hold the load with margin: scale out.",
        "evidence": "Peak and steady GPU memory per GPU, the budget, the processes on the GPU, and the vLLM memory "
        "settings.",
    }
    ob, hc = t.gpu_over_budget_warning_ratio, t.gpu_headroom_critical_ratio

    def memory_case(peak: float, util: float | None, total: float = 100.0) -> list[tuple[str, str]]:
        out = [
            gpu_series(catalog.series("gpu_memory_peak_used_bytes"), f"{num(peak * total)}x40"),
            gpu_series(catalog.series("gpu_memory_total_bytes"), f"{num(total)}x40"),
            gpu_series(catalog.series("gpu_memory_headroom_ratio"), f"{num(round(1 - peak, 6))}x40"),
        ]
        if util is not None:
            out.append(server_series(catalog.series("gpu_memory_utilization_ratio"), f"{num(util)}x40"))
        return out

    out.append(
        AlertSpec(
            "VllmGPUMemoryOverBudget",
            "warning",
            "ticket",
            t.gpu_over_budget_for,
            f"gpu:vllm_headroom_gpu_memory_over_budget:ratio > {num(ob)}",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} peaked {{ $value | humanizePercentage }} of its memory "
            f"beyond the budget vLLM was given (threshold {num(ob * 100)}%)",
            "Memory beyond vLLM's gpu_memory_utilization budget: another process, spikes past the profile, or a leak.",
            GPU_BY,
            [
                Case(
                    "a healthy server at utilization 0.97 with its CUDA graphs on top does not fire",
                    memory_case(0.974, 0.97),
                    after(t.gpu_over_budget_for),
                    False,
                ),
                Case(
                    "a healthy server at 0.92 with prefill spikes inside the budget does not fire",
                    memory_case(0.93, 0.92),
                    after(t.gpu_over_budget_for),
                    False,
                ),
                Case(
                    "use beyond the budget fires",
                    memory_case(round(0.9 + ob + 0.01, 6), 0.9),
                    after(t.gpu_over_budget_for),
                    True,
                ),
            ],
            gpu_runbook,
        )
    )
    out.append(
        AlertSpec(
            "VllmGPUMemoryHeadroomCritical",
            "critical",
            "page",
            t.gpu_headroom_critical_for,
            f"(gpu:vllm_headroom_gpu_memory_headroom_ratio:min < {num(hc)})\nand on (job, cluster, instance, gpu)\n"
            f"(gpu:vllm_headroom_gpu_memory_over_budget:ratio > {num(ob)})",
            "GPU {{ $labels.gpu }} on {{ $labels.instance }} peaked beyond vLLM's budget with {{ $value | "
            "humanizePercentage }} of its memory left (under " + num(hc * 100) + "%)",
            "Memory beyond vLLM's budget has all but filled the GPU: the next spike is an OOM. (CUDA graphs, captured "
            "after the KV cache, sit a little over the budget on a healthy server: the page needs more than "
            f"{num(ob * 100)}% of the card beyond it.)",
            GPU_BY,
            [
                Case(
                    "a healthy server at utilization 0.99 with its CUDA graphs on top does not page",
                    memory_case(0.995, 0.99),
                    after(t.gpu_headroom_critical_for),
                    False,
                ),
                Case(
                    "beyond the budget with almost nothing left pages",
                    memory_case(round(1 - hc / 2, 6), 0.92),
                    after(t.gpu_headroom_critical_for),
                    True,
                ),
            ],
            gpu_runbook,
        )
    )
    return out
