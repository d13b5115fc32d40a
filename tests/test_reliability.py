"""The daemon SIGKILLed and restarted 100 times while its log grows and rotates: no OOM lost, none counted twice.

Event-driven, so a busy machine makes it slower, never wrong: each daemon is killed at a moment it reached
(listening, or after its n-th state save), not after a wall-clock sleep, and the log is rotated only once
the daemon's saved state holds a position in the current file. The earlier version rotated on its own
clock: on a loaded machine the first rotation came before the first daemon had read a byte, so the first
file (51 OOMs, the exact shortfall of every failure seen: 3238 < 3289, 4016 - 51) was rotated away unseen,
and a second rotation while the state still named that file would overwrite `path.1` on disk. That data
is gone before any daemon can read it; the expectation was wrong, not the daemon.
Daemons are forked from a process that has imported them already, so 100 restarts cost little CPU.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from exporter.simulate.logs import ACCESS_OK, API, log_line, stats_message
from tests.conftest import free_port

HEALTHY = ACCESS_OK + "\n"
STATS = log_line(API, "INFO", "loggers.py:1", stats_message(1, 0, 0.05, None, 1.0, 1.0)) + "\n"
OOM = (
    log_line("EngineCore_DP0 pid=2", "ERROR", "core.py:916", "torch.OutOfMemoryError: CUDA out of memory. Tried") + "\n"
)
KILLS = 100
HANG_S = float(
    os.environ.get("HANG_S", "120")
)  # only a guard against a hang: every wait below ends on a condition long before

# Reads "start" or "wait PID" a line; forks a daemon (modules already imported) or reaps one, and answers.
ZYGOTE = r"""
import os, signal, sys
import exporter.cli, exporter.daemon, exporter.server  # the slow part of a start, done once
argv = sys.argv[1:]
for command in sys.stdin:
    if command.startswith("start"):
        pid = os.fork()
        if pid == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os._exit(exporter.cli.main(argv))
        print(pid, flush=True)
    else:
        _, status = os.waitpid(int(command.split()[1]), 0)
        print(status, flush=True)
