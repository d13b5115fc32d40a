"""Fetching one vLLM server's /metrics: bounded in time and size, every failure given a fixed reason."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field

import aiohttp

from exporter.exposition_parser import LabelCache, Sample, parse
from exporter.vllm import names
from exporter.vllm.names import normalize

# `reason` label values of vllm_headroom_scrape_errors_total: a small fixed set.
ERROR_REASONS = (
    "refused",
    "dns",
    "tls",
    "timeout",
    "http_status",
    "too_large",
    "unparsable",
    "no_vllm_metrics",
    "other",
)
ACCEPT = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
PARSE_INLINE_BYTES = 64 * 1024  # one vLLM engine's answer (~18 KB) is parsed on the loop; larger ones are not


@dataclass
class ScrapeResult:
    ok: bool
    reason: str | None = None  # one of ERROR_REASONS when not ok
    detail: str = ""  # for the daemon's own log, never a label
    duration_s: float = 0.0
    size_bytes: int = 0
    series: dict[str, list[Sample]] = field(default_factory=dict)


async def fetch_metrics(
    session: aiohttp.ClientSession, url: str, timeout_s: float, max_bytes: int, labels: LabelCache | None = None
) -> ScrapeResult:
    """GET the URL and parse it; never raises for a broken target. `labels`: this target's label cache, kept
    across its scrapes (its label blocks repeat; only values move)."""
    start = time.monotonic()
    result = await _fetch(session, url, timeout_s, max_bytes, labels)
    result.duration_s = time.monotonic() - start
    return result


async def _fetch(
    session: aiohttp.ClientSession, url: str, timeout_s: float, max_bytes: int, labels: LabelCache | None
) -> ScrapeResult:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with session.get(url, timeout=timeout, headers={"Accept": ACCEPT}, allow_redirects=False) as resp:
            if resp.status != 200:
                return ScrapeResult(False, "http_status", f"HTTP {resp.status}")
            length = resp.content_length
            if length is not None and length > max_bytes:
                return ScrapeResult(False, "too_large", f"Content-Length {length} > {max_bytes}")
            chunks, size = [], 0
            async for chunk in resp.content.iter_chunked(256 * 1024):
                size += len(chunk)
                if size > max_bytes:
                    return ScrapeResult(False, "too_large", f"body over {max_bytes} bytes")
                chunks.append(chunk)
    except asyncio.TimeoutError:
        return ScrapeResult(False, "timeout", f"no complete answer within {timeout_s:g}s")
    except aiohttp.ClientConnectorDNSError as exc:  # before its base class: a name that does not resolve
        return ScrapeResult(False, "dns", str(exc.os_error or exc)[:200])
    except aiohttp.ClientSSLError as exc:  # handshake or certificate (both connector errors too)
        return ScrapeResult(False, "tls", f"{type(exc).__name__}: {str(exc)[:200]}")
    except aiohttp.ClientConnectorError as exc:
        return ScrapeResult(False, "refused", str(exc.os_error or exc)[:200])
    except (aiohttp.ClientError, OSError) as exc:
        return ScrapeResult(False, "other", f"{type(exc).__name__}: {str(exc)[:200]}")
    if size > PARSE_INLINE_BYTES:  # a large answer is parsed on a worker thread: /metrics keeps being served
        return await asyncio.get_running_loop().run_in_executor(None, _parse, chunks, size, labels)
    return _parse(chunks, size, labels)


# family name (as its HELP line gives it) -> None when a sample of it may be a name the daemon reads, else a
# pattern finding a line of its block that is neither a comment nor one of its samples
_UNUSED: dict[str, re.Pattern | None] = {}


def _unused(family: str) -> re.Pattern | None:
    if family in _UNUSED:
        return _UNUSED[family]
    other = None
    if family.startswith("vllm:") and not any(w.startswith(family) for w in names.USED_WIRE):
        other = re.compile(r"\n(?!#|" + re.escape(family) + r"|\Z)")
    if len(_UNUSED) > 1_000:  # a target inventing names: never grow without bound
        _UNUSED.clear()
    _UNUSED[family] = other
    return other


def used_families(body: str) -> str:
    """`body` without the families the daemon never reads (vLLM's e2e, inter-token and token-count histograms,
    about half of its samples), cut out before parsing. Exact: a family is cut only when every line between its
    HELP line and the next is a comment or a sample whose name starts with the family's, and no name the daemon
    reads (names.USED_WIRE) starts with it; anything else, and a body without HELP lines, is kept whole."""
    pieces = ("\n" + body).split("\n# HELP ")
    if len(pieces) < 3:
        return body
    kept = [pieces[0]]
    for piece in pieces[1:]:
        space, nl = piece.find(" "), piece.find("\n")
        other = _unused(piece[: space if nl == -1 or -1 < space < nl else nl])
        if other is not None and nl != -1 and other.search(piece, nl) is None:
            continue
        kept.append(piece)
    if len(kept) == len(pieces):
        return body
    return "\n# HELP ".join(kept)[1:]


def _parse(chunks: list[bytes], size: int, labels: LabelCache | None = None) -> ScrapeResult:
    body = b"".join(chunks).decode("utf-8", errors="replace")
    chunks.clear()
    used = used_families(body)
    expo = parse(used, labels, meta=False)
    if not expo.samples and used is not body:  # nothing the daemon reads: the whole answer decides the reason
        expo = parse(body, labels, meta=False)
    del body
    if not expo.samples:
        return ScrapeResult(False, "unparsable", expo.first_error or "no samples", size_bytes=size)
    # only what the daemon reads (names.USED); a server with vLLM series but none of those is still a vLLM
    series = normalize(expo.samples, used_only=True) or normalize(expo.samples)
    if not series:
        return ScrapeResult(
            True, "no_vllm_metrics", "answered, but no vllm: series (--disable-log-stats?)", size_bytes=size
        )
    return ScrapeResult(True, None, "", size_bytes=size, series=series)
