"""The benchmarks' own inputs stay honest: what they generate is what our code counts (mtail is checked in `make bench`)."""

from __future__ import annotations

from benchmarks import bench_logs, bench_parse


def test_log_benchmark_counts_what_it_wrote(tmp_path):
    path = str(tmp_path / "v.log")
    want = bench_logs.generate(path, 120_000)
    assert want["oom"] == 1 and want["preemption"] > 10 and want["context_rejected"] > 10
    _, _, got = bench_logs.ours(path)
    assert got == want


def test_parse_benchmark_payloads_agree_with_prometheus_client():
    text = bench_parse.payload(8)
    assert sorted(bench_parse.ours(text)) == sorted(bench_parse.theirs(text))