"""


def until(condition, what: str) -> None:
    """Wait for a condition; the bound is a hang guard, not a budget."""
    deadline = time.monotonic() + HANG_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {HANG_S:g}s for: {what}")
        time.sleep(0.005)


def saved_state(state: Path) -> dict:
    try:
        return json.loads((state / "s.tail.json").read_text())
    except (OSError, ValueError):
        return {}


def save_stamp(state: Path) -> int:
    try:
        return os.stat(state / "s.tail.json").st_mtime_ns
    except OSError:
        return 0


def listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def write_config(path, port: int, state, log) -> None:
    """A serve config for one log, state saved every 50 ms, no vLLM answering and no GPUs."""
    cfg = {
        "listen_address": f"127.0.0.1:{port}",
        "state_dir": str(state),
        "state_save_interval": "50ms",
        "gpu": {"backend": "none"},
        "servers": [{"name": "s", "url": f"http://127.0.0.1:{free_port()}/metrics", "log": str(log)}],
    }
    path.write_text(yaml.safe_dump(cfg))


@pytest.mark.timeout(900)  # the hang guards fire long before; a loaded machine may need minutes
def test_sigkill_restarts_while_logs_grow_lose_and_double_count_nothing(tmp_path):  # noqa: C901  one scenario
    log, state = tmp_path / "vllm.log", tmp_path / "state"
    log.write_text(log_line(API, "INFO", "api_server.py:1", "vLLM API server version 0.27.1", "08-16 12:00:00") + "\n")
    written = {"oom": 0, "rotations": 0}
    stop = threading.Event()
    writer_error: list[BaseException] = []

    def moved_onto_current_file() -> bool:
        return stop.is_set() or saved_state(state).get("inode") == os.stat(log).st_ino

    def writer() -> None:
        rng = random.Random(3)
        n = 0
        try:
            while not stop.is_set():
                with open(log, "a") as f:
                    for _ in range(rng.randrange(1, 40)):
                        f.write(HEALTHY if rng.random() < 0.7 else STATS)
                    if rng.random() < 0.3:
                        f.write(OOM + HEALTHY)  # an incident, closed by a healthy line
                        written["oom"] += 1
                n += 1
                if n in (150, 600):  # rotated by rename twice; a new file begins
                    # only once the daemon has a saved position in the current file: before its first save it
                    # has never seen this file, and after a second rotation the old path.1 is gone from disk
                    until(moved_onto_current_file, "the saved state to move onto the current file")
                    os.rename(log, str(log) + ".1")
                    log.write_text("")
                    written["rotations"] += 1
                time.sleep(0.004)
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            writer_error.append(exc)

    port = free_port()
    write_config(tmp_path / "c.yaml", port, state, log)
    argv = ["--log-level", "ERROR", "serve", "--config", str(tmp_path / "c.yaml")]
    zygote = subprocess.Popen(
        [sys.executable, "-c", ZYGOTE, *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert zygote.stdin is not None and zygote.stdout is not None

    def start() -> int:
        zygote.stdin.write("start\n")
        zygote.stdin.flush()
        return int(zygote.stdout.readline())

    def reap(pid: int) -> int:
        zygote.stdin.write(f"wait {pid}\n")
        zygote.stdin.flush()
        return int(zygote.stdout.readline())

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    rng = random.Random(7)
    killed_by_sigkill = 0
    pid = 0
    try:
        for _ in range(KILLS):
            pid = start()
            until(lambda: listening(port), "the daemon to listen")
            saves = rng.choice((0, 0, 1, 1, 2, 3))  # killed at startup, or after its n-th save: reading or idle
            for _ in range(saves):
                before = save_stamp(state)
                until(lambda before=before: save_stamp(state) != before, "a state save")
            os.kill(pid, signal.SIGKILL)
            status = reap(pid)
            killed_by_sigkill += os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        stop.set()
        t.join(HANG_S)
        assert not writer_error, writer_error
        assert written["rotations"] == 2 and written["oom"] > 50

        pid = start()
        until(lambda: listening(port), "the daemon to listen")
        got = [-1.0]

        def caught_up() -> bool:
            got[0] = oom_count(port)
            assert got[0] <= written["oom"], f"double counted: {got[0]} > {written['oom']}"
            return got[0] == written["oom"]

        try:
            until(caught_up, f"all {written['oom']} OOMs to be counted")
        except AssertionError as exc:
            st = saved_state(state)
            files = {
                p.name: (p.stat().st_ino, p.read_text().count("OutOfMemoryError")) for p in tmp_path.glob("vllm.log*")
            }
            raise AssertionError(
                f"{exc}: {got[0]} counted, {written}; state at {st.get('file')} inode "
                f"{st.get('inode')} byte {st.get('offset')}; files (inode, OOMs): {files}"
            ) from None
        os.kill(pid, signal.SIGTERM)
        assert os.WIFEXITED(reap(pid))
    finally:
        stop.set()
        if pid and zygote.poll() is None:
            try:
                os.kill(pid, signal.SIGKILL)  # a daemon left running by a failed assertion
            except ProcessLookupError:
                pass
        zygote.kill()
        zygote.wait(10)
    assert killed_by_sigkill == KILLS  # each daemon was alive until SIGKILL, none exited by itself
    assert got[0] == written["oom"]


def oom_count(port: int) -> float:
    import urllib.request

    from exporter.exposition_parser import parse

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(s.value for s in parse(text).samples if s.name == "vllm_headroom_oom_events_total")


def test_sigterm_while_a_large_log_is_being_read_leaves_one_valid_state(tmp_path):
    """The poll thread is mid-read when SIGTERM comes: shutdown's save waits for it (one writer), so no save
    fails, no temp file is left, and a restart counts every OOM exactly once."""
    log, state = tmp_path / "vllm.log", tmp_path / "state"
    block = HEALTHY * 200 + STATS * 50 + OOM + HEALTHY
    with open(log, "w") as f:
        for _ in range(1500):  # ~30 MB: several polls' worth of reading
            f.write(block)
    port = free_port()
    write_config(tmp_path / "c.yaml", port, state, log)
    cmd = [sys.executable, "-m", "exporter", "serve", "--config", str(tmp_path / "c.yaml")]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    until(lambda: listening(port) or proc.poll() is not None, "the daemon to listen")
    until(lambda: save_stamp(state) != 0, "a first save")  # reading has begun
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err
    assert "cannot write state file" not in err and "No such file" not in err, err
    assert sorted(os.listdir(state)) == ["s.tail.json"]
    saved = saved_state(state)
    assert 0 < saved["offset"] <= os.path.getsize(log)
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    try:
        until(lambda: listening(port), "the daemon to listen again")
        got = [0.0]

        def all_counted() -> bool:
            got[0] = oom_count(port)
            assert got[0] <= 1500, f"double counted: {got[0]}"
            return got[0] == 1500

        until(all_counted, "all 1500 OOMs to be counted")
    finally:
        proc.terminate()
        proc.wait(HANG_S)
