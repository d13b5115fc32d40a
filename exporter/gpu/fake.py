"""A scripted GPU backend: no hardware, fully controllable, for tests and the demo."""

from __future__ import annotations

import threading
from typing import Callable

from exporter.gpu.base import GpuError, GpuInfo, MemoryReading


class FakeGpuBackend:
    """`set_used` or a `script(index, monotonic_time) -> bytes` drives usage; `fail` injects errors."""

    name = "fake"
    vendor = "fake"

    def __init__(
        self,
        count: int = 8,
        model: str = "NVIDIA GB300",
        total_bytes: int = 288 * 1024**3,
        script: Callable[[int, float], int] | None = None,
    ) -> None:
        self.total = total_bytes
        self.model = model
        self.script = script
        self._lock = threading.Lock()
        self._used = {str(i): int(total_bytes * 0.5) for i in range(count)}
        self._fail: dict[str, GpuError] = {}
        self._procs: dict[str, list[tuple[int, int]]] = {}
        self.driver_info = {"driver_version": "580.65.06", "cuda_driver_version": "13.0"}

    def devices(self) -> list[GpuInfo]:
        return [GpuInfo(i, f"GPU-fake-{int(i):04d}-0000-0000-000000000000", self.model, "fake") for i in self._used]

    def set_used(self, index: int | str, used_bytes: int) -> None:
        with self._lock:
            self._used[str(index)] = int(used_bytes)

    def set_processes(self, index: int | str, procs: list[tuple[int, int]]) -> None:
        with self._lock:
            self._procs[str(index)] = procs

    def fail(self, index: int | str, lost: bool = False, message: str = "injected failure") -> None:
        with self._lock:
            self._fail[str(index)] = GpuError(message, lost=lost)

    def recover(self, index: int | str) -> None:
        with self._lock:
            self._fail.pop(str(index), None)

    def read_memory(self, index: str) -> MemoryReading:
        import time

        with self._lock:
            err = self._fail.get(index)
            if err is not None:
                raise err
            used = self.script(int(index), time.monotonic()) if self.script else self._used[index]
        return MemoryReading(min(int(used), self.total), self.total, 0)

    def processes(self, index: str) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._procs.get(index, []))

    def driver(self) -> dict[str, str]:
        return dict(self.driver_info)

    def close(self) -> None:
        pass
