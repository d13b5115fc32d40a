"""GPU backends and the sampler: NVML through its real bindings, amdsmi and sysfs, the fake, peaks, faults."""

from __future__ import annotations

import time
import types

import pytest

from exporter.gpu.amd import AmdSmiBackend, SysfsAmdBackend
from exporter.gpu.base import GpuUnavailable
from exporter.gpu.choose import open_backend
from exporter.gpu.fake import FakeGpuBackend
from exporter.gpu.sampler import GpuSampler
from tests import nvml_standin


@pytest.fixture
def nvml():
    lib = nvml_standin.FakeNvmlLib()
    nvml_standin.install(lib)
    yield lib
    nvml_standin.uninstall()


def test_nvml_adapter_through_the_real_bindings(nvml):
    from exporter.gpu.nvml import NvmlBackend

    b = NvmlBackend()
    devs = b.devices()
    assert [d.index for d in devs] == [str(i) for i in range(8)]
    assert devs[3].model == "NVIDIA GB300" and devs[3].uuid.startswith("GPU-00000003-")
    nvml.used[3] = 200 * 1024**3
    m = b.read_memory("3")
    assert m.used_bytes == 200 * 1024**3 and m.total_bytes == 288 * 1024**3 and m.reserved_bytes == 512 << 20
    assert b.processes("0") == [(4242, 1 << 30), (4243, 2 << 30)] and b.processes("1") == []
    assert b.driver() == {"driver_version": "580.65.06", "cuda_driver_version": "13.0"}
    assert "nvmlDeviceGetMemoryInfo_v2" in nvml.calls


def test_nvml_v1_fallback_and_lost_gpu(nvml):
    from exporter.gpu.base import GpuError
    from exporter.gpu.nvml import NvmlBackend

    nvml.v2 = False
    b = NvmlBackend()
    m = b.read_memory("0")
    assert m.reserved_bytes is None and m.used_bytes == nvml.used[0]
    nvml.errors[2] = nvml_standin.GPU_IS_LOST
    with pytest.raises(GpuError) as err:
        b.read_memory("2")
    assert err.value.lost
    nvml.errors[2] = nvml_standin.UNKNOWN
    with pytest.raises(GpuError) as err:
        b.read_memory("2")
    assert not err.value.lost


def test_nvml_mig_instances(nvml):
    from exporter.gpu.nvml import NvmlBackend

    nvml.mig_gpu = 0
    b = NvmlBackend()
    indexes = [d.index for d in b.devices()]
    assert indexes[:2] == ["0", "0.0"] and "0.1" not in indexes
    assert b.devices()[1].model.endswith("MIG")


def test_no_driver_is_unavailable_not_a_crash():
    nvml_standin.uninstall()
    from exporter.gpu.nvml import NvmlBackend

    with pytest.raises(GpuUnavailable, match="NVML"):
        NvmlBackend()
    chosen = open_backend("auto")
    assert chosen is None or chosen.name in ("amdsmi", "sysfs")  # NVML is gone: never chosen


def test_auto_prefers_nvml_and_otherwise_says_it_found_none(nvml, monkeypatch, caplog):
    import logging

    from exporter.gpu import choose

    assert open_backend("auto").name == "nvml"
    tried = []

    def unavailable(name: str):
        tried.append(name)
        raise GpuUnavailable(f"no {name} here")

    monkeypatch.setattr(choose, "_open", unavailable)
    with caplog.at_level(logging.INFO, logger="vllm_headroom"):
        assert open_backend("auto") is None
    assert tried == ["nvml", "amdsmi", "sysfs"] and "no GPU library found" in caplog.text
    with pytest.raises(GpuUnavailable, match="no nvml here"):
        open_backend("nvml")  # asked for by name: an error, not a silent None


def test_amdsmi_adapter_with_a_fake_module():
    class Smi:
        AmdSmiMemoryType = types.SimpleNamespace(VRAM="VRAM")

        def amdsmi_init(self):
            pass

        def amdsmi_shut_down(self):
            pass

        def amdsmi_get_processor_handles(self):
            return ["h0", "h1"]

        def amdsmi_get_gpu_asic_info(self, h):
            return {"market_name": "AMD Instinct MI355X"}

        def amdsmi_get_gpu_device_uuid(self, h):
            return f"uuid-{h}"

        def amdsmi_get_gpu_memory_total(self, h, t):
            return 288 * 1024**3

        def amdsmi_get_gpu_memory_usage(self, h, t):
            return "N/A" if h == "h1" else 100 * 1024**3

        def amdsmi_get_gpu_driver_info(self, h):
            return {"driver_version": "6.12.12"}

    b = AmdSmiBackend(Smi())
    assert [d.model for d in b.devices()] == ["AMD Instinct MI355X"] * 2
    assert b.read_memory("0").used_bytes == 100 * 1024**3
    from exporter.gpu.base import GpuError

    with pytest.raises(GpuError, match="N/A"):
        b.read_memory("1")
    assert b.driver() == {"driver_version": "6.12.12"}


