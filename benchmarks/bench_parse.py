"""Exposition parsing: ours vs prometheus_client's parser on vLLM payloads with 1, 8 and 32 DP engines.

Both parse the same bytes in the same run; the samples are compared before anything is timed.
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import median_time, record
from exporter.exposition import parse
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics


def payload(engines: int) -> str:
    m = VllmMetrics(engines=engines)
    for e in range(engines):
        m.set_load(e, EngineLoad(running=20, waiting=e % 3, kv_usage=0.5))
        m.serve_requests(e, 200, prompt_tokens=30_000, cached_tokens=9_000, output_tokens=700, ttft_s=0.4 + e / 100)
    return m.render().decode()


def _key(v: float):
    return "nan" if math.isnan(v) else v


def theirs(text: str) -> list:
    return [(s.name, tuple(sorted(s.labels.items())), _key(s.value))
            for fam in text_string_to_metric_families(text) for s in fam.samples]


def ours(text: str) -> list:
    return [(s.name, s.labels, _key(s.value)) for s in parse(text).samples]


def main(repeats: int = 7) -> list[dict]:
    rows = []
    for engines in (1, 8, 32):
        text = payload(engines)
        a, b = sorted(ours(text)), sorted(theirs(text))
        assert a == b, f"samples differ for {engines} engines"
        t_ours = median_time(lambda text=text: parse(text), repeats)
        t_theirs = median_time(lambda text=text: list(text_string_to_metric_families(text)), repeats)
        rows.append({"engines": engines, "bytes": len(text), "samples": len(a), "ours_ms": t_ours * 1e3,
                     "prometheus_client_ms": t_theirs * 1e3, "speedup": t_theirs / t_ours})
        print(f"{engines:>3} engines {len(text):>8} B {len(a):>6} samples: ours {t_ours * 1e3:8.2f} ms, "
              f"prometheus_client {t_theirs * 1e3:8.2f} ms, {t_theirs / t_ours:5.1f}x")
    record("parse", rows)
    return rows


if __name__ == "__main__":
    main()
