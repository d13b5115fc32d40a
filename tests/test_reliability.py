"""The daemon SIGKILLed and restarted 100 times while its log grows and rotates: no OOM lost, none counted twice."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import yaml

from tests.conftest import free_port

HEALTHY = '(APIServer pid=1) INFO:     10.0.0.5:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
STATS = ("(APIServer pid=1) INFO 08-16 12:01:00 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
         "Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%\n")
OOM = "(EngineCore_DP0 pid=2) ERROR 08-16 12:01:00 [core.py:916] torch.OutOfMemoryError: CUDA out of memory. Tried\n"


def test_sigkill_restarts_while_logs_grow_lose_and_double_count_nothing(tmp_path):
    log, state = tmp_path / "vllm.log", tmp_path / "state"
    log.write_text("(APIServer pid=1) INFO 08-16 12:00:00 [api_server.py:1] vLLM API server version 0.27.1\n")
    written = {"oom": 0}
    stop = threading.Event()

    def writer() -> None:
        rng = random.Random(3)
        n = 0
        while not stop.is_set():
            with open(log, "a") as f:
                for _ in range(rng.randrange(1, 40)):
                    f.write(HEALTHY if rng.random() < 0.7 else STATS)
                if rng.random() < 0.3:
                    f.write(OOM + HEALTHY)  # an incident, closed by a healthy line
                    written["oom"] += 1
            n += 1
            if n in (150, 600):  # rotated by rename twice; a new file begins
                os.rename(log, str(log) + ".1")
                log.write_text("")
            time.sleep(0.004)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    port = free_port()
    cfg = {"listen_address": f"127.0.0.1:{port}", "state_dir": str(state), "state_save_interval": "50ms",
           "gpu": {"backend": "none"},
           "servers": [{"name": "s", "url": f"http://127.0.0.1:{free_port()}/metrics", "log": str(log)}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "exporter", "--log-level", "ERROR", "serve", "--config", str(tmp_path / "c.yaml")]
    rng = random.Random(7)
    kills = 0
    try:
        for _ in range(100):
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_listening(port, p)
            time.sleep(rng.uniform(0.0, 0.25))  # killed while reading, saving, or idle
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            kills += 1
    finally:
        stop.set()
        t.join(5)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(port, p)
        deadline = time.monotonic() + 30
        got = -1.0
        while time.monotonic() < deadline:
            got = oom_count(port)
            assert got <= written["oom"], f"double counted: {got} > {written['oom']}"
            if got == written["oom"]:
                break
            time.sleep(0.2)
    finally:
        p.terminate()
        p.wait(10)
    assert kills == 100 and written["oom"] > 50
    assert got == written["oom"], f"lost: {got} < {written['oom']}"


def wait_listening(port: int, proc) -> None:
    import socket

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "serve exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise AssertionError("serve did not listen")


def oom_count(port: int) -> float:
    import urllib.request

    from exporter.exposition import parse

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(s.value for s in parse(text).samples if s.name == "vllm_headroom_oom_events_total")
