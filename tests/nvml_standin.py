"""A pure-Python stand-in for libnvidia-ml: the real `pynvml` bindings run against it, ctypes and all.

pynvml looks each C function up on its loaded library object; this object answers those look-ups with
Python functions that read and fill the same ctypes structures the driver would.
"""

from __future__ import annotations

import ctypes

import pynvml

SUCCESS, NOT_SUPPORTED, INSUFFICIENT_SIZE, GPU_IS_LOST, UNKNOWN = 0, 3, 7, 15, 999


class FakeNvmlLib:
    def __init__(
        self,
        gpus: int = 8,
        total: int = 288 * 1024**3,
        driver: bytes = b"580.65.06",
        cuda: int = 13000,
        v2: bool = True,
        mig_gpu: int | None = None,
    ) -> None:
        self.total = total
        self.used = {i: total // 4 for i in range(gpus)}
        self.gpus = gpus
        self.driver_version = driver
        self.cuda = cuda
        self.v2 = v2
        self.mig_gpu = mig_gpu
        self.errors: dict[int, int] = {}
        self.procs: dict[int, list[tuple[int, int]]] = {0: [(4242, 1 << 30), (4243, 2 << 30)]}
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        fn = getattr(type(self), "_" + name, None)
        if fn is None:
            raise AttributeError(name)
        self.calls.append(name)
        return lambda *args: fn(self, *args)

    @staticmethod
    def _index(handle) -> int:
        return ctypes.cast(handle, ctypes.c_void_p).value - 0x1000

    def _nvmlInitWithFlags(self, flags):
        return SUCCESS

    def _nvmlShutdown(self):
        return SUCCESS

    def _nvmlDeviceGetCount_v2(self, count_ref):
        count_ref._obj.value = self.gpus
        return SUCCESS

    def _nvmlDeviceGetHandleByIndex_v2(self, index, handle_ref):
        ctypes.memmove(
            ctypes.addressof(handle_ref._obj),
            ctypes.byref(ctypes.c_void_p(0x1000 + index.value)),
            ctypes.sizeof(ctypes.c_void_p),
        )
        return SUCCESS

    def _nvmlDeviceGetName(self, handle, buf, size):
        i = self._index(handle)
        buf.value = b"NVIDIA GB300 MIG 1g.36gb" if i >= 100 else b"NVIDIA GB300"
        return SUCCESS

    def _nvmlDeviceGetUUID(self, handle, buf, size):
        buf.value = f"GPU-{self._index(handle):08x}-1111-2222-3333-444444444444".encode()
        return SUCCESS

    def _nvmlDeviceGetMemoryInfo_v2(self, handle, mem_ref):
        if not self.v2:
            return 13  # FUNCTION_NOT_FOUND: an old driver
        i = self._index(handle)
        if i in self.errors:
            return self.errors[i]
        m = mem_ref._obj
        assert m.version == pynvml.nvmlMemory_v2
        m.total, m.reserved = self.total, 512 << 20
        m.used = self.used.get(i, 1 << 30)
        m.free = m.total - m.reserved - m.used
        return SUCCESS

    def _nvmlDeviceGetMemoryInfo(self, handle, mem_ref):
        i = self._index(handle)
        if i in self.errors:
            return self.errors[i]
        m = mem_ref._obj
        m.total, m.used = self.total, self.used.get(i, 1 << 30)
        m.free = m.total - m.used
        return SUCCESS

    def _nvmlSystemGetDriverVersion(self, buf, size):
        buf.value = self.driver_version
        return SUCCESS

    def _nvmlSystemGetCudaDriverVersion(self, ref):
        ref._obj.value = self.cuda
        return SUCCESS

    def _nvmlDeviceGetComputeRunningProcesses_v3(self, handle, count_ref, procs):
        rows = self.procs.get(self._index(handle), [])
        if not rows:
            count_ref._obj.value = 0
            return SUCCESS
        if procs is None:
            count_ref._obj.value = len(rows)
            return INSUFFICIENT_SIZE
        for k, (pid, used) in enumerate(rows):
            procs[k].pid, procs[k].usedGpuMemory = pid, used
        count_ref._obj.value = len(rows)
        return SUCCESS

    def _nvmlDeviceGetMigMode(self, handle, cur_ref, pend_ref):
        if self._index(handle) != self.mig_gpu:
            return NOT_SUPPORTED
        cur_ref._obj.value, pend_ref._obj.value = 1, 1
        return SUCCESS

    def _nvmlDeviceGetMaxMigDeviceCount(self, handle, count_ref):
        count_ref._obj.value = 2
        return SUCCESS

    def _nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index, handle_ref):
        if index.value == 1:
            return 6  # NOT_FOUND: slot without an instance
        return self._nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(100 + index.value), handle_ref)


def install(lib: FakeNvmlLib) -> None:
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.nvmlLib = lib


def uninstall() -> None:
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.nvmlLib = None
