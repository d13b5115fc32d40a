"""Guards for the HTTP listener: a connection cap, a deadline for each request to arrive, quiet error logs.

aiohttp's server waits for a connection's first request without a deadline and accepts connections until
the process runs out of file descriptors: 300 half-open connections starved /metrics for 40 s, and at the
fd limit asyncio logged a traceback per failed accept (issue 14). Here every connection must bring a
complete request head to the handler within `header_timeout_s` of connecting (or of its first byte after a
response), an idle keep-alive connection is closed after `idle_timeout_s`, and at the cap the oldest
connection not being answered makes room for the new one, so a scraper still gets through a flood.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from aiohttp import web

log = logging.getLogger("vllm_headroom.http")
MAX_CONNECTIONS = 256
HEADER_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 60.0
LOG_EVERY_S = 60.0


class _Conn:
    __slots__ = ("transport", "in_handler", "awaiting", "timer")

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.in_handler = False
        self.awaiting = True  # bytes of a request expected: the header deadline runs
        self.timer: asyncio.TimerHandle | None = None


def default_max_connections() -> int:
    """MAX_CONNECTIONS, or fewer where the fd limit is low: half the descriptors left after the daemon's own
    (logs, state, scrapes), so the cap is reached before the process runs out of them."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(8, min(MAX_CONNECTIONS, (soft - 64) // 2))


class ConnectionGuard:
    """Counts and bounds the listener's connections; `closed_slow` and `evicted` say how often it acted."""

    def __init__(
        self,
        max_connections: int | None = None,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ) -> None:
        self.max_connections = max_connections or default_max_connections()
        self.header_timeout_s = header_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.conns: dict[asyncio.BaseTransport, _Conn] = {}  # oldest first
        self.closed_slow = 0
        self.evicted = 0
        self._last_log = 0.0

    def protocol_factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _GuardedProtocol(self, inner())

    def middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        @web.middleware
        async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
            conn = self.conns.get(request.transport) if request.transport is not None else None
            if conn is None:
                return await handler(request)
            conn.in_handler, conn.awaiting = True, False
            self._arm(conn, None)
            try:
                return await handler(request)
            finally:
                conn.in_handler = False
                self._arm(conn, self.idle_timeout_s)

        return guard

    # -- connection events -------------------------------------------------------------------------

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        if len(self.conns) >= self.max_connections:
            victim = next((c for c in self.conns.values() if not c.in_handler), None)
            if victim is None:
                self._note("connection refused: all %d connections are being answered", self.max_connections)
                return False
            self.evicted += 1
            self._note("at the cap of %d connections: closing the oldest idle one", self.max_connections)
            self._close(victim)
        conn = self.conns[transport] = _Conn(transport)
        self._arm(conn, self.header_timeout_s)
        return True

    def data(self, transport: asyncio.BaseTransport) -> None:
        conn = self.conns.get(transport)
        if conn is not None and not conn.in_handler and not conn.awaiting:
            conn.awaiting = True  # a new request begins: it has header_timeout_s to arrive whole
            self._arm(conn, self.header_timeout_s)

    def forget(self, transport: asyncio.BaseTransport) -> None:
        conn = self.conns.pop(transport, None)
        if conn is not None and conn.timer is not None:
            conn.timer.cancel()

    # -- internals ---------------------------------------------------------------------------------

    def _arm(self, conn: _Conn, delay: float | None) -> None:
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None
        if delay is not None:
            conn.timer = asyncio.get_running_loop().call_later(delay, self._expire, conn)

    def _expire(self, conn: _Conn) -> None:
        if conn.in_handler:
            return
        if conn.awaiting:
            self.closed_slow += 1
            self._note("closed a connection that sent no complete request within %gs", self.header_timeout_s)
        self._close(conn)

    def _close(self, conn: _Conn) -> None:
        self.forget(conn.transport)
        conn.transport.close()

    def _note(self, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            log.warning(msg + " (logged at most once a minute)", *args)


class _GuardedProtocol(asyncio.Protocol):
    """aiohttp's protocol, with the guard told of each connection's events first."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._guard.admit(transport):
            transport.close()
            return
        self._transport = transport
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._transport is None:
            return
        self._guard.data(self._transport)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._transport is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is None:
            return
        self._guard.forget(self._transport)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._transport is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._transport is not None:
            self._inner.resume_writing()


def quiet_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's errors (a failed accept at the fd limit repeats endlessly), one line a minute per message."""
    message = str(context.get("message", "unexpected error"))
    now = time.monotonic()
    seen = _seen.get(message)
    if seen is not None and now - seen[0] < LOG_EVERY_S:
        seen[1] += 1
        return
    suppressed = seen[1] if seen else 0
    _seen[message] = [now, 0]
    exc = context.get("exception")
    log.error(
        "%s%s%s",
        message,
        f": {type(exc).__name__}: {exc}" if exc else "",
        f" ({suppressed} more like it not logged)" if suppressed else "",
    )


_seen: dict[str, list[Any]] = {}


async def serve(
    app: web.Application, host: str, port: int, ssl_context: Any, guard: ConnectionGuard, stop: asyncio.Event
) -> None:
    """Run the app behind the guard until `stop` is set, then shut it down as aiohttp's run_app would."""
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(quiet_exception_handler)
    runner = web.AppRunner(app, access_log=None, keepalive_timeout=guard.idle_timeout_s, shutdown_timeout=5)
    await runner.setup()
    server = None
    try:
        assert runner.server is not None
        server = await loop.create_server(
            guard.protocol_factory(runner.server),
            host or None,
            port,
            ssl=ssl_context,
            reuse_address=True,
            backlog=128,
            ssl_handshake_timeout=guard.header_timeout_s if ssl_context else None,
        )
        await stop.wait()
    finally:
        if server is not None:
            server.close()
        await runner.cleanup()
