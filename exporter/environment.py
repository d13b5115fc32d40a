"""The guide's prerequisites, checked: driver, CUDA driver, GPU model and count, vLLM version."""

from __future__ import annotations

import re
from typing import Any

from exporter.config import EnvironmentConfig

CHECKS = ("driver_min_version", "cuda_driver_major", "gpu_model_supported", "gpu_count", "vllm_min_version")
_VERSION_SHAPE = re.compile(r"^v?\d+(?:\.\d+){0,3}(?:[.+-][A-Za-z0-9]{1,16}){0,3}$")


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:4])


def safe_version(text: Any) -> str | None:
    """A version string from a log, only if it has a version's shape: never free text in a label."""
    if not isinstance(text, str) or len(text) > 40 or not _VERSION_SHAPE.match(text):
        return None
    return text


def evaluate(
    cfg: EnvironmentConfig, vendor: str | None, driver: dict[str, str], gpu_models: list[str], vllm_versions: list[str]
) -> dict[str, bool]:
    """Each check that can be judged from what is known; an unknown one is left out, not failed."""
    out: dict[str, bool] = {}
    dv = driver.get("driver_version")
    if dv and vendor in ("nvidia", "fake"):  # the fake backend stands in for NVIDIA GPUs
        out["driver_min_version"] = version_tuple(dv) >= version_tuple(cfg.min_driver_version)
    cv = driver.get("cuda_driver_version")
    if cv:
        out["cuda_driver_major"] = version_tuple(cv)[:1] >= (cfg.min_cuda_driver_major,)
    if gpu_models:
        wanted = [m.lower() for m in cfg.gpu_models]
        out["gpu_model_supported"] = all(any(w in model.lower() for w in wanted) for model in gpu_models)
        out["gpu_count"] = len(gpu_models) >= cfg.min_gpu_count
    if vllm_versions:
        out["vllm_min_version"] = all(version_tuple(v) >= version_tuple(cfg.min_vllm_version) for v in vllm_versions)
    return out
