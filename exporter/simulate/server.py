"""An HTTP stand-in for a vLLM server's /metrics, with switchable faults for tests and the demo."""

from __future__ import annotations

import asyncio

from aiohttp import web

from exporter.simulate.vllm_metrics import VllmMetrics


class VllmStandIn:
    """Serves `metrics.render()` at /metrics like vLLM's API server; `fault` makes it misbehave: one of ok,
    http_500, html, garbage, slow, hang_mid_body, huge."""

    def __init__(
        self, metrics: VllmMetrics, fault: str = "ok", slow_s: float = 10.0, huge_bytes: int = 4 * 1024 * 1024
    ) -> None:
        self.metrics = metrics
        self.fault = fault
        self.slow_s = slow_s
        self.huge_bytes = huge_bytes
        self.serving = True  # False: the process is "dead": connections are dropped

    async def handle_metrics(self, request: web.Request) -> web.StreamResponse:
        if not self.serving:
            if request.transport is not None:
                request.transport.close()  # what a dead process's kept-alive connection does
            raise web.HTTPServiceUnavailable()
        fault = self.fault
        if fault == "http_500":
            return web.Response(status=500, text="Internal Server Error")
        if fault == "html":
            return web.Response(text="<html><body><h1>502 Bad Gateway</h1></body></html>", content_type="text/html")
        if fault == "garbage":
            return web.Response(body=b"\x00\xff" * 500 + b"not metrics at all\n")
        if fault == "slow":
            await asyncio.sleep(self.slow_s)
        body = self.metrics.render()
        if fault == "huge":
            body = body * (self.huge_bytes // max(len(body), 1) + 1)
        if fault == "hang_mid_body":
            resp = web.StreamResponse(headers={"Content-Type": "text/plain; version=0.0.4"})
            await resp.prepare(request)
            await resp.write(body[: len(body) // 2])
            await asyncio.sleep(self.slow_s)
            return resp
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def handle_health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.handle_metrics)
        app.router.add_get("/health", self.handle_health)
        return app


async def start(app: web.Application, host: str = "127.0.0.1", port: int = 0) -> tuple[web.AppRunner, int]:
    """Start an app on loopback; returns the runner (for cleanup) and the port it got."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, runner.addresses[0][1]


class Listener:
    """An app on a fixed loopback port that can stop and start listening, as a vLLM port does across a restart."""

    def __init__(self, app: web.Application, host: str = "127.0.0.1", port: int = 0) -> None:
        self.runner = web.AppRunner(app, access_log=None)
        self.host, self.port = host, port
        self.site: web.TCPSite | None = None

    async def setup(self) -> None:
        await self.runner.setup()

    async def open(self) -> None:
        if self.site is None:
            self.site = web.TCPSite(self.runner, self.host, self.port, reuse_address=True)
            await self.site.start()
            if not self.port:
                self.port = self.runner.addresses[0][1]

    async def close(self) -> None:
        if self.site is not None:
            await self.site.stop()
            self.site = None

    async def cleanup(self) -> None:
        await self.close()
        await self.runner.cleanup()
