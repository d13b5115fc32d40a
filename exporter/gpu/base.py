"""The backend protocol every GPU library adapter implements, and how one is chosen."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("vllm_headroom.gpu")


@dataclass(frozen=True)
class GpuInfo:
    """A device as labels see it. `index` is the `gpu` label: "3", or "3.1" for MIG instance 1 of GPU 3."""

    index: str
    uuid: str
    model: str
    vendor: str  # "nvidia" | "amd" | "fake"


@dataclass(frozen=True)
class MemoryReading:
    used_bytes: int
    total_bytes: int
    reserved_bytes: int | None = None  # NVML memory v2: driver-reserved, counted in neither used nor free


class GpuError(Exception):
    """A read failed. `lost` marks a GPU that fell off the bus (NVML's GPU_IS_LOST)."""

    def __init__(self, message: str, lost: bool = False) -> None:
        super().__init__(message)
        self.lost = lost


class GpuUnavailable(Exception):
    """The library or driver is not on this machine: no GPUs to watch, which is not an error."""


class GpuBackend(Protocol):
    name: str
    vendor: str

    def devices(self) -> list[GpuInfo]: ...

    def read_memory(self, index: str) -> MemoryReading: ...

    def processes(self, index: str) -> list[tuple[int, int]]: ...  # (host pid, used bytes)

    def driver(self) -> dict[str, str]: ...  # driver_version, cuda_driver_version / rocm_version

    def close(self) -> None: ...


def open_backend(name: str, fake_count: int = 8, fake_model: str = "NVIDIA GB300",
                 fake_total_bytes: int = 288 * 1024**3) -> GpuBackend | None:
    """Open the configured backend; `auto` tries NVML, then amdsmi, then sysfs, and says once what it found."""
    if name == "none":
        log.info("GPU memory: not watched (gpu.backend is none)")
        return None
    if name == "fake":
        from exporter.gpu.fake import FakeGpuBackend

        log.info("GPU memory: fake backend with %d scripted GPUs (tests and demo only)", fake_count)
        return FakeGpuBackend(fake_count, fake_model, fake_total_bytes)
    tried: list[str] = []
    for candidate in (["nvml", "amdsmi", "sysfs"] if name == "auto" else [name]):
        try:
            backend = _open(candidate)
        except GpuUnavailable as exc:
            tried.append(f"{candidate}: {exc}")
            continue
        devices = backend.devices()
        log.info("GPU memory: %s backend, %d device(s): %s", backend.name, len(devices),
                 ", ".join(f"{d.index}={d.model}" for d in devices) or "none")
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
