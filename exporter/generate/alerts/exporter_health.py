"""The exporter and its inputs: GPU reads, the log tail, and the exporter itself (every page depends on it)."""

from __future__ import annotations

from exporter import catalog
from exporter.generate.spec import (
    GPU_BY,
    SERVER_BY,
    SERVER_BY_PROMQL,
    AlertSpec,
    Case,
    after,
    engine_series,
    gpu_series,
    series,
    server_series,
)
from exporter.generate.thresholds import Thresholds


def specs(t: Thresholds) -> list[AlertSpec]:
    sel = t.selector
    by = SERVER_BY_PROMQL
    out: list[AlertSpec] = []
    exporter_runbook = {
        "meaning": "vllm-headroom itself cannot see part of what it watches.",
        "confirm": "The exporter's own log (it says what failed and why) and its health series.",
        "first": "Fix the source: the GPU driver or device, the log path or its mount, the exporter's deployment.",
        "scale": "Not a capacity matter.",
        "evidence": "The exporter's log lines and health series.",
    }
    out.append(
        AlertSpec(
            "VllmHeadroomGPUReadFailing",
            "warning",
            "ticket",
            "5m",
            f"max by (job, cluster, instance, gpu) ({catalog.series('gpu_up')}{{{sel}}}) == 0",
            "vllm-headroom cannot read GPU {{ $labels.gpu }} on {{ $labels.instance }}",
            "GPU memory reads fail (lost GPU or library error): GPU headroom is blind for this GPU.",
            GPU_BY,
            [
                Case("failing reads fire", [gpu_series(catalog.series("gpu_up"), "0x20")], "10m", True),
                Case("good reads do not fire", [gpu_series(catalog.series("gpu_up"), "1x20")], "10m", False),
            ],
            exporter_runbook,
        )
    )
    stalled = int(t.log_stalled_after_seconds)
    out.append(
        AlertSpec(
            "VllmHeadroomLogStalled",
            "warning",
            "ticket",
            "5m",
            f"(time() - max by ({by}) ({catalog.series('log_last_read_timestamp_seconds')}{{{sel}}}) > {stalled})\n"
            f"and on ({by})\n(sum by ({by}) (rate({catalog.series('generation_tokens')}{{{sel}}}[5m])) > 0)",
            "No new log lines from {{ $labels.server }} for {{ $value | humanizeDuration }} while it generates tokens",
            "The server generates tokens (vLLM then logs its stats at INFO every few seconds) but nothing reaches the "
            "log tail: wrong path, rotated away, unmounted. An idle vLLM logs its stats at DEBUG and may have access "
            "logs off, so silence alone is not a stall.",
            SERVER_BY,
            [
                Case(
                    "a silent log of a server generating tokens fires",
                    [
                        server_series(catalog.series("log_last_read_timestamp_seconds"), "0x60"),
                        engine_series(catalog.series("generation_tokens"), "0+600x60"),
                    ],
                    f"{stalled // 60 + 10}m",
                    True,
                ),
                Case(
                    "a silent log of an idle server does not fire",
                    [
                        server_series(catalog.series("log_last_read_timestamp_seconds"), "0x60"),
                        server_series(catalog.series("target_up"), "1x60"),
                        engine_series(catalog.series("generation_tokens"), "500x60"),
                    ],
                    f"{stalled // 60 + 10}m",
                    False,
                ),
                Case(
                    "a log read every minute does not fire",
                    [
                        server_series(catalog.series("log_last_read_timestamp_seconds"), "0+60x60"),
                        engine_series(catalog.series("generation_tokens"), "0+600x60"),
                    ],
                    f"{stalled // 60 + 10}m",
                    False,
                ),
            ],
            exporter_runbook,
        )
    )
    out.append(
        AlertSpec(
            "VllmHeadroomLogMissing",
            "warning",
            "ticket",
            "10m",
            f"max by ({by}) ({catalog.series('log_file_present')}{{{sel}}}) == 0",
            "The configured log of {{ $labels.server }} does not exist",
            "Stage-tagged OOM events cannot be seen without the log.",
            SERVER_BY,
            [
                Case("a missing log fires", [server_series(catalog.series("log_file_present"), "0x30")], "15m", True),
                Case(
                    "a present log does not fire",
                    [server_series(catalog.series("log_file_present"), "1x30")],
                    "15m",
                    False,
                ),
            ],
            exporter_runbook,
        )
    )
    out.append(
        AlertSpec(
            "VllmHeadroomExporterDown",
            "critical",
            "page",
            t.exporter_down_for,
            f"up{{{sel}}} == 0",
            "vllm-headroom on {{ $labels.instance }} is down: no alert about that node's vLLM servers can fire",
            "Prometheus cannot scrape the exporter, and every page about the servers it watches depends on it.",
            ("job", "instance"),
            [
                Case("a down exporter fires", [series("up", "0x20")], after(t.exporter_down_for), True),
                Case("an up exporter does not fire", [series("up", "1x20")], after(t.exporter_down_for), False),
            ],
            exporter_runbook,
        )
    )
    out.append(
        AlertSpec(
            "VllmHeadroomExporterAbsent",
            "critical",
            "page",
            "10m",
            f"absent(up{{{sel}}})",
            "No vllm-headroom target is known to Prometheus: headroom is not monitored anywhere",
            "Prometheus has no scrape target for the exporter at all (service discovery, ServiceMonitor or job "
            "misconfigured), so `up == 0` can never fire.",
            ("job",),
            [
                Case("no exporter target at all fires", [('up{job="other"}', "1x20")], "15m", True),
                Case("a known exporter target does not fire", [series("up", "1x20")], "15m", False),
            ],
            exporter_runbook,
        )
    )
    return out
