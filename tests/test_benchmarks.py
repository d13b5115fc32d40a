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


def test_every_log_shape_counts_what_it_wrote(tmp_path):
    for shape in bench_logs.SHAPES:
        path = str(tmp_path / f"{shape}.log")
        want = bench_logs.generate(path, 60_000 if shape != "traceback" else 8_000, shape=shape)
        _, _, got = bench_logs.ours(path, "cri" if shape == "cri" else "plain")
        assert got == want, shape
        if shape.endswith("B"):
            mean = (tmp_path / f"{shape}.log").stat().st_size / want["lines"]
            assert abs(mean - int(shape[:-1])) < max(60, int(shape[:-1]) * 0.2), (shape, mean)


def test_parse_benchmark_variants_agree_with_prometheus_client():
    for kind in ("escape", "exemplar", "crlf"):
        text = bench_parse.variant(bench_parse.payload(2), kind)
        assert sorted(bench_parse.ours(text)) == sorted(bench_parse.theirs(text)), kind