def test_amdsmi_import_without_rocm_prints_nothing(capsys):
    from exporter.gpu.amd import _import_amdsmi

    try:
        _import_amdsmi()
    except GpuUnavailable:
        pass
    assert capsys.readouterr().out == ""


def test_sysfs_reader_on_a_fake_tree(tmp_path):
    for n, vendor in ((0, "0x1002"), (1, "0x10de"), (2, "0x1002")):
        dev = tmp_path / f"card{n}" / "device"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text(vendor + "\n")
        (dev / "mem_info_vram_total").write_text(str(288 * 1024**3))
        (dev / "mem_info_vram_used").write_text(str((n + 1) * 1024**3))
        (dev / "product_name").write_text("AMD Instinct MI355X\n")
    (tmp_path / "card0-DP-1").mkdir()
    b = SysfsAmdBackend(str(tmp_path))
    assert [d.index for d in b.devices()] == ["0", "1"]  # the NVIDIA card is skipped
    assert b.read_memory("1").used_bytes == 3 * 1024**3
    (tmp_path / "card2" / "device" / "mem_info_vram_used").unlink()
    from exporter.gpu.base import GpuError

    with pytest.raises(GpuError):
        b.read_memory("1")
    with pytest.raises(GpuUnavailable):
        SysfsAmdBackend(str(tmp_path / "empty"))


def test_sampler_sees_a_spike_between_scrapes():
    fake = FakeGpuBackend(count=2, total_bytes=100)
    s = GpuSampler(fake, interval_s=0.01)
    fake.set_used(0, 40)
    s.sample_once()
    fake.set_used(0, 95)  # a prefill spike, gone before the next scrape
    s.sample_once()
    fake.set_used(0, 41)
    s.sample_once()
    snap = {st.info.index: st for st in s.collect()}
    assert snap["0"].peak == 95 and snap["0"].used == 41
    again = {st.info.index: st for st in s.collect()}
    assert again["0"].peak == 95  # a second reader (another Prometheus, a curl) sees the same spike


def test_sampler_peak_is_over_a_trailing_window(monkeypatch):
    """The spike leaves the peak once it is older than the window, and only then; reads change nothing."""
    import exporter.gpu.sampler as sampler_mod

    clock = [1000.0]
    monkeypatch.setattr(sampler_mod.time, "monotonic", lambda: clock[0])
    fake = FakeGpuBackend(count=1, total_bytes=100)
    s = GpuSampler(fake, interval_s=1, peak_window_s=60)
    for used in (40, 95, 41):
        fake.set_used(0, used)
        s.sample_once()
        clock[0] += 1
    for _ in range(58):  # the spike (at t=1001) is 59 s old at the last of these samples (t=1060)
        s.sample_once()
        s.collect()
        clock[0] += 1
    assert s.collect()[0].peak == 95
    s.sample_once()  # now 60 s old: out of the window
    assert s.collect()[0].peak == 41


def test_sampler_thread_runs_at_its_interval_and_survives_faults():
    fake = FakeGpuBackend(count=3, total_bytes=100)
    s = GpuSampler(fake, interval_s=0.01)

    def snap():
        return {st.info.index: st for st in s.collect()}

    def until(condition, what: str) -> None:  # conditions, not sleeps; the bound only guards a hang
        deadline = time.monotonic() + 60
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.01)

    s.start()
    try:
        until(lambda: all(st.samples > 10 for st in s.states.values()), "each GPU sampled by the thread")
        fake.fail(1, lost=True)
        until(lambda: s.states["1"].errors >= 1, "the failure seen")
        now = snap()
        assert not now["1"].up and now["1"].lost >= 1 and now["0"].up and now["2"].up
        errors_then, samples_then = s.states["1"].errors, s.states["0"].samples
        until(lambda: s.states["0"].samples >= samples_then + 50, "50 more samples of a healthy GPU")
        assert s.states["1"].errors - errors_then <= 10  # backing off (0.5 s, doubling), not failing each tick
        fake.recover(1)
        until(lambda: snap()["1"].up, "the GPU back after recovery")
    finally:
        s.stop()
