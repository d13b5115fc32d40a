"""Large answers from a vLLM target: parsed off the event loop, and refused past a documented default size."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
from aiohttp import web

from exporter.config import parse_config
from exporter.simulate.server import start
from exporter.vllm import scrape

HANG_S = 60.0


def vllm_body(engines: int) -> bytes:
    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="{e}",model_name="m"}} 1' for e in range(engines)]
    return ("\n".join(lines) + "\n").encode()


async def fetch(body: bytes, max_bytes: int) -> scrape.ScrapeResult:
    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner, port = await start(app)
    try:
        async with aiohttp.ClientSession() as session:
            return await scrape.fetch_metrics(session, f"http://127.0.0.1:{port}/metrics", HANG_S, max_bytes)
    finally:
        await runner.cleanup()


def test_a_large_answer_is_parsed_off_the_event_loop(monkeypatch):
    threads: list[str] = []
    real = scrape.parse

    def recording(text: str, labels=None, **kwargs):
        threads.append(threading.current_thread().name)
        return real(text, labels, **kwargs)

    monkeypatch.setattr(scrape, "parse", recording)
    big = vllm_body(20_000)  # ~1 MB
    assert len(big) > scrape.PARSE_INLINE_BYTES
    result = asyncio.run(fetch(big, 4 * 1024 * 1024))
    assert result.ok and len(result.series["vllm:num_requests_running"]) == 20_000
    small = asyncio.run(fetch(vllm_body(4), 4 * 1024 * 1024))
    assert small.ok
    assert threads[0] != "MainThread" and threads[1] == "MainThread"  # the loop runs in MainThread here


def test_the_default_size_limit_is_small_and_enforced():
    cfg = parse_config({"servers": [{"name": "s"}]})
    limit = cfg.servers[0].max_response_bytes
    assert limit == 4 * 1024 * 1024
    result = asyncio.run(fetch(vllm_body(120_000), limit))  # ~6 MB: a runaway target
    assert not result.ok and result.reason == "too_large"


def test_dns_and_tls_failures_have_their_own_reasons():
    import socket

    from aiohttp.abc import AbstractResolver

    class NoSuchName(AbstractResolver):  # the system resolver would send a query off this machine
        async def resolve(self, host, port=0, family=socket.AF_INET):
            raise OSError(socket.EAI_NONAME, "Name or service not known")

        async def close(self) -> None:
            pass

    async def scenario() -> tuple[str | None, str | None]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=NoSuchName())) as session:
            dns = await scrape.fetch_metrics(session, "http://vllm-0.example/metrics", HANG_S, 1 << 20)

        async def plain(_request: web.Request) -> web.Response:
            return web.Response(text="vllm:num_requests_running 1\n")

        app = web.Application()
        app.router.add_get("/metrics", plain)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as session:  # https to a plain-HTTP port: the handshake fails
                tls = await scrape.fetch_metrics(session, f"https://127.0.0.1:{port}/metrics", HANG_S, 1 << 20)
        finally:
            await runner.cleanup()
        return dns.reason, tls.reason

    assert asyncio.run(scenario()) == ("dns", "tls")
