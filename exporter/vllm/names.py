"""vLLM's metric names across versions, normalized once here so nothing downstream sees the old ones.

vLLM renamed `vllm:gpu_cache_usage_perc` to `vllm:kv_cache_usage_perc` and `vllm:gpu_prefix_cache_*` to
`vllm:prefix_cache_*` (deprecated 0.9.2, hidden 0.11, removed 0.12.0), and replaced
`vllm:time_per_output_token_seconds` with `vllm:inter_token_latency_seconds`. Servers in transition expose
both: then the new name wins and the old samples are dropped, so nothing is counted twice.
"""

from __future__ import annotations

from exporter.exposition_parser import Sample

# old base name -> new base name (base: without _total / _bucket / _sum / _count / _created)
RENAMES = {
    "vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc",
    "vllm:gpu_prefix_cache_queries": "vllm:prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits": "vllm:prefix_cache_hits",
    "vllm:time_per_output_token_seconds": "vllm:inter_token_latency_seconds",
}
_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created", "")

# canonical wire name -> (our exported name, type). The daemon re-exports these with a `server` label.
REEXPORT: dict[str, tuple[str, str]] = {
    "vllm:num_requests_running": ("requests_running", "gauge"),
    "vllm:num_requests_waiting": ("requests_waiting", "gauge"),
    # newer V1 releases split the queue by reason: only `capacity` means the KV cache is short
    # (`deferred` waits on something else); older ones do not export it, see the rules' fallback
    "vllm:num_requests_waiting_by_reason": ("requests_waiting_by_reason", "gauge"),
    "vllm:num_preemptions_total": ("preemptions_total", "counter"),
    "vllm:prompt_tokens_total": ("prompt_tokens_total", "counter"),
    "vllm:generation_tokens_total": ("generation_tokens_total", "counter"),
    "vllm:request_success_total": ("requests_finished_total", "counter"),
    "vllm:prefix_cache_queries_total": ("prefix_cache_queries_tokens_total", "counter"),
    "vllm:prefix_cache_hits_total": ("prefix_cache_hits_tokens_total", "counter"),
    "vllm:external_prefix_cache_queries_total": ("external_prefix_cache_queries_tokens_total", "counter"),
    "vllm:external_prefix_cache_hits_total": ("external_prefix_cache_hits_tokens_total", "counter"),
    # KV transfer between a prefill and a decode pool (P/D disaggregation) with the NIXL connector: vLLM's
    # NixlPromMetrics (vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py, later nixl/stats.py),
    # exported since vLLM PR #26811 (merged 2025-10-28: releases from 0.11.1 on); kv_expired_reqs since PR
    # #32340 (2026-01-14), counted on the prefill instance. Only a server running NixlConnector has them:
    # absent elsewhere, never 0. Other connectors (LMCache, Mooncake) export their own names, not read here.
    "vllm:nixl_num_failed_transfers_total": ("nixl_failed_transfers_total", "counter"),
    "vllm:nixl_num_failed_notifications_total": ("nixl_failed_notifications_total", "counter"),
    "vllm:nixl_num_kv_expired_reqs_total": ("nixl_kv_expired_requests_total", "counter"),
}
# The histograms the dashboards and rules use (TTFT and queue time); each costs ~25 series per
# engine, so the others (inter-token latency, e2e latency) are left to a direct vLLM scrape.
REEXPORT_HISTOGRAMS: dict[str, str] = {
    "vllm:time_to_first_token_seconds": "time_to_first_token_seconds",
    "vllm:request_queue_time_seconds": "request_queue_time_seconds",
    "vllm:nixl_xfer_time_seconds": "nixl_transfer_time_seconds",  # per KV transfer, NIXL only (see above)
}
KV_USAGE = "vllm:kv_cache_usage_perc"
CACHE_CONFIG = "vllm:cache_config_info"
PREFIX_HIT_RATE_V0 = "vllm:gpu_prefix_cache_hit_rate"  # V0's gauge, 0..1
PASS_LABELS = ("model_name", "engine", "finished_reason", "reason", "le")
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")
# Every canonical wire name the daemon reads (exporter/derive.py and exporter/reexport.py): a scrape keeps only
# these. vLLM also sends the e2e, inter-token and per-request token histograms (about half of each engine's
# samples), which nothing here reads; bounding, deduplicating and holding them cost CPU on every scrape.
USED: frozenset[str] = frozenset(
    [*REEXPORT, *(wire + part for wire in REEXPORT_HISTOGRAMS for part in HISTOGRAM_PARTS)]
    + [KV_USAGE, CACHE_CONFIG, PREFIX_HIT_RATE_V0, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"]
)
# ... and every wire name, old ones included, that becomes one of them
USED_WIRE: frozenset[str] = USED | frozenset(
    old + name[len(new) :] for name in USED for old, new in RENAMES.items() if name.startswith(new)
)


def _split(name: str) -> tuple[str, str]:
    for suffix in _SUFFIXES[:-1]:
        if name.endswith(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def canonical(name: str) -> str:
    """The current vLLM name for a wire name of any version."""
    base, suffix = _split(name)
    new = RENAMES.get(base)
    return new + suffix if new else name


# wire name -> (kept, new name or None): the same few hundred names arrive on every scrape of every server;
# one table for every vLLM name, one for those in USED
_ROUTE: dict[str, tuple[bool, str | None]] = {}
_ROUTE_USED: dict[str, tuple[bool, str | None]] = {}


def _route(name: str, used_only: bool = False) -> tuple[bool, str | None]:
    table = _ROUTE_USED if used_only else _ROUTE
    route = table.get(name)
    if route is None:
        if not name.startswith("vllm:"):
            route = (False, None)
        else:
            base, suffix = _split(name)
            new = RENAMES.get(base)
            route = (True, new + suffix if new is not None else None)
            if used_only and (new + suffix if new is not None else name) not in USED:
                route = (False, None)
        if len(table) > 10_000:  # a target inventing names: never grow without bound
            table.clear()
        table[name] = route
    return route


def normalize(samples: list[Sample], used_only: bool = False) -> dict[str, list[Sample]]:
    """Group vLLM samples by canonical name; where old and new names both appear, keep the new ones.
    `used_only`: only the names in USED (the daemon's scrapes)."""
    out: dict[str, list[Sample]] = {}
    renamed: dict[str, list[Sample]] = {}
    route = (_ROUTE_USED if used_only else _ROUTE).get
    for s in samples:
        name = s[0]
        keep, new = route(name) or _route(name, used_only)
        if not keep:
            continue
        if new is None:
            group = out.get(name)
            if group is None:
                group = out[name] = []
            group.append(s)
        else:
            renamed.setdefault(new, []).append(Sample(new, s.labels, s.value, s.timestamp))
    for name, group in renamed.items():
        base = _split(name)[0]
        if not any(_split(n)[0] == base for n in out):  # the new name is not there: the old one stands in
            out[name] = group
    return out
