"""One non-streamed request that reads the server's prompt count (``usage.prompt_tokens``).

Several servers (llama.cpp's among them) ignore ``stream_options.include_usage``, so a
stream carries no usage, yet their non-streamed answers always do. Prompt calibration
falls back to this probe: the dialect's :meth:`~loadgen.client.dialects.Dialect.non_stream_body`
(for OpenAI: ``"stream": false``, no ``stream_options``, one output token), read by its
``answer_usage`` and ``usage_counts``. Every failure becomes a :class:`ProbeResult` with a
one-line reason, never an exception; the headers (which may hold an API key) are sent
and never shown, and masked in the server's text (:mod:`loadgen.client.redact`). The
answer is read up to ``MAX_ANSWER`` bytes (an error body ``MAX_ERROR``) after
decompression, and ``timeout_s`` bounds each read and the whole request.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx

from loadgen.client.bounded import ACCEPT_ENCODING, MAX_ANSWER, MAX_ERROR, read_capped
from loadgen.client.dialects import Dialect, DialectOptions
from loadgen.client.redact import Redactor
from loadgen.errors import InvalidResponse, redirect_text
from loadgen.records import RequestSpec

__all__ = ["ProbeResult", "probe_prompt_tokens"]


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """``prompt_tokens`` from the answer's usage, or ``None`` and why not in ``error``."""

    prompt_tokens: int | None
    error: str | None = None


def _prompt_tokens(dialect: Dialect, answer: Any) -> int | None:
    usage = dialect.answer_usage(answer)
    n = None if usage is None else dialect.usage_counts(usage)[0]
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


async def probe_prompt_tokens(
    base_url: str,
    dialect: Dialect,
    options: DialectOptions,
    spec: RequestSpec,
    headers: dict[str, str] | None = None,
    timeout_s: float = 60.0,
) -> ProbeResult:
    """POST ``spec`` non-streamed to ``base_url + dialect.path`` and read its usage."""
    url = base_url.rstrip("/") + dialect.path
    body = dialect.non_stream_body(spec, options)
    redact = Redactor(headers)
    try:
        async with asyncio.timeout(timeout_s):
            async with (
                httpx.AsyncClient(
                    headers={"Accept-Encoding": ACCEPT_ENCODING, **(headers or {})},
                    timeout=timeout_s,
                    follow_redirects=False,
                ) as client,
                client.stream("POST", url, json=body) as resp,
            ):
                status, location = resp.status_code, resp.headers.get("Location")
                ok = status == 200
                raw = await read_capped(
                    resp.aiter_raw(),
                    resp.headers.get("Content-Encoding"),
                    MAX_ANSWER if ok else MAX_ERROR,
                    truncate=not ok,
                )
    except (httpx.TimeoutException, TimeoutError):
        return ProbeResult(None, f"the non-streamed request got no answer within {timeout_s:g} s")
    except httpx.HTTPError as exc:
        return ProbeResult(None, f"the non-streamed request failed: {type(exc).__name__}: {redact(str(exc))}")
    except InvalidResponse as exc:
        return ProbeResult(None, f"the non-streamed answer: {exc}")
    if status != 200:
        if 300 <= status < 400:
            text = redirect_text(None if location is None else redact(location))
        else:
            text = " ".join(redact(raw.decode("utf-8", errors="replace")).split())[:200]
        return ProbeResult(None, f"the non-streamed request answered HTTP {status}: {text}")
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return ProbeResult(None, "the non-streamed answer is not JSON")
    n = _prompt_tokens(dialect, obj)
    if n is None:
        return ProbeResult(None, "the non-streamed answer has no usage.prompt_tokens either")
    return ProbeResult(n)
