"""`--web.config.file`: TLS and basic auth in the exporter-toolkit format, so one file serves every exporter.

    tls_server_config: {cert_file, key_file, client_auth_type, client_ca_file, min_version, max_version}
    basic_auth_users: {user: bcrypt hash}

bcrypt is slow on purpose, so a verified (user, password) pair is remembered (as a SHA-256 digest, never
the password) for the life of the process, as exporter-toolkit does. Errors never print a hash or a secret.
"""

from __future__ import annotations

import base64
import hashlib
import ssl
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import yaml
from aiohttp import web

from exporter.config import ConfigError

TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
                "TLS13": ssl.TLSVersion.TLSv1_3}
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "RequestClientCert": ssl.CERT_OPTIONAL,
               "RequireAnyClientCert": ssl.CERT_REQUIRED, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
KNOWN_TLS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version",
             "cipher_suites", "prefer_server_cipher_suites", "curve_preferences", "client_allowed_sans"}


@dataclass
class WebConfig:
    ssl_context: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    _verified: set[tuple[str, bytes]] = field(default_factory=set)

    def check(self, user: str, password: str) -> bool:
        import bcrypt

        stored = self.users.get(user)
        if stored is None:
            return False
        digest = hashlib.sha256(password.encode("utf-8")).digest()
        if (user, digest) in self._verified:
            return True
        try:
            ok = bcrypt.checkpw(password.encode("utf-8"), stored)
        except ValueError:
            return False
        if ok:
            self._verified.add((user, digest))
        return ok


def load_web_config(path: str) -> WebConfig:
    problems: list[str] = []
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read the web config file: {exc.strerror or exc}"]) from None
    except yaml.YAMLError:
        raise ConfigError([f"{path}: invalid YAML"]) from None
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: <top>: expected a mapping with tls_server_config and/or basic_auth_users"])
    for key in data:
        if key not in ("tls_server_config", "basic_auth_users", "http_server_config"):
            problems.append(f"{path}: {key}: unknown key (known: tls_server_config, basic_auth_users, "
                            f"http_server_config)")
    cfg = WebConfig()
    tls = data.get("tls_server_config")
    if tls is not None:
        cfg.ssl_context = _tls(path, tls, problems)
    users = data.get("basic_auth_users") or {}
    if not isinstance(users, dict):
        problems.append(f"{path}: basic_auth_users: expected a mapping of user names to bcrypt hashes")
        users = {}
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            problems.append(f"{path}: basic_auth_users.{user}: expected a bcrypt hash ($2y$...), got <hidden>")
            continue
        cfg.users[str(user)] = hashed.replace("$2y$", "$2b$", 1).encode("ascii")  # Go's $2y$ is bcrypt's $2b$
    if problems:
        raise ConfigError(problems)
    return cfg


def _tls(path: str, tls: Any, problems: list[str]) -> ssl.SSLContext | None:
    where = f"{path}: tls_server_config"
    if not isinstance(tls, dict):
        problems.append(f"{where}: expected a mapping")
        return None
    for key in tls:
        if key not in KNOWN_TLS:
            problems.append(f"{where}.{key}: unknown key")
    for key in ("cert_file", "key_file"):
        if not tls.get(key):
            problems.append(f"{where}.{key}: missing: TLS needs a certificate and its key")
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth not in CLIENT_AUTH:
        problems.append(f"{where}.client_auth_type: expected one of {', '.join(CLIENT_AUTH)}, got {auth!r}")
    versions = {}
    for key, default in (("min_version", "TLS12"), ("max_version", "TLS13")):
        value = tls.get(key, default)
        if value not in TLS_VERSIONS:
            problems.append(f"{where}.{key}: expected one of {', '.join(TLS_VERSIONS)}, got {value!r}")
        versions[key] = TLS_VERSIONS.get(value)
    if problems:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = versions["min_version"]
    ctx.maximum_version = versions["max_version"]
    try:
        ctx.load_cert_chain(tls["cert_file"], tls["key_file"])
    except (OSError, ssl.SSLError) as exc:
        problems.append(f"{where}: cannot load cert_file/key_file: {getattr(exc, 'strerror', None) or exc}")
        return None
    ctx.verify_mode = CLIENT_AUTH[auth]
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
        header = request.headers.get("Authorization", "")
        if header.startswith("Basic "):
            try:
                user, _, password = base64.b64decode(header[6:], validate=True).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError):
                user, password = "", ""
            if user and cfg.check(user, password):
                return await handler(request)
        return web.Response(status=401, text="Unauthorized\n",
                            headers={"WWW-Authenticate": 'Basic realm="vllm-headroom"'})

    return middleware
