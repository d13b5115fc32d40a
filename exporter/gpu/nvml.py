"""NVIDIA GPUs through NVML, with NVIDIA's official bindings (`nvidia-ml-py`, module `pynvml`).

Memory info v2 carries driver-reserved memory (total = reserved + used + free); older drivers and MIG
devices answer only v1, so the adapter falls back once and remembers. `NVMLError` objects are unhashable
and `NVMLLibraryMismatchError` is not an `NVMLError`: both are handled by code, not by set membership.
"""

from __future__ import annotations

from typing import Any

from exporter.gpu.base import GpuError, GpuInfo, GpuUnavailable, MemoryReading


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlBackend:
    name = "nvml"
    vendor = "nvidia"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise GpuUnavailable(f"nvidia-ml-py is not installed ({exc})") from None
        self.nv = pynvml
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, NVMLLibraryMismatchError, ...
            raise GpuUnavailable(f"NVML not usable: {exc}") from None
        self._handles: dict[str, Any] = {}
        self._infos: list[GpuInfo] = []
        self._v2 = hasattr(pynvml, "nvmlMemory_v2")
        self._discover()

    def _discover(self) -> None:
        nv = self.nv
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            model = _text(nv.nvmlDeviceGetName(h))
            self._handles[str(i)] = h
            self._infos.append(GpuInfo(str(i), _text(nv.nvmlDeviceGetUUID(h)), model, "nvidia"))
            for j, mh in self._mig_handles(h):
                key = f"{i}.{j}"
                self._handles[key] = mh
                self._infos.append(GpuInfo(key, _text(nv.nvmlDeviceGetUUID(mh)), f"{model} MIG", "nvidia"))

    def _mig_handles(self, h: Any) -> list[tuple[int, Any]]:
        nv = self.nv
        try:
            current, _pending = nv.nvmlDeviceGetMigMode(h)
        except nv.NVMLError:
            return []  # not a MIG-capable GPU
        if current != getattr(nv, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        out = []
        for j in range(nv.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                out.append((j, nv.nvmlDeviceGetMigDeviceHandleByIndex(h, j)))
            except nv.NVMLError:
                continue  # that slot holds no instance
        return out

    def devices(self) -> list[GpuInfo]:
        return list(self._infos)

    def _error(self, exc: Exception) -> GpuError:
        code = getattr(exc, "value", None)
        lost = code == getattr(self.nv, "NVML_ERROR_GPU_IS_LOST", 15)
        return GpuError(f"NVML: {exc}", lost=lost)

    def read_memory(self, index: str) -> MemoryReading:
        nv = self.nv
        h = self._handles[index]
        try:
            if self._v2:
                try:
                    m = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
                    return MemoryReading(int(m.used), int(m.total), int(m.reserved))
                except nv.NVMLError as exc:
                    if getattr(exc, "value", None) not in (
                        getattr(nv, "NVML_ERROR_FUNCTION_NOT_FOUND", 13),
                        getattr(nv, "NVML_ERROR_NOT_SUPPORTED", 3),
                        getattr(nv, "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", 25),
                    ):
                        raise
                    self._v2 = False  # this driver answers v1 only
            m = nv.nvmlDeviceGetMemoryInfo(h)
            return MemoryReading(int(m.used), int(m.total), None)
        except nv.NVMLError as exc:
            raise self._error(exc) from None

    def processes(self, index: str) -> list[tuple[int, int]]:
        nv = self.nv
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(self._handles[index])
        except nv.NVMLError as exc:
            raise self._error(exc) from None
        return [(int(p.pid), int(p.usedGpuMemory or 0)) for p in procs]

    def driver(self) -> dict[str, str]:
        nv = self.nv
        out: dict[str, str] = {}
        try:
            out["driver_version"] = _text(nv.nvmlSystemGetDriverVersion())
        except nv.NVMLError:
            pass
        try:
            v = int(nv.nvmlSystemGetCudaDriverVersion())  # e.g. 13000 for CUDA 13.0
            out["cuda_driver_version"] = f"{v // 1000}.{v % 1000 // 10}"
        except nv.NVMLError:
            pass
        return out

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass
