"""What `vllm-headroom report` needs from Prometheus, checked before it writes anything.

Without vllm-headroom's own series, or without the series of the rules `generate` writes, the report
would be an empty page; a user should learn instead which of the two is missing and what to load.
"""

from __future__ import annotations

from typing import Protocol

from exporter import catalog

# (a series the report reads, what it stands for, how to get it). The rules' names are those of
# alerts/vllm-headroom.recording.yaml and alerts/vllm-headroom.weekly.yaml as `generate` writes them.
NEEDED = (
    (
        catalog.series("target_up"),
        "vllm-headroom's own series",
        "is this Prometheus scraping vllm-headroom's /metrics (a job with its :9478 targets)?",
    ),
    (
        "server:vllm_headroom_kv_cache_headroom_ratio:min",
        "the recording rules' series",
        "add alerts/vllm-headroom.recording.yaml (written by `vllm-headroom generate`) to rule_files",
    ),
    (
        "server:vllm_headroom_capacity_verdict:7d",
        "the weekly rules' series",
        "add alerts/vllm-headroom.weekly.yaml (written by `vllm-headroom generate`) to rule_files",
    ),
)


class Queries(Protocol):
    url: str

    def query(self, expr: str, at: float) -> list[dict]: ...


def missing(prom: Queries, since_s: float, end: float) -> list[str]:
    """One line per missing input, empty when the report has what it needs. Without vllm-headroom's own
    series the rules have nothing to read, so that one is reported alone."""
    window = f"{int(since_s)}s"
    problems = []
    for name, what, fix in NEEDED:
        if not prom.query(f"count(last_over_time({name}[{window}]))", end):
            problems.append(
                f"{prom.url} has no {name} in the {window} before the report's end: {what} are missing; {fix}"
            )
            if name == NEEDED[0][0]:
                break
    return problems
