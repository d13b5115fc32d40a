"""The guide's decision, in words: what to do next after a memory failure, by when it happened.

A loading-stage OOM (before readiness) is never answered with lower concurrency: the image, driver,
hardware and parallel topology come first. A runtime OOM (after readiness) is answered with less
context, concurrency or cache retention, a replay of the same requests, and scaling only when the target
load still leaves no stable headroom; never with new hardware first.
"""

from __future__ import annotations

from typing import Any

from exporter.logs.stages import GUESSES

STAGE_LABELS = {
    "weight_loading": "weight loading",
    "graph_capture": "torch.compile / CUDA-graph capture",
    "kv_cache_alloc": "memory profiling and KV-cache allocation",
    "warmup": "warm-up (after the KV cache was allocated)",
    "loading_unknown": "startup (step not named in the log)",
    "prefill": "prefill",
    "decode": "decode",
    "runtime_unknown": "serving (step not named in the log)",
}

_LOADING_DETAIL = {
    "weight_loading": "The weights did not fit on each GPU: spread them wider (more TP/EP ranks or GPUs), use a "
    "quantized checkpoint, and make sure no other process holds memory on these GPUs.",
    "graph_capture": "Memory ran out while compiling or capturing CUDA graphs: compare the capture sizes with the "
    "memory left after the KV cache; --enforce-eager isolates the cause (as a diagnosis only: it "
    "costs decode speed).",
    "kv_cache_alloc": "The KV cache could not be sized or allocated: weights plus the profiling peak left too little "
    "under gpu_memory_utilization{gmu}; compare max_model_len{mml} with the capacity the log "
    "states{cap}, then revisit gpu_memory_utilization, the KV-cache dtype or the topology.",
    "warmup": "Memory ran out in the warm-up runs, after the KV cache existed: the cache was sized too close to the "
    "limit for this topology; revisit gpu_memory_utilization and the CUDA-graph capture sizes.",
    "loading_unknown": "The log does not name the startup step that failed: check that no other process holds GPU "
    "memory when the engine starts, then read the traceback above the failure.",
}

_RUNTIME_DETAIL = {
    "prefill": "The failing step was a prefill: cap the prompt length or max_num_batched_tokens (chunked prefill) "
    "first.",
    "decode": "The failing step was a decode step: lower max_num_seqs or the context per request first.",
    "runtime_unknown": "The log does not show whether the step was a prefill or a decode: look for the scheduler dump "
    "above the traceback, or enable it, before choosing the first change.",
}


def _fmt(value: Any, prefix: str = "=") -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        value = f"{value:g}"
    return f"{prefix}{value}"


def _capacity(facts: dict[str, Any]) -> str:
    parts = []
    if facts.get("kv_cache_tokens"):
        parts.append(f"{facts['kv_cache_tokens']} tokens")
    if facts.get("estimated_max_model_len"):
        parts.append(f"vLLM estimates that max_model_len={facts['estimated_max_model_len']} would fit")
    if facts.get("kv_cache_needed_gib") and facts.get("kv_cache_memory_gib") is not None:
        parts.append(
            f"one request needs {facts['kv_cache_needed_gib']:g} GiB, {facts['kv_cache_memory_gib']:g} GiB is there"
        )
    return f" ({'; '.join(parts)})" if parts else ""


def _environment(facts: dict[str, Any]) -> str:
    """The image, driver and hardware as the log states them; what it does not state is said to be missing."""
    version = facts.get("vllm_version")
    image = f"the image (vLLM {version}" if version else "the image (the log does not state the vLLM version"
    build = [
        f"{name} {facts[key]}" for key, name in (("cuda_version", "CUDA"), ("rocm_version", "ROCm")) if facts.get(key)
    ]
    image += f", built for {' and '.join(build)})" if build else "; the CUDA/ROCm build is not in the log)"
    driver = facts.get("driver_version")
    driver_text = f"the driver ({driver})" if driver else "the driver (not in the log: check nvidia-smi or amd-smi)"
    gpu = facts.get("gpu_model")
    memory = facts.get("gpu_total_memory_gib")
    if gpu or memory:
        parts = [str(gpu)] if gpu else []
        if memory:
            parts.append(f"{memory:g} GiB per GPU as torch reports it")
        hardware = f"the hardware ({', '.join(parts)}: count and memory against the model's footprint)"
    else:
        hardware = (
            "the hardware (the log does not name the GPU: check its model, count and memory against the "
            "model's footprint)"
        )
    return f"{image}, {driver_text}, {hardware}"


