"""AMD GPUs through amdsmi (the optional `amd` extra), or the amdgpu driver's sysfs files without it.

PyPI's amdsmi carries no native library and must match the host's ROCm; without ROCm, `import amdsmi`
prints to stdout and raises KeyError. So the import is lazy, stdout is redirected while importing, and
any exception means "not available". amdsmi reports missing values as the string "N/A".
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
from typing import Any

from exporter.gpu.base import GpuError, GpuInfo, GpuUnavailable, MemoryReading

AMD_VENDOR_ID = "0x1002"


def _import_amdsmi() -> Any:
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            import amdsmi  # noqa: PLC0415
    except Exception as exc:  # KeyError: 'libamd_smi.so' without ROCm, ImportError without the extra
        raise GpuUnavailable(f"amdsmi not usable: {type(exc).__name__}: {exc}") from None
    return amdsmi


def _num(value: Any) -> int | None:
    if value in (None, "N/A", ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class AmdSmiBackend:
    name = "amdsmi"
    vendor = "amd"

    def __init__(self, module: Any = None) -> None:
        self.smi = module or _import_amdsmi()
        try:
            self.smi.amdsmi_init()
            handles = self.smi.amdsmi_get_processor_handles()
        except Exception as exc:
            raise GpuUnavailable(f"amdsmi init failed: {exc}") from None
        self._handles = {str(i): h for i, h in enumerate(handles)}
        self._infos = [GpuInfo(str(i), self._uuid(h), self._model(h), "amd") for i, h in enumerate(handles)]

    def _model(self, h: Any) -> str:
        try:
            info = self.smi.amdsmi_get_gpu_asic_info(h)
            name = info.get("market_name")
            if name and name != "N/A":
                return str(name)
        except Exception:
            pass
        return "AMD GPU"

    def _uuid(self, h: Any) -> str:
        try:
            return str(self.smi.amdsmi_get_gpu_device_uuid(h))
        except Exception:
            return ""

    def devices(self) -> list[GpuInfo]:
        return list(self._infos)

    def read_memory(self, index: str) -> MemoryReading:
        h = self._handles[index]
        vram = self.smi.AmdSmiMemoryType.VRAM
        try:
            total = _num(self.smi.amdsmi_get_gpu_memory_total(h, vram))
            used = _num(self.smi.amdsmi_get_gpu_memory_usage(h, vram))
        except Exception as exc:
            raise GpuError(f"amdsmi: {exc}") from None
        if total is None or used is None:
            raise GpuError("amdsmi: VRAM figures not available (N/A)")
        return MemoryReading(used, total, None)

    def processes(self, index: str) -> list[tuple[int, int]]:
        return []  # amdsmi's process list needs privileges on most hosts; not read

    def driver(self) -> dict[str, str]:
        out: dict[str, str] = {}
        try:
            first = next(iter(self._handles.values()))
            info = self.smi.amdsmi_get_gpu_driver_info(first)
            if info.get("driver_version") not in (None, "N/A"):
                out["driver_version"] = str(info["driver_version"])
        except Exception:
            pass
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.smi.amdsmi_shut_down()


class SysfsAmdBackend:
    """VRAM bytes straight from the amdgpu driver: `/sys/class/drm/cardN/device/mem_info_vram_{total,used}`."""

    name = "sysfs"
    vendor = "amd"

    def __init__(self, root: str = "/sys/class/drm") -> None:
        self._dirs: dict[str, str] = {}
        cards = sorted(
            glob.glob(os.path.join(root, "card[0-9]*")),
            key=lambda p: int(p.rsplit("card", 1)[1]) if p.rsplit("card", 1)[1].isdigit() else 1 << 30,
        )
        for card in cards:
            dev = os.path.join(card, "device")
            if not os.path.exists(os.path.join(dev, "mem_info_vram_total")):
                continue
            if _read(os.path.join(dev, "vendor"), "").strip() != AMD_VENDOR_ID:
                continue
            self._dirs[str(len(self._dirs))] = dev
        if not self._dirs:
            raise GpuUnavailable(f"no amdgpu VRAM files under {root}")
        self._infos = [
            GpuInfo(
                i,
                _read(os.path.join(d, "unique_id"), "").strip(),
                _read(os.path.join(d, "product_name"), "AMD GPU").strip() or "AMD GPU",
                "amd",
            )
            for i, d in self._dirs.items()
        ]

    def devices(self) -> list[GpuInfo]:
        return list(self._infos)

    def read_memory(self, index: str) -> MemoryReading:
        d = self._dirs[index]
        try:
            with open(os.path.join(d, "mem_info_vram_total")) as f:
                total = int(f.read().strip())
            with open(os.path.join(d, "mem_info_vram_used")) as f:
                used = int(f.read().strip())
        except (OSError, ValueError) as exc:
            raise GpuError(f"sysfs: {exc}", lost=isinstance(exc, FileNotFoundError)) from None
        return MemoryReading(used, total, None)

    def processes(self, index: str) -> list[tuple[int, int]]:
        return []

    def driver(self) -> dict[str, str]:
        version = _read("/sys/module/amdgpu/version", "").strip()
        return {"driver_version": version} if version else {}

    def close(self) -> None:
        pass


def _read(path: str, default: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default
