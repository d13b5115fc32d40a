"""What the node and each server run: driver and GPU model, vLLM's version and startup settings, the guide's
prerequisite checks, and vllm-headroom's own version."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from exporter import __version__
from exporter.catalog import CONFIG_FACTS, family
from exporter.environment import CHECKS, evaluate, safe_version

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from exporter.config import EnvironmentConfig
    from exporter.gpu.sampler import GpuSampler
    from exporter.state import ServerReading


def _number_label(value: object) -> str:
    """A log fact as a label value only when it is a number or a boolean: never free text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return ""


class EnvironmentCollector:
    """The info families and the checks; `checks` is the config's `environment` section."""

    def __init__(self, sampler: GpuSampler | None, checks: EnvironmentConfig) -> None:
        self.sampler = sampler
        self.checks = checks

    def collect(self, servers: Sequence[ServerReading]) -> Iterator[Metric]:
        sampler = self.sampler
        driver = sampler.driver if sampler else {}
        models = [st.info.model for st in sampler.states.values()] if sampler else []
        vendor = next(iter(sampler.states.values())).info.vendor if sampler and sampler.states else None
        versions = {r.state.name: safe_version(r.facts.get("vllm_version")) for r in servers}
        info = family("environment_info")
        if sampler is not None:
            info.add_metric(
                [
                    driver.get("driver_version", ""),
                    driver.get("cuda_driver_version", ""),
                    models[0] if models else "",
                    str(len(models)),
                    vendor or "",
                ],
                1,
            )
        vinfo = family("vllm_info")
        for name, v in versions.items():
            if v:
                vinfo.add_metric([name, v], 1)
        cfg = family("vllm_config_info")
        for r in servers:
            values = [_number_label(r.facts.get(k)) for k in CONFIG_FACTS]
            if any(values):
                cfg.add_metric([r.state.name] + values, 1)
        check = family("environment_check")
        results = evaluate(self.checks, vendor, driver, models, [v for v in versions.values() if v])
        for name in CHECKS:
            if name in results:
                check.add_metric([name], 1 if results[name] else 0)
        build = family("build_info")
        build.add_metric([__version__], 1)
        yield from (info, vinfo, cfg, check, build)
