"""Shared fixtures: a real Prometheus server on loopback (Debian's `prometheus` package)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from exporter.promapi import PrometheusAPI

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.fail(
            f"{binary} is not installed: `make test` installs Debian's prometheus packages "
            f"(apt-get install prometheus prometheus-alertmanager)"
        )
    return path


class Prometheus:
    """A Prometheus process the test started, and the project's API client on it (raw bodies: tests look at
    errors too)."""

    def __init__(self, url: str, proc: subprocess.Popen) -> None:
        self.url = url
        self.proc = proc
        self.api = PrometheusAPI(url, timeout=10)

    def get(self, path: str, **params: str) -> dict:
        return self.api.raw(path, **params)

    def query(self, expr: str) -> dict:
        return self.get("/api/v1/query", query=expr)


def start_prometheus(workdir: Path, config: str, *extra: str) -> Prometheus:
    binary = need("prometheus")
    port = free_port()
    (workdir / "prometheus.yml").write_text(config)
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            "--web.enable-lifecycle",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "prometheus.log", "wb"),
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc, workdir / "prometheus.log")
    return Prometheus(url, proc)


def start_alertmanager(workdir: Path, config: str) -> tuple[subprocess.Popen, int]:
    """Debian's Alertmanager on loopback with `config` (YAML text), no clustering; (process, port)."""
    binary = need("prometheus-alertmanager")
    port = free_port()
    (workdir / "alertmanager.yml").write_text(config)
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={workdir / 'alertmanager.yml'}",
            f"--storage.path={workdir / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "alertmanager.log", "wb"),  # noqa: SIM115 - the child owns it
    )
    wait_ready(f"http://127.0.0.1:{port}", proc, workdir / "alertmanager.log")
    return proc, port


def webhook_route(hook_port: int, group_by: list[str], group_wait: str = "1s") -> str:
    """An Alertmanager config sending every alert to one webhook on loopback, grouped by `group_by`."""
    return f"""
route:
  receiver: hook
  group_by: [{", ".join(group_by)}]
  group_wait: {group_wait}
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: http://127.0.0.1:{hook_port}/hook
        send_resolved: false
"""


def wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout: float = 30) -> None:
    """Wait for a Prometheus-style server's /-/ready; its log tells why when it exits instead."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited: " + log.read_text()[-2000:])
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{proc.args[0]} did not become ready in {timeout:g} s")


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory):
    """Prometheus with the committed rules loaded and nothing to scrape."""
    d = tmp_path_factory.mktemp("prometheus")
    rules = [
        str(ROOT / "alerts" / n)
        for n in ("vllm-headroom.rules.yaml", "vllm-headroom.recording.yaml", "vllm-headroom.weekly.yaml")
    ]
    server = start_prometheus(
        d, "global: {evaluation_interval: 1s}\nrule_files:\n" + "".join(f"  - {r}\n" for r in rules)
    )
    yield server
    server.proc.terminate()
    server.proc.wait(timeout=10)
