"""`--web.config.file`: TLS and basic auth in the exporter-toolkit format, so one file serves every exporter.

    tls_server_config: {cert_file, key_file, client_auth_type, client_ca_file, min_version, max_version}
    basic_auth_users: {user: bcrypt hash}

bcrypt is slow on purpose (tens of milliseconds a check), so checks run on a small thread pool, never on
the event loop, with a bounded queue: a flood of wrong passwords is answered 401 at once when the queue is
full, and /metrics for a scraper with good credentials stays fast. An unknown user is checked against a
dummy hash of the same cost, so the answer's timing does not say which user names exist (as
exporter-toolkit does). A verified (user, password) pair is remembered for CACHE_TTL_S, as a keyed digest,
never the password. Errors never print a hash or a secret.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import re
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from aiohttp import web

from exporter.config import ConfigError, load_yaml

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
KNOWN_TLS = {
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
    "curve_preferences",
    "client_allowed_sans",
}
# A bcrypt hash as written by htpasswd -B or Go's x/crypto/bcrypt: $2a$/$2b$/$2y$, cost, 53 chars of salt+hash.
_BCRYPT = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
CHECK_THREADS = 2  # bcrypt checks at once (it releases the GIL; more would only take CPU from the scrapers)
MAX_PENDING_CHECKS = 16  # beyond this, a request needing a bcrypt check is refused at once
CACHE_TTL_S = 60.0
CACHE_MAX = 1024


@dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    cache_ttl_s: float = CACHE_TTL_S
    _verified: dict[tuple[str, bytes], float] = field(default_factory=dict)  # (user, keyed digest) -> expiry
    _key: bytes = field(default_factory=lambda: os.urandom(32))
    _dummy: bytes | None = None
    _pool: ThreadPoolExecutor | None = None
    _pending: int = 0
    allowed_sans: frozenset[str] = frozenset()  # client_allowed_sans: a verified client cert must name one

    def _digest(self, user: str, password: str) -> tuple[str, bytes]:
        return user, hmac.new(self._key, password.encode("utf-8"), hashlib.sha256).digest()

    def _dummy_hash(self) -> bytes:
        """A hash of the users' highest cost, made once, for unknown users to be checked against."""
        if self._dummy is None:
            import bcrypt

            cost = max((int(h[4:6]) for h in self.users.values()), default=10)
            self._dummy = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(rounds=cost))
        return self._dummy

    def check(self, user: str, password: str) -> bool:
        """The slow part, for a worker thread: bcrypt against the user's hash, or the dummy one."""
        import bcrypt

        key = self._digest(user, password)
        expiry = self._verified.get(key)
        if expiry is not None and time.monotonic() < expiry:
            return True
        stored = self.users.get(user)
        try:
            ok = bcrypt.checkpw(password.encode("utf-8"), stored if stored is not None else self._dummy_hash())
        except ValueError:
            return False
        if ok and stored is not None:
            if len(self._verified) >= CACHE_MAX:
                self._verified.clear()
            self._verified[key] = time.monotonic() + self.cache_ttl_s
            return True
        return False

    def cached(self, user: str, password: str) -> bool:
        expiry = self._verified.get(self._digest(user, password))
        return expiry is not None and time.monotonic() < expiry

    async def check_async(self, user: str, password: str) -> bool | None:
        """True or False off the event loop; None when too many checks are already waiting (refuse now)."""
        if self.cached(user, password):
            return True
        if self._pending >= MAX_PENDING_CHECKS:
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=CHECK_THREADS, thread_name_prefix="bcrypt")
        self._pending += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, self.check, user, password)
        finally:
            self._pending -= 1


