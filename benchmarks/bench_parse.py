"""Exposition parsing: ours vs prometheus_client's parser on vLLM payloads with 1, 8, 32 and 128 DP engines.

Both parse the same text in the same run; the samples are compared before anything is timed. Rows:
- `cold`: a fresh parse, nothing remembered (what the 10x target is about);
- `steady`: the label blocks cached across scrapes, as the daemon keeps them per server (beside, never
  instead of, the cold row);
- `escape`, `exemplar`, `crlf`: one escaped label value, one exemplar, or CRLF line ends present (cold).
Each ratio is the median of paired runs (ours, then theirs, on the same text; each the fastest of 3 tries with
the garbage collector off), with the spread.
"""

from __future__ import annotations

import gc
import math
import statistics
import time

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.common import record
from exporter.exposition_parser import LabelCache, parse
from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics


def payload(engines: int) -> str:
    m = VllmMetrics(engines=engines)
    for e in range(engines):
        m.set_load(e, EngineLoad(running=20, waiting=e % 3, kv_usage=0.5))
        m.serve_requests(e, 200, prompt_tokens=30_000, cached_tokens=9_000, output_tokens=700, ttft_s=0.4 + e / 100)
    return m.render().decode()


def variant(text: str, kind: str) -> str:
    """The payload with one escaped label value, one exemplar, or CRLF line ends."""
    if kind == "escape":
        return text + 'vllm:extra_info{engine="0",model_name="a \\"quoted\\" \\\\ name"} 1.0\n'
    if kind == "exemplar":
        lines = text.split("\n")
        i = next(i for i, line in enumerate(lines) if line.startswith("vllm:request_success_total"))
        lines[i] += ' # {trace_id="4bf92f3577b34da6"} 1.0 1700000000.0'
        return "\n".join(lines)
    if kind == "crlf":
        return text.replace("\n", "\r\n")
    return text


def _key(v: float):
    return "nan" if math.isnan(v) else v


def theirs(text: str) -> list:
    return [
        (s.name, tuple(sorted(s.labels.items())), _key(s.value))
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


def ours(text: str) -> list:
    expo = parse(text)
    assert expo.errors == 0, expo.first_error
    return [(s.name, s.labels, _key(s.value)) for s in expo.samples]


def _time(fn, tries: int = 3) -> float:
    """The fastest of a few tries, with the garbage collector off (as timeit does): the least noisy estimate
    on a shared machine, applied alike to both parsers."""
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(tries):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
    finally:
        gc.enable()
    return best


def paired(text: str, repeats: int, steady: bool) -> dict:
    cache = LabelCache()
    parse(text, cache)
    mine = (lambda: parse(text, cache)) if steady else (lambda: parse(text))
    t_ours, t_theirs, ratios = [], [], []
    for _ in range(repeats):
        a = _time(mine)
        b = _time(lambda: list(text_string_to_metric_families(text)))
        t_ours.append(a)
        t_theirs.append(b)
        ratios.append(b / a)
    return {
        "ours_ms": statistics.median(t_ours) * 1e3,
        "prometheus_client_ms": statistics.median(t_theirs) * 1e3,
        "speedup": statistics.median(ratios),
        "speedup_min": min(ratios),
        "speedup_max": max(ratios),
        "runs": repeats,
    }


def main(repeats: int = 5) -> list[dict]:
    rows = []
    cases = [(e, "cold") for e in (1, 8, 32, 128)] + [(e, "steady") for e in (1, 8, 32, 128)]
    cases += [(e, k) for k in ("escape", "exemplar", "crlf") for e in (8, 32)]
    for engines, kind in cases:
        text = variant(payload(engines), kind)
        a, b = sorted(ours(text)), sorted(theirs(text))
        assert a == b, f"samples differ for {engines} engines ({kind})"
        row = {
            "engines": engines,
            "case": kind,
            "bytes": len(text),
            "samples": len(a),
            **paired(text, repeats if engines < 128 else 3, kind == "steady"),
        }
        rows.append(row)
        print(
            f"{engines:>3} engines {kind:>8} {len(text):>8} B {len(a):>6} samples: ours {row['ours_ms']:8.2f} ms, "
            f"prometheus_client {row['prometheus_client_ms']:8.2f} ms, {row['speedup']:5.1f}x "
            f"({row['speedup_min']:.1f}-{row['speedup_max']:.1f})",
            flush=True,
        )
    record("parse", rows)
    return rows


if __name__ == "__main__":
    main()
