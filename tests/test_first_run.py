"""What a new user meets first: the demo's output and errors, the command line's help and usage errors,
`report` against a Prometheus that lacks what it needs, and how `make run` recognises a vLLM."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from aiohttp import web

from exporter.cli import build_parser
from exporter.probe import identify
from exporter.simulate.server import VllmStandIn, start
from exporter.simulate.vllm_metrics import VllmMetrics
from tests.conftest import free_port, need, start_prometheus

SCRIPT = Path(sys.executable).parent / "vllm-headroom"  # the console script of this environment


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


class Demo:
    """`vllm-headroom demo` as a user starts it, its output read on a thread until a line shows up."""

    def __init__(self, *args: str, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [str(SCRIPT), "demo", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()
        with self.changed:
            self.lines.append("<exit>")
            self.changed.notify_all()

    def wait_for(self, text: str, hang_s: float = 120) -> list[str]:
        """Everything printed up to the first line holding `text` (the bound only guards against a hang)."""
        with self.changed:
            ok = self.changed.wait_for(
                lambda: any(text in line for line in self.lines) or "<exit>" in self.lines, timeout=hang_s
            )
            assert ok and any(text in line for line in self.lines), "\n".join(self.lines)
            return list(self.lines)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=60)


@pytest.mark.skipif(not SCRIPT.exists(), reason="needs the vllm-headroom console script (make install)")
def test_demo_uses_its_port_hints_only_its_scenarios_and_prints_commands_that_run(tmp_path):
    port = free_port()
    demo = Demo(
        "--port",
        str(port),
        "--scenario",
        "prefix_collapse",
        "--scenario",
        "loading_oom_weights",
        "--workdir",
        str(tmp_path),
        cwd=tmp_path,
    )
    try:
        lines = demo.wait_for("Ctrl-C stops everything.")
        lines = demo.wait_for(f"listening on 127.0.0.1:{port}")  # the daemon's own log line names the port
        assert not any("9478" in line for line in lines), "\n".join(lines)
        hints = lines[lines.index("What to look at:") :]
        named = [h.split(":")[0].strip("- ") for h in hints if h.startswith("  - ") and ": " in h]
        assert named == ["prefix-collapse", "loading-oom-weights"], hints
        triage = [h[len("  - ") :] for h in hints if " triage " in h]
        assert len(triage) == 1 and triage[0].endswith(shlex.quote(str(tmp_path / "loading_oom_weights.log")))
        # the printed command runs as typed, from another directory, once the log has its OOM
        log = tmp_path / "loading_oom_weights.log"
        deadline = time.monotonic() + 120
        while "CUDA out of memory" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        r = subprocess.run(triage[0], shell=True, cwd="/", capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, r.stderr  # 1: a memory failure found
        assert "stage: weight_loading" in r.stdout
    finally:
        assert demo.stop() == 0


def test_demo_workdir_that_does_not_exist_is_named_not_a_listen_error(tmp_path):
    r = cli("demo", "--workdir", str(tmp_path / "missing"), "--port", str(free_port()))
    assert r.returncode == 2
    assert f"--workdir {tmp_path / 'missing'}: not a directory" in r.stderr
    assert "listen" not in r.stderr and "Traceback" not in r.stderr


def test_demo_port_in_use_says_cannot_listen(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = cli("demo", "--scenario", "healthy", "--workdir", str(tmp_path), "--port", str(port))
    assert r.returncode == 2, r.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr


def test_help_names_every_command_and_every_option_says_what_it_is():
    parser = build_parser()
    commands = parser.get_default("commands")
    assert "report" in commands
    top = cli("--help").stdout
    description = top.split("positional arguments")[0]
    for name, sub in commands.items():
        assert name in description, f"the top-level description omits {name}"
        for action in sub._actions:
            if action.dest != "help" and action.help != argparse.SUPPRESS:
                assert action.help, f"{name} {'/'.join(action.option_strings) or action.dest} has no help"


@pytest.mark.parametrize(
    "command, args, wrong",
    [
        ("demo", ["--prot", "9479"], "--prot 9479"),
        ("report", ["--prometheus", "http://127.0.0.1:9", "--outt", "r.html"], "--outt r.html"),
        ("triage", ["vllm.log", "--jsn"], "--jsn"),
        ("serve", ["--web.listen-adress", ":9478"], "--web.listen-adress :9478"),
    ],
)
def test_a_mistyped_flag_shows_the_commands_usage(command, args, wrong):
    r = cli(command, *args)
    assert r.returncode == 2
    assert r.stderr.startswith(f"usage: vllm-headroom {command} "), r.stderr
    assert f"vllm-headroom {command}: error: unrecognized arguments: {wrong}" in r.stderr


def test_a_mistyped_top_level_flag_shows_the_top_level_usage():
    r = cli("--no-such-flag", "serve")
    assert r.returncode == 2 and r.stderr.startswith("usage: vllm-headroom [-h]"), r.stderr


def test_report_without_vllm_headroom_series_names_them_and_writes_nothing(prometheus, tmp_path):
    out = tmp_path / "r.html"
    r = cli("report", "--prometheus", prometheus.url, "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert "no vllm_headroom_target_up" in r.stderr and "scraping vllm-headroom's /metrics" in r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists() and not (tmp_path / "r.json").exists()


def test_report_without_the_rules_names_the_rule_files(tmp_path):
    """vllm-headroom's series are there (backfilled), the recording and weekly rules are not loaded."""
    promtool = need("promtool")
    end = (int(time.time()) // 3600 - 3) * 3600
    om = tmp_path / "up.om"
    om.write_text(
        "# TYPE vllm_headroom_target_up gauge\n"
        + "".join(f'vllm_headroom_target_up{{server="a"}} 1 {end - 3600 + 60 * i}\n' for i in range(60))
        + "# EOF\n"
    )
    r = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    prom = start_prometheus(tmp_path, "global: {scrape_interval: 1m}\n")
    try:
        assert prom.query(f"count(vllm_headroom_target_up @ {end - 60})")["data"]["result"], "backfill not loaded"
        out = tmp_path / "r.html"
        r = cli("report", "--prometheus", prom.url, "--out", str(out), "--end", str(end))
    finally:
        prom.proc.terminate()
        prom.proc.wait(timeout=10)
    assert r.returncode == 2, r.stderr
    assert "no vllm_headroom_target_up" not in r.stderr
    assert "server:vllm_headroom_kv_cache_headroom_ratio:min" in r.stderr
    assert "alerts/vllm-headroom.recording.yaml" in r.stderr and "alerts/vllm-headroom.weekly.yaml" in r.stderr
    assert not out.exists()


def test_report_without_matplotlib_says_how_to_install_it(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None; from exporter.cli import main; "
        f"sys.exit(main(['report', '--prometheus', 'http://127.0.0.1:{free_port()}', '--out', 'r.html']))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "pip install 'vllm-headroom[report]'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r.html").exists()


# -- `make run`: is it a vLLM on :8000? ----------------------------------------------------------------


async def _served(app: web.Application) -> tuple[web.AppRunner, str]:
    runner, port = await start(app)
    return runner, f"http://127.0.0.1:{port}"


def _app(routes: dict[str, tuple[int, str]]) -> web.Application:
    app = web.Application()
    for path, (status, body) in routes.items():

        async def handler(request: web.Request, status: int = status, body: str = body) -> web.Response:
            return web.Response(status=status, text=body)

        app.router.add_get(path, handler)
    return app


def test_probe_tells_a_vllm_from_anything_else_on_the_port():
    async def main() -> dict[str, str | None]:
        apps = {
            "simulated vLLM": VllmStandIn(VllmMetrics()).app(),
            "vLLM without metrics": _app({"/version": (200, json.dumps({"version": "0.11.0"}))}),
            "another exporter": _app({"/metrics": (200, "# TYPE up gauge\nup 1\n"), "/version": (404, "no")}),
            "a web page": _app(
                {"/metrics": (200, "<html>vllm: not really</html>"), "/version": (200, "<html>1.0</html>")}
            ),
        }
        runners, found = [], {}
        try:
            for name, app in apps.items():
                runner, url = await _served(app)
                runners.append(runner)
                found[name] = await asyncio.to_thread(identify, url, 5.0)
            found["nothing listening"] = await asyncio.to_thread(identify, f"http://127.0.0.1:{free_port()}", 5.0)
        finally:
            for runner in runners:
                await runner.cleanup()
        return found

    found = asyncio.run(main())
    assert found["simulated vLLM"] == "/metrics has vllm: series"
    assert found["vLLM without metrics"] == "/version answers 0.11.0"
    assert found["another exporter"] is None
    assert found["a web page"] is None
    assert found["nothing listening"] is None


def test_probe_command_exit_codes(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "exporter.probe", f"http://127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert r.returncode == 1 and "no vLLM at http://127.0.0.1:" in r.stdout


def test_the_daemons_install_pulls_no_plotting_libraries():
    """matplotlib and numpy are the `report` extra: a DaemonSet's image installs the package without them."""
    from importlib.metadata import requires

    declared = requires("vllm-headroom") or []  # as installed from pyproject.toml (make install)
    runtime = " ".join(r for r in declared if "extra ==" not in r).lower()
    assert "pyyaml" in runtime and "matplotlib" not in runtime and "numpy" not in runtime
    assert any(r.startswith("matplotlib") and 'extra == "report"' in r for r in declared), declared
    code = (
        "import sys; sys.modules['matplotlib'] = sys.modules['numpy'] = None; "
        "import exporter.cli, exporter.daemon, exporter.demo, exporter.triage, exporter.generate, exporter.report; "
        "from exporter.cli import main; sys.exit(main(['serve', '--help']))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "usage: vllm-headroom serve" in r.stdout, r.stderr
