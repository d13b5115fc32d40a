"""Basic auth under attack: bcrypt off the event loop, no user-name oracle, a short cache, and the web config's
refusals. A real aiohttp server and client on loopback; bcrypt itself is only wrapped to observe or hold it."""

from __future__ import annotations

import asyncio
import base64
import threading

import aiohttp
import bcrypt
import pytest
from aiohttp import web

from exporter import webconfig
from exporter.config import ConfigError
from exporter.simulate.server import start as start_app
from exporter.webconfig import auth_middleware, load_web_config

HANG_S = 60.0  # a guard against a hang only


def basic(user: str, password: str, scheme: str = "Basic") -> dict[str, str]:
    return {"Authorization": f"{scheme} " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def web_config(tmp_path, password: str = "right", rounds: int = 4) -> webconfig.WebConfig:
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=rounds)).decode().replace("$2b$", "$2y$", 1)
    (tmp_path / "web.yaml").write_text(f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    return load_web_config(str(tmp_path / "web.yaml"))


async def start(cfg: webconfig.WebConfig) -> tuple[web.AppRunner, str]:
    async def ok(_request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app = web.Application(middlewares=[auth_middleware(cfg)])
    app.router.add_get("/metrics", ok)
    runner, port = await start_app(app)
    return runner, f"http://127.0.0.1:{port}/metrics"


def test_a_slow_bcrypt_check_does_not_hold_the_event_loop(tmp_path, monkeypatch):
    cfg = web_config(tmp_path)
    real = bcrypt.checkpw
    entered, release = threading.Event(), threading.Event()
    state = {"held": False}

    def slow_checkpw(password: bytes, hashed: bytes) -> bool:
        if password == b"wrong":  # the attacker's check: held until the test lets it go (or 10 s pass)
            state["held"] = True
            entered.set()
            release.wait(10)
            state["held"] = False
        return real(password, hashed)

    async def scenario() -> None:
        runner, url = await start(cfg)
        timeout = aiohttp.ClientTimeout(total=HANG_S)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as http:
                async with http.get(url, headers=basic("prometheus", "right")) as r:
                    assert r.status == 200  # verified once: cached
                monkeypatch.setattr(bcrypt, "checkpw", slow_checkpw)
                attack = asyncio.create_task(http.get(url, headers=basic("prometheus", "wrong")))
                assert await asyncio.get_running_loop().run_in_executor(None, entered.wait, HANG_S)
                async with http.get(url, headers=basic("prometheus", "right")) as r:
                    assert r.status == 200
                    assert state["held"], "the scraper was answered only after the slow check ended"
                release.set()
                async with await attack as r:
                    assert r.status == 401
        finally:
            release.set()
            await runner.cleanup()

    asyncio.run(scenario())


def test_unknown_users_cost_a_bcrypt_check_like_known_ones(tmp_path, monkeypatch):
    cfg = web_config(tmp_path)
    checked: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    assert cfg.check("nobody", "x") is False
    assert cfg.check("prometheus", "x") is False
    assert len(checked) == 2  # the unknown user was not turned away before bcrypt (a timing oracle)
    assert checked[0] != checked[1] and checked[0][:7] == checked[1][:7]  # a dummy hash of the same cost


def test_successful_checks_are_cached_briefly(tmp_path, monkeypatch):
    cfg = web_config(tmp_path)
    calls = []
    real = bcrypt.checkpw
    monkeypatch.setattr(bcrypt, "checkpw", lambda p, h: calls.append(1) or real(p, h))
    assert cfg.check("prometheus", "right") and cfg.check("prometheus", "right")
    assert len(calls) == 1
    assert not cfg.check("prometheus", "wrong") and not cfg.check("prometheus", "wrong")
    assert len(calls) == 3  # failures are never cached
    cfg._verified = {k: 0.0 for k in cfg._verified}  # expired
    assert cfg.check("prometheus", "right") and len(calls) == 4


def test_the_basic_scheme_is_case_insensitive(tmp_path):
    cfg = web_config(tmp_path)

    async def scenario() -> list[int]:
        runner, url = await start(cfg)
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG_S)) as http:
                out = []
                for scheme in ("basic", "BASIC", "Basic"):
                    async with http.get(url, headers=basic("prometheus", "right", scheme)) as r:
                        out.append(r.status)
                async with http.get(url, headers=basic("prometheus", "nope", "basic")) as r:
                    out.append(r.status)
                return out
        finally:
            await runner.cleanup()

    assert asyncio.run(scenario()) == [200, 200, 200, 401]


@pytest.mark.parametrize(
    "text, key",
    [
        ("basic_auth_users: {prometheus: '$2y$10$tooshort'}\n", "basic_auth_users.prometheus"),
        (
            "tls_server_config: {cert_file: c, key_file: k, min_version: TLS13, max_version: TLS12}\n",
            "tls_server_config.min_version",
        ),
        (
            "tls_server_config: {cert_file: c, key_file: k, cipher_suites: [TLS_AES_128_GCM_SHA256]}\n",
            "tls_server_config.cipher_suites",
        ),
        (
            "tls_server_config: {cert_file: c, key_file: k, curve_preferences: [X25519]}\n",
            "tls_server_config.curve_preferences",
        ),
        (
            "tls_server_config: {cert_file: c, key_file: k, client_allowed_sans: [a]}\n",
            "tls_server_config.client_allowed_sans",
        ),
        ("http_server_config: {http2: false}\n", "http_server_config"),
    ],
)
def test_settings_that_would_be_ignored_are_refused_naming_the_key(tmp_path, text, key):
    (tmp_path / "web.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_web_config(str(tmp_path / "web.yaml"))
    assert any(f": {key}:" in p for p in err.value.problems), err.value.problems
