"""Shared test helpers: fixture logs without their comment headers, and the wrappings container runtimes add."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def fixture_names() -> list[str]:
    return sorted(p.name for p in FIXTURES.glob("*.log"))


def fixture_text(name: str) -> str:
    """The log as vLLM wrote it: the fixture's `#` header lines become blank lines, so line numbers stay."""
    lines = (FIXTURES / name).read_text(encoding="utf-8").split("\n")
    out, in_header = [], True
    for line in lines:
        if in_header and line.startswith("#"):
            out.append("")
            continue
        in_header = False
        out.append(line)
    return "\n".join(out)


def expectations(name: str) -> dict[str, str]:
    """The `# expect: key=value ...` line of a fixture's header."""
    for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("# expect:"):
            return dict(item.split("=", 1) for item in line[len("# expect:") :].split())
    raise AssertionError(f"{name} has no '# expect:' line")


def wrap_cri(text: str, piece: int = 0) -> bytes:
    """Wrap each line as the kubelet's CRI log does; with `piece`, split long lines into `P` partials."""
    out = []
    for i, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")):
        stamp = f"2026-11-20T09:{i // 60 % 60:02d}:{i % 60:02d}.{i:09d}Z"
        chunks = [line[j : j + piece] for j in range(0, len(line), piece)] if piece and line else [line]
        for k, chunk in enumerate(chunks):
            tag = "F" if k == len(chunks) - 1 else "P"
            out.append(f"{stamp} stderr {tag} {chunk}")
    return ("\n".join(out) + "\n").encode("utf-8")


def wrap_docker(text: str, piece: int = 0) -> bytes:
    """Wrap each line as docker's json-file driver does; with `piece`, split long lines the way it does at 16 KiB."""
    out = []
    for i, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")):
        stamp = f"2026-11-20T09:{i // 60 % 60:02d}:{i % 60:02d}.{i:09d}Z"
        full = line + "\n"
        chunks = [full[j : j + piece] for j in range(0, len(full), piece)] if piece else [full]
        for chunk in chunks:
            out.append(json.dumps({"log": chunk, "stream": "stderr", "time": stamp}))
    return ("\n".join(out) + "\n").encode("utf-8")


def panel_query(expr: str, server: str = "prefill-0", rate_interval: str = "1m") -> str:
    """A dashboard query with its Grafana variables filled in as "All" would (`.*`), one server named where the
    panel selects one, and `$__rate_interval` set."""
    expr = expr.replace('"$server"', f'"{server}"').replace("$__rate_interval", rate_interval)
    for var in ("job", "cluster", "role", "instance", "server", "model"):
        expr = expr.replace(f"${var}", ".*")
    return expr


def scraped_daemon(workdir, oom_stage: str | None = None):
    """A daemon after one scrape of a simulated 2-engine vLLM (with waiting-by-reason), one read of its startup log
    (and an OOM at `oom_stage`) and one read of a fake GPU: what its collector exports then."""
    import time

    from exporter.config import parse_config
    from exporter.daemon import Daemon
    from exporter.exposition_parser import parse
    from exporter.gpu.fake import FakeGpuBackend
    from exporter.gpu.sampler import GpuSampler
    from exporter.simulate.logs import VllmLogWriter
    from exporter.simulate.vllm_metrics import EngineLoad, VllmMetrics
    from exporter.vllm.names import normalize
    from exporter.vllm.scrape import ScrapeResult

    log = workdir / "one.log"
    writer = VllmLogWriter(str(log))
    writer.healthy_startup()
    if oom_stage:
        writer.oom(oom_stage)
    cfg = {"servers": [{"name": "s", "log": str(log)}], "state_dir": str(workdir / "state"), "gpu": {"backend": "none"}}
    daemon = Daemon(parse_config(cfg, "scraped_daemon"))
    daemon.gpu = GpuSampler(FakeGpuBackend(1), 1.0)
    daemon.gpu.sample_once()
    vllm = VllmMetrics(engines=2, waiting_by_reason=True)
    vllm.set_load(0, EngineLoad(running=3, waiting=1, kv_usage=0.5))
    vllm.serve_requests(0, 2, prompt_tokens=100, cached_tokens=50, output_tokens=10)
    st = daemon.servers["s"]
    st.update(ScrapeResult(True, series=normalize(parse(vllm.render().decode()).samples), size_bytes=1), time.time())
    st.tailer.poll()
    return daemon