def _guessed_phase(first_oom: dict[str, Any]) -> str:
    """When nothing in the log said whether the engine was ready, the advice says so, and what changes if the
    reading is wrong: the two phases call for opposite first moves."""
    decided_by = first_oom.get("stage_evidence")
    if decided_by not in GUESSES:
        return ""
    if decided_by == "allocator":
        why = "PyTorch's report shows no CUDA-graph memory yet, as at startup or in an engine run with --enforce-eager"
    else:
        why = "nothing around it says which; this is the default reading"
    if first_oom["phase"] == "loading":
        other = "if it had been serving, treat it as a runtime OOM: reduce context, concurrency or cache retention"
    else:
        other = (
            "if it never became ready, treat it as a loading-stage OOM: check the image, driver, hardware and "
            "topology first, not concurrency"
        )
    return (
        f"The log does not show whether the engine was ready when memory ran out: read as {first_oom['phase']} "
        f"({why}); {other}. "
    )


def _mamba_blocks(facts: dict[str, Any]) -> str:
    """vLLM's own check that max_num_seqs fits a hybrid model's state cache (vllm/config/compilation.py
    resolve_cudagraph_mode_and_sizes): a startup limit whose remedy vLLM names, unlike an OOM while loading."""
    seqs, blocks = facts.get("max_num_seqs"), facts.get("mamba_cache_blocks")
    ask = f"max_num_seqs={seqs}" if seqs is not None else "max_num_seqs"
    fit = f"the {blocks} blocks" if blocks is not None else "the blocks"
    return (
        "Loading-stage failure during KV-cache allocation, before the engine was ready: the hybrid model keeps one "
        f"Mamba cache block of recurrent state per decode sequence, and {ask} asks for more than {fit} that fit "
        f"under gpu_memory_utilization{_fmt(facts.get('gpu_memory_utilization'))}. Lower max_num_seqs to at most "
        f"{blocks if blocks is not None else 'that count'} (a limit vLLM checks at startup, before capturing CUDA "
        "graphs) or raise gpu_memory_utilization; if the target concurrency needs more blocks than that, spread the "
        "model over more GPUs or memory."
    )


def next_move(first_oom: dict[str, Any] | None, facts: dict[str, Any], events: dict[str, int]) -> str:
    """The recommendation for one log, from its first memory failure (or its absence)."""
    if first_oom is None:
        crashes = [k for k in ("comm_error", "illegal_memory_access", "engine_crash") if events.get(k)]
        if crashes:
            return (
                "No memory failure in this log, but the engine failed (" + ", ".join(crashes) + "): this is not a "
                "headroom decision. Fix that cause first; keep monitoring headroom once it serves again."
            )
        if events.get("engine_ready"):
            return (
                "No memory failure in this log and the engine reached readiness: tune and keep, and monitor "
                "KV-cache and GPU-memory headroom (vllm-headroom serve) at the target load."
            )
        return "No memory failure in this log."
    stage = first_oom["stage"]
    label = STAGE_LABELS.get(stage, stage)
    guess = _guessed_phase(first_oom)
    if first_oom.get("cause") == "mamba_cache_insufficient":
        return guess + _mamba_blocks(facts)
    if first_oom["phase"] == "loading":
        topo = (
            ", ".join(
                f"{short}{_fmt(facts.get(key))}"
                for key, short in (
                    ("tensor_parallel_size", "TP"),
                    ("pipeline_parallel_size", "PP"),
                    ("data_parallel_size", "DP"),
                )
                if facts.get(key) is not None
            )
            or "TP/PP/DP/EP sizes"
        )
        detail = _LOADING_DETAIL.get(stage, _LOADING_DETAIL["loading_unknown"]).format(
            gmu=_fmt(facts.get("gpu_memory_utilization")),
            mml=_fmt(facts.get("max_model_len")),
            cap=_capacity(facts),
        )
        when = "" if guess else ", before the engine was ready"
        return guess + (
            f"Loading-stage OOM during {label}{when}: lowering concurrency does not help here."
            f" Check first {_environment(facts)} and the parallel topology ({topo}). {detail}"
        )
    detail = _RUNTIME_DETAIL.get(stage, _RUNTIME_DETAIL["runtime_unknown"])
    when = "" if guess else ", after the engine was ready"
    return guess + (
        f"Runtime OOM during {label}{when}: the load outgrew the headroom. Reduce, one at a time, the context "
        f"(max_model_len{_fmt(facts.get('max_model_len'))}, prompt lengths), the concurrency (max_num_seqs, "
        "max_num_batched_tokens) or the cache retention (prefix caching; on hybrid models with vLLM 0.33 or later, "
        "--prefix-cache-retention-interval); replay the same request set after each change and watch the headroom. "
        f"{detail} Scale out only if the target load still leaves no stable headroom."
    )
