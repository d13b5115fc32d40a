"""One duration grammar for the whole project: Prometheus' units (`ms s m h d w`), a number before them.

Rule windows and `for:` go into PromQL, so thresholds and the report's `--since` take Prometheus' own form: an
integer and a unit (`5m`, `7d`). The daemon's config also takes a decimal or a bare number of seconds (`0.5s`,
`10`), the same units otherwise.
"""

from __future__ import annotations

import re

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
PROMETHEUS = re.compile(r"^(\d+)(ms|s|m|h|d|w)$")
LENIENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")


def is_prometheus(text: str) -> bool:
    """A duration PromQL accepts as written (one unit: `90s`, not `1m30s`, which we never write)."""
    return bool(PROMETHEUS.match(text))


def prometheus_seconds(text: str) -> float:
    """Seconds in a Prometheus duration; ValueError naming the form otherwise."""
    m = PROMETHEUS.match(text)
    if not m:
        raise ValueError(f"expected a duration such as 7d, 24h or 5m, got {text!r}")
    return int(m.group(1)) * UNITS[m.group(2)]


def lenient_seconds(text: str) -> float:
    """Seconds in a config duration: Prometheus' form, or a decimal, or a bare number of seconds."""
    m = LENIENT.match(text)
    if not m:
        raise ValueError("expected a duration such as 5s, 100ms or 2m")
    return float(m.group(1)) * (UNITS[m.group(2)] if m.group(2) else 1.0)
