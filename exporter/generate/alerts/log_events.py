"""Other events the vLLM log shows: tool-call parse errors, collective communication errors."""

from __future__ import annotations

from exporter import catalog
from exporter.generate.spec import (
    SERVER_BY,
    SERVER_BY_PROMQL,
    AlertSpec,
    Case,
    num,
    server_series,
)
from exporter.generate.thresholds import Thresholds


def specs(t: Thresholds) -> list[AlertSpec]:
    sel = t.selector
    by = SERVER_BY_PROMQL
    out: list[AlertSpec] = []
    out.append(
        AlertSpec(
            "VllmToolCallParseErrors",
            "info",
            "ticket",
            "0m",
            f'sum by ({by}) (increase({catalog.series("log_events")}{{{sel},event="tool_call_parse_error"}}[1h])) > '
            f"{num(t.tool_call_errors_per_hour)}",
            "{{ $value | humanize }} tool-call parse errors in the last hour on {{ $labels.server }}",
            "The tool-call parser failed on model output: clients get plain text instead of tool calls.",
            SERVER_BY,
            [
                Case(
                    "many parse errors fire",
                    [
                        server_series(
                            catalog.series("log_events"),
                            f"0+{num(t.tool_call_errors_per_hour / 30)}x60",
                            event="tool_call_parse_error",
                        )
                    ],
                    "50m",
                    True,
                ),
                Case(
                    "a few parse errors do not fire",
                    [server_series(catalog.series("log_events"), "0 1 2 2 2 2 2 2", event="tool_call_parse_error")],
                    "7m",
                    False,
                ),
            ],
            {
                "meaning": "vLLM logged `Error in extracting tool call from response` repeatedly.",
                "confirm": "The server's log around those lines; newer vLLM counts "
                "`vllm:tool_call_parser_invocations_total{outcome=...}`.",
                "first": "Check the `--tool-call-parser` matches the model and its chat template.",
                "scale": "Not a capacity matter.",
                "evidence": "Parser name, model, template, and a sample of failing outputs (without users' data).",
            },
        )
    )
    out.append(
        AlertSpec(
            "VllmCommunicationErrors",
            "warning",
            "ticket",
            "0m",
            f'sum by ({by}) (increase({catalog.series("log_events")}{{{sel},event="comm_error"}}[15m])) > 0',
            "NCCL / collective communication errors on {{ $labels.server }}",
            "Collective operations failed or timed out: the engine usually dies with them.",
            SERVER_BY,
            [
                Case(
                    "a communication error fires",
                    [server_series(catalog.series("log_events"), "0 0 1x20", event="comm_error")],
                    "5m",
                    True,
                ),
                Case(
                    "no communication error does not fire",
                    [server_series(catalog.series("log_events"), "0x20", event="comm_error")],
                    "5m",
                    False,
                ),
            ],
            {
                "meaning": "The log shows NCCL errors or watchdog timeouts on collectives.",
                "confirm": "The log lines around the error; NVLink / RDMA health; the all-to-all backend in use.",
                "first": "Not a memory problem: check interconnect health and the parallel topology before tuning memory.",
                "scale": "Only if the topology itself is unsupported.",
                "evidence": "The error lines, the ranks involved, the interconnect and backend.",
            },
        )
    )
    return out
