"""Half-open connections against the real listener: a deadline for each request, a cap that lets a scraper in."""

from __future__ import annotations

import asyncio
import resource
import socket
import subprocess
import sys
import time
import urllib.request

import yaml
from aiohttp import web

from exporter.httpguard import ConnectionGuard, serve
from tests.conftest import free_port

HANG_S = 60.0  # a guard against a hang only
PARTIAL = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "  # a request head that never ends


def test_a_request_head_that_never_ends_is_cut_off_and_counted():
    async def scenario() -> tuple[bytes, int, int]:
        guard = ConnectionGuard(max_connections=8, header_timeout_s=0.3, idle_timeout_s=0.3)
        app = web.Application(middlewares=[guard.middleware()])

        async def ok(_request: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        app.router.add_get("/metrics", ok)
        stop = asyncio.Event()
        port = free_port()
        server = asyncio.create_task(serve(app, "127.0.0.1", port, None, guard, stop))
        try:
            for _ in range(int(HANG_S * 20)):
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            writer.write(PARTIAL)
            await writer.drain()
            got = await asyncio.wait_for(reader.read(), HANG_S)  # EOF once the server gives up on it
            writer.close()
            # a keep-alive connection that answered once and then goes quiet is closed too, but not counted as slow
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await writer.drain()
            rest = await asyncio.wait_for(reader.read(), HANG_S)
            writer.close()
            assert rest.startswith(b"HTTP/1.1 200") and rest.endswith(b"ok\n")
            return got, guard.closed_slow, len(guard.conns)
        finally:
            stop.set()
            await server

    got, slow, left = asyncio.run(scenario())
    assert got == b"" and slow == 1 and left == 0


def test_300_half_open_connections_do_not_keep_a_scraper_out(tmp_path):
    """The daemon with a low fd limit: without a cap, 300 half-open connections use up its descriptors and the
    scraper's connection is never accepted; with it, the oldest idle connections make room."""
    port = free_port()
    cfg = {
        "listen_address": f"127.0.0.1:{port}",
        "state_dir": str(tmp_path / "state"),
        "gpu": {"backend": "none"},
        "servers": [{"name": "s", "url": f"http://127.0.0.1:{free_port()}/metrics", "interval": "1s"}],
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))

    def low_fd_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (160, 160))

    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--log-level", "WARNING", "serve", "--config", str(tmp_path / "c.yaml")],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=low_fd_limit,
    )
    slow: list[socket.socket] = []
    try:
        deadline = time.monotonic() + HANG_S
        while True:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the daemon did not listen"
            time.sleep(0.05)
        for _ in range(300):
            s = socket.socket()
            s.settimeout(HANG_S)
            try:
                s.connect(("127.0.0.1", port))
                s.sendall(PARTIAL)
            except OSError:
                pass  # closed by the cap already
            slow.append(s)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=HANG_S) as r:
            assert r.status == 200 and b"vllm_headroom_target_up" in r.read()
    finally:
        for s in slow:
            s.close()
        proc.terminate()
        _, err = proc.communicate(timeout=HANG_S)
    assert err.count("Traceback") == 0
    assert err.count("closing the oldest idle one") <= 1  # logged once a minute, not once a connection
