"""The alerts, one module per domain (as kubernetes-mixin splits its alerts); `alert_specs` lists them in the
order the rules file ships them."""

from __future__ import annotations

from exporter.generate.alerts import exporter_health, gpu_memory, kv_cache, log_events, oom, prefix_cache, targets
from exporter.generate.spec import AlertSpec
from exporter.generate.thresholds import Thresholds

DOMAINS = (oom, kv_cache, gpu_memory, prefix_cache, targets, log_events, exporter_health)


def alert_specs(t: Thresholds) -> list[AlertSpec]:
    """Every alert, built once per call: `generate` calls it once and hands the list on."""
    return [spec for domain in DOMAINS for spec in domain.specs(t)]
