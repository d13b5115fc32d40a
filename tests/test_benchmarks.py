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


def test_the_fleets_vllm_mix_writes_each_engines_stats_and_access_lines(tmp_path):
    """The overhead benchmark's logs hold what vLLM writes: one stats line per DP engine (read as stats, each
    engine's own), and access lines that only count."""
    from exporter.config import LogSource
    from exporter.logs.tailer import LogTailer
    from exporter.simulate.logs import VllmLogWriter

    path = str(tmp_path / "v.log")
    w = VllmLogWriter(path)
    w.healthy_startup()
    t = LogTailer("s", LogSource(path), None)
    t.poll()
    before = t.health.lines_read
    w.answered(3)
    w.engine_stats(2, running=7, waiting=1, kv_usage=0.5, hit=0.25)
    t.poll()
    assert t.health.lines_read - before == 5
    text = open(path).read().splitlines()[-2:]
    assert [line.split("] ", 1)[1][:10] for line in text] == ["Engine 000", "Engine 001"]
    facts = t.analyzer.epoch.facts
    assert (facts["running_peak_reqs"], facts["prefix_cache_hit_rate_last_ratio"]) == (7, 0.25)
