"""Basic auth under a password-guessing flood: a scraper's /metrics latency while 64 connections send wrong
passwords to `vllm-headroom serve` (bcrypt cost 10), and how long a wrong password takes to be refused for a
known and an unknown user (they should not differ: the unknown one is checked against a dummy hash).

    python -m benchmarks.bench_auth
"""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import bcrypt
import yaml

from tests.conftest import free_port

ATTACKERS = 64
SECONDS = 5.0


def _auth(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def _measure(url: str) -> dict:
    stop = time.monotonic() + SECONDS
    good = _auth("prometheus", "right")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def attacker(i: int) -> int:
            n = 0
            while time.monotonic() < stop:
                async with http.get(url, headers=_auth("prometheus" if i % 2 else f"nobody{i}", "wrong")) as r:
                    await r.read()
                n += 1
            return n

        async def scraper() -> list[float]:
            out = []
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                async with http.get(url, headers=good) as r:
                    await r.read()
                    assert r.status == 200, r.status
                out.append(time.perf_counter() - t0)
                await asyncio.sleep(0.1)
            return out

        async def refusal(user: str) -> float:
            times = []
            for _ in range(20):
                t0 = time.perf_counter()
                async with http.get(url, headers=_auth(user, "wrong")) as r:
                    await r.read()
                times.append(time.perf_counter() - t0)
            return statistics.median(times)

        quiet = {
            "known_user_refused_ms": await refusal("prometheus") * 1e3,
            "unknown_user_refused_ms": await refusal("nobody") * 1e3,
        }
        results = await asyncio.gather(scraper(), *(attacker(i) for i in range(ATTACKERS)))
    lat = sorted(results[0])
    return {
        **quiet,
        "attack_requests": sum(results[1:]),
        "scrapes": len(lat),
        "scrape_p50_ms": lat[len(lat) // 2] * 1e3,
        "scrape_max_ms": lat[-1] * 1e3,
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10)).decode()
        (tmp / "web.yaml").write_text(yaml.safe_dump({"basic_auth_users": {"prometheus": hashed}}))
        port = free_port()
        cfg = {
            "listen_address": f"127.0.0.1:{port}",
            "state_dir": str(tmp / "state"),
            "gpu": {"backend": "none"},
            "servers": [{"name": "s", "url": f"http://127.0.0.1:{free_port()}/metrics"}],
        }
        (tmp / "c.yaml").write_text(yaml.safe_dump(cfg))
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "exporter",
                "--log-level",
                "ERROR",
                "serve",
                "--config",
                str(tmp / "c.yaml"),
                "--web.config.file",
                str(tmp / "web.yaml"),
            ]
        )
        try:
            import socket

            while True:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            print(json.dumps(asyncio.run(_measure(f"http://127.0.0.1:{port}/metrics")), indent=1))
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
