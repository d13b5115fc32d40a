"""Which GPU backend to open: the configured one, or for `auto` NVML, then amdsmi, then sysfs.

Apart from base.py so that base, which every backend imports, imports no backend.
"""

from __future__ import annotations

import logging

from exporter.gpu.base import GpuBackend, GpuUnavailable

log = logging.getLogger("vllm_headroom.gpu")


def open_backend(
    name: str, fake_count: int = 8, fake_model: str = "NVIDIA GB300", fake_total_bytes: int = 288 * 1024**3
) -> GpuBackend | None:
    """Open the configured backend; `auto` tries NVML, then amdsmi, then sysfs, and says once what it found."""
    if name == "none":
        log.info("GPU memory: not watched (gpu.backend is none)")
        return None
    if name == "fake":
        from exporter.gpu.fake import FakeGpuBackend

        log.info("GPU memory: fake backend with %d scripted GPUs (tests and demo only)", fake_count)
        return FakeGpuBackend(fake_count, fake_model, fake_total_bytes)
    tried: list[str] = []
    for candidate in ["nvml", "amdsmi", "sysfs"] if name == "auto" else [name]:
        try:
            backend = _open(candidate)
        except GpuUnavailable as exc:
            tried.append(f"{candidate}: {exc}")
            continue
        devices = backend.devices()
        log.info(
            "GPU memory: %s backend, %d device(s): %s",
            backend.name,
            len(devices),
            ", ".join(f"{d.index}={d.model}" for d in devices) or "none",
        )
        return backend
    if name == "auto":
        log.info("GPU memory: no GPU library found, GPU series are not exported (%s)", "; ".join(tried))
        return None
    raise GpuUnavailable("; ".join(tried))


def _open(name: str) -> GpuBackend:
    if name == "nvml":
        from exporter.gpu.nvml import NvmlBackend

        return NvmlBackend()
    if name == "amdsmi":
        from exporter.gpu.amd import AmdSmiBackend

        return AmdSmiBackend()
    if name == "sysfs":
        from exporter.gpu.amd import SysfsAmdBackend

        return SysfsAmdBackend()
    raise GpuUnavailable(f"unknown backend {name!r}")
