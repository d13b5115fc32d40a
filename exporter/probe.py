"""Is a vLLM server answering at this address? `make run` asks before it chooses `serve` over the demo.

Anything can answer a TCP connect on :8000; a vLLM is recognised by what it serves: `/metrics` with
`vllm:` series (every vLLM version prefixes its metrics so), or `/version` answering JSON with a
`version` key (vLLM's OpenAI-compatible server: `show_version` in
vllm/entrypoints/serve/instrumentator/basic.py, earlier in vllm/entrypoints/openai/api_server.py).

`python -m exporter.probe [BASE_URL]` exits 0 for a vLLM, 1 for anything else, and says which.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8000"
MAX_BYTES = 8 * 1024 * 1024  # enough of /metrics to see a `vllm:` series; the rest is not read


def _get(url: str, timeout: float) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            if r.status != 200:
                return None
            return r.read(MAX_BYTES)
    except (OSError, ValueError, urllib.error.URLError):
        return None


def identify(base_url: str = DEFAULT_URL, timeout: float = 2.0) -> str | None:
    """How `base_url` shows it is a vLLM ("/metrics has vllm: series" or "/version answers"), or None."""
    base = base_url.rstrip("/")
    body = _get(base + "/metrics", timeout)
    if body is not None and (body.startswith(b"vllm:") or b"\nvllm:" in body):
        return "/metrics has vllm: series"
    body = _get(base + "/version", timeout)
    if body is not None:
        try:
            answer = json.loads(body)
        except ValueError:
            return None
        if isinstance(answer, dict) and isinstance(answer.get("version"), str):
            return f"/version answers {answer['version']}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    url = args[0] if args else DEFAULT_URL
    how = identify(url)
    if how is None:
        print(f"no vLLM at {url}: neither /metrics with vllm: series nor /version answered")
        return 1
    print(f"vLLM at {url}: {how}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
