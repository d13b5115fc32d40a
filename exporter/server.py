"""The HTTP side: /metrics (text or OpenMetrics, as asked), a landing page, /healthz and /readyz."""

from __future__ import annotations

import html
from typing import AsyncIterator, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry

from exporter import __version__
from exporter.httpguard import ConnectionGuard
from exporter.served import ExpositionCache, accepts_gzip, negotiate
from exporter.state import DaemonView
from exporter.webconfig import WebConfig, auth_middleware, san_middleware


class ServedDaemon(DaemonView, Protocol):
    """The daemon as the app needs it: its state, and the cleanup context that runs its loops."""

    def lifecycle(self, app: web.Application) -> AsyncIterator[None]: ...


DAEMON_KEY: web.AppKey[DaemonView] = web.AppKey("daemon")
REGISTRY_KEY: web.AppKey[CollectorRegistry] = web.AppKey("registry")
CACHE_KEY: web.AppKey[ExpositionCache] = web.AppKey("exposition")


async def metrics(request: web.Request) -> web.Response:
    """The cached body in the format and encoding asked for; built only when the state changed."""
    fmt = negotiate(request.headers.get("Accept", ""))
    gz = accepts_gzip(request.headers.get("Accept-Encoding", ""))
    headers = {"Content-Type": ExpositionCache.content_type(fmt), "Vary": "Accept, Accept-Encoding"}
    if gz:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=request.app[CACHE_KEY].body(fmt, gz), headers=headers)


async def landing(request: web.Request) -> web.Response:
    d = request.app[DAEMON_KEY]
    rows = "".join(
        f"<tr><td>{html.escape(s.name)}</td><td>{html.escape(s.config.safe_url)}</td>"
        f"<td>{'up' if s.up else 'down'}</td><td>{html.escape(s.config.log.path) if s.config.log else '-'}</td></tr>"
        for s in d.servers.values()
    )
    gpus = len(d.gpu.states) if d.gpu else 0
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>vLLM Headroom</title></head>
<body><h1>vLLM Headroom {__version__}</h1>
<p><a href="/metrics">/metrics</a> · <a href="/healthz">/healthz</a> · <a href="/readyz">/readyz</a></p>
<h2>Watching</h2><table border="1" cellpadding="4"><tr><th>server</th><th>metrics URL</th><th>last scrape</th>
<th>log</th></tr>{rows}</table><p>GPUs: {gpus} ({html.escape(d.gpu.backend.name) if d.gpu else "none"})</p>
</body></html>"""
    return web.Response(text=page, content_type="text/html")


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    d = request.app[DAEMON_KEY]
    if d.ready():
        return web.Response(text="ready\n")
    return web.Response(status=503, text="first collection not finished\n")


def build_app(
    daemon: ServedDaemon,
    registry: CollectorRegistry,
    background: bool = True,
    web_config: "WebConfig | None" = None,
    guard: "ConnectionGuard | None" = None,
) -> web.Application:
    """The app; `background=False` serves the daemon's state without starting its scrapers (benchmarks)."""
    middlewares = [guard.middleware()] if guard is not None else []  # first: a request waiting on auth is busy
    if web_config is not None and web_config.allowed_sans:
        middlewares.append(san_middleware(web_config.allowed_sans))
    if web_config is not None and web_config.users:
        middlewares.append(auth_middleware(web_config))
    app = web.Application(middlewares=middlewares)
    app[DAEMON_KEY] = daemon
    app[REGISTRY_KEY] = registry
    app[CACHE_KEY] = ExpositionCache(registry, daemon.state_version)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/", landing)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    if background:
        app.cleanup_ctx.append(daemon.lifecycle)
    return app
