"""The backend protocol every GPU library adapter implements (exporter.gpu.choose picks one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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