def load_web_config(path: str) -> WebConfig:
    problems: list[str] = []
    data = load_yaml(path, "web config file") or {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: <top>: expected a mapping with tls_server_config and/or basic_auth_users"])
    for key in data:
        if key not in ("tls_server_config", "basic_auth_users", "http_server_config"):
            problems.append(
                f"{path}: {key}: unknown key (known: tls_server_config, basic_auth_users, http_server_config)"
            )
    cfg = WebConfig()
    if data.get("http_server_config"):  # http2 / headers: not implemented, so not silently accepted
        problems.append(
            f"{path}: http_server_config: not supported by vllm-headroom (remove it; HTTP/1.1 is "
            f"served, without extra headers)"
        )
    tls = data.get("tls_server_config")
    if tls is not None:
        cfg.ssl_context = _tls(path, tls, problems)
        sans = tls.get("client_allowed_sans") if isinstance(tls, dict) else None
        if sans is not None:
            if not isinstance(sans, list) or not sans or not all(isinstance(x, str) and x for x in sans):
                problems.append(f"{path}: tls_server_config.client_allowed_sans: expected a list of names")
            elif tls.get("client_auth_type") != "RequireAndVerifyClientCert":
                problems.append(
                    f"{path}: tls_server_config.client_allowed_sans: needs client_auth_type "
                    f"RequireAndVerifyClientCert (only a verified certificate's names mean anything)"
                )
            else:
                cfg.allowed_sans = frozenset(sans)
    users = data.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        problems.append(f"{path}: basic_auth_users: expected a mapping of user names to bcrypt hashes")
        users = {}
    for user, hashed in users.items():
        m = _BCRYPT.match(hashed) if isinstance(hashed, str) else None
        if m is None or not 4 <= int(m.group(1)) <= 31:
            problems.append(
                f"{path}: basic_auth_users.{user}: expected a bcrypt hash ($2y$10$ and 53 characters "
                f"of salt and hash, as htpasswd -nB writes), got <hidden>"
            )
            continue
        cfg.users[str(user)] = hashed.replace("$2y$", "$2b$", 1).encode("ascii")  # Go's $2y$ is bcrypt's $2b$
    if problems:
        raise ConfigError(problems)
    if cfg.users:
        cfg._dummy_hash()  # made now, not on the first request for an unknown user
    return cfg


def _tls_keys(where: str, tls: dict, problems: list[str]) -> None:
    """The keys themselves: known, supported, present where TLS needs them."""
    for key in tls:
        if key not in KNOWN_TLS:
            problems.append(f"{where}.{key}: unknown key")
    for key in ("cipher_suites", "curve_preferences"):
        if tls.get(key):  # Go's names and semantics; refused rather than accepted and ignored
            problems.append(
                f"{where}.{key}: not supported by vllm-headroom (remove it; OpenSSL's defaults for TLS 1.2+ apply)"
            )
    prefer = tls.get("prefer_server_cipher_suites", False)
    if not isinstance(prefer, bool):
        problems.append(f"{where}.prefer_server_cipher_suites: expected true or false, got {prefer!r}")
    for key in ("cert_file", "key_file"):
        if not tls.get(key):
            problems.append(f"{where}.{key}: missing: TLS needs a certificate and its key")
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth not in CLIENT_AUTH:
        problems.append(f"{where}.client_auth_type: expected one of {', '.join(CLIENT_AUTH)}, got {auth!r}")


def _tls_versions(where: str, tls: dict, problems: list[str]) -> tuple[ssl.TLSVersion | None, ssl.TLSVersion | None]:
    """min_version and max_version, None where not one of TLS_VERSIONS (a problem is recorded)."""
    versions = {}
    for key, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        value = tls.get(key, default)
        if value not in TLS_VERSIONS:
            problems.append(f"{where}.{key}: expected one of {', '.join(TLS_VERSIONS)}, got {value!r}")
        versions[key] = TLS_VERSIONS.get(value)
    low, high = versions["min_version"], versions["max_version"]
    if low is not None and high is not None and low > high:
        problems.append(
            f"{where}.min_version: {tls.get('min_version', 'TLS12')} is above max_version "
            f"{tls.get('max_version', 'TLS13')}: no TLS version would be left"
        )
    return low, high


def _tls(path: str, tls: Any, problems: list[str]) -> ssl.SSLContext | None:
    where = f"{path}: tls_server_config"
    if not isinstance(tls, dict):
        problems.append(f"{where}: expected a mapping")
        return None
    _tls_keys(where, tls, problems)
    low, high = _tls_versions(where, tls, problems)
    if problems or low is None or high is None:
        return None
    auth = tls.get("client_auth_type", "NoClientCert")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = low
    ctx.maximum_version = high
    try:
        ctx.load_cert_chain(tls["cert_file"], tls["key_file"])
    except (OSError, ssl.SSLError) as exc:
        problems.append(f"{where}: cannot load cert_file/key_file: {getattr(exc, 'strerror', None) or exc}")
        return None
    ctx.verify_mode = CLIENT_AUTH[auth]
    if tls.get("prefer_server_cipher_suites", False):
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    if auth in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert"):
        if not tls.get("client_ca_file"):
            problems.append(f"{where}.client_ca_file: missing: {auth} needs the CA that signs client certificates")
            return None
        try:
            ctx.load_verify_locations(tls["client_ca_file"])
        except (OSError, ssl.SSLError) as exc:
            problems.append(f"{where}.client_ca_file: cannot load: {getattr(exc, 'strerror', None) or exc}")
            return None
    return ctx


def auth_middleware(cfg: WebConfig) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        scheme, _, encoded = request.headers.get("Authorization", "").strip().partition(" ")
        if scheme.lower() == "basic":  # RFC 7617: the scheme name is case-insensitive
            try:
                user, _, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError):
                user, password = "", ""
            if user:
                ok = await cfg.check_async(user, password)
                if ok:
                    return await handler(request)
                if ok is None:
                    return web.Response(
                        status=429, text="Too many authentication attempts; try again\n", headers={"Retry-After": "1"}
                    )
        return web.Response(
            status=401, text="Unauthorized\n", headers={"WWW-Authenticate": 'Basic realm="vllm-headroom"'}
        )

    return middleware


def san_middleware(allowed: frozenset[str]) -> Callable[..., Awaitable[web.StreamResponse]]:
    """client_allowed_sans: the verified client certificate must carry one of these subject alternative names."""

    @web.middleware
    async def middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        cert = request.transport.get_extra_info("peercert") if request.transport is not None else None
        names = {value for _kind, value in (cert or {}).get("subjectAltName", ())}
        if names & allowed:
            return await handler(request)
        return web.Response(status=403, text="client certificate not allowed\n")

    return middleware
