"""Faults a 3 a.m. on-call meets: the daemon SIGKILLed again and again while logs grow and rotate, damaged input."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

from tests.helpers import FIXTURES

TAILER = """
import sys, time
from exporter.logs import tailer as T
T.SAVE_EVERY_S = 0.02  # save often: a kill then lands between, during and after saves
from exporter.config import LogSource
t = T.LogTailer("s", LogSource(sys.argv[1]), sys.argv[2])
if sys.argv[3] == "final":
    while t.poll():
        pass
    t.close()
    print(json.dumps(dict(t.analyzer.counts)))
else:
    print("up", flush=True)
    while True:
        t.poll()
        time.sleep(0.003)
""".replace("import sys, time", "import json, sys, time")

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
    env = dict(os.environ, PYTHONPATH=str(FIXTURES.parent.parent.parent))
    rng = random.Random(7)
    kills = 0
    try:
        for _ in range(100):
            p = subprocess.Popen([sys.executable, "-c", TAILER, str(log), str(state), "run"], stdout=subprocess.PIPE,
                                 env=env, text=True)
            p.stdout.readline()
            time.sleep(rng.uniform(0.0, 0.12))
            p.send_signal(signal.SIGKILL)
            p.wait(10)
            kills += 1
    finally:
        stop.set()
        t.join(5)
    final = subprocess.run([sys.executable, "-c", TAILER, str(log), str(state), "final"], capture_output=True,
                           text=True, env=env, timeout=60)
    counts = json.loads(final.stdout)
    assert kills == 100
    assert written["oom"] > 50
    assert counts["oom"] == written["oom"], (counts, written)
