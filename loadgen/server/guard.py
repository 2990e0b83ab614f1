"""What the reference server checks before a request reaches the API: the key and the body.

- **API key** (``--api-key``): every ``/v1/*`` route wants ``Authorization: Bearer KEY``
  (``/v1/messages`` also ``x-api-key``), compared in constant time; else a 401.
- **Body size** over ``max_body_bytes``: a 413. **Body timeout** (``body_timeout_s``): a 408.
- **Context bound**: a body larger than :func:`context_body_limit` of the model's context
  (:data:`BYTES_PER_TOKEN` a token plus 64 KiB) is a 400 ``context_length_exceeded`` as soon
  as it is declared or read that far: never parsed or tokenised.
- **JSON**: invalid JSON, invalid UTF-8 and JSON nested too deeply are 400s.

Every refusal is a :class:`~loadgen.server.rejected.RequestRejected`; nothing here logs.
Docs: docs/server.md, "Hostile clients and shutdown".
"""

from __future__ import annotations

import asyncio
import hmac
import json
from typing import Any

from aiohttp import web

from loadgen.server.config import HttpLimits
from loadgen.server.rejected import RequestRejected

__all__ = ["BYTES_PER_TOKEN", "MESSAGES_PATH", "check_api_key", "context_body_limit", "read_json"]

MESSAGES_PATH = "/v1/messages"
"""Anthropic's Messages route: its key may come as ``x-api-key``."""

BYTES_PER_TOKEN = 128
"""Body bytes allowed per token of the context: a token of text is rarely over 16 bytes, 12
when JSON-escaped (``\\ud83d\\ude00``) per character; a token id is at most 8 (``131071, ``)."""
_SLACK_BYTES = 64 * 1024  # the other fields: model, stop strings, options


def context_body_limit(max_model_len: int) -> int:
    """The largest body a request for a context of ``max_model_len`` tokens may have."""
    return max_model_len * BYTES_PER_TOKEN + _SLACK_BYTES


def _protected(request: web.Request) -> bool:
    path = request.path
    return request.method != "OPTIONS" and (path == "/v1" or path.startswith("/v1/"))


def check_api_key(request: web.Request, api_key: str | None) -> None:
    """Raise a 401 unless ``request`` may pass (see the module docstring)."""
    if api_key is None or not _protected(request):
        return
    sent = request.headers.get("Authorization", "").encode("utf-8", "surrogatepass")
    ok = hmac.compare_digest(sent, f"Bearer {api_key}".encode())
    if request.path == MESSAGES_PATH and "x-api-key" in request.headers:
        ok |= hmac.compare_digest(request.headers["x-api-key"].encode("utf-8", "surrogatepass"), api_key.encode())
    if not ok:
        raise RequestRejected(
            "Incorrect or missing API key: send 'Authorization: Bearer <key>' with the key given to --api-key",
            status=401,
            code="invalid_api_key",
        )


def _too_long(max_model_len: int, size: str, param: str) -> RequestRejected:
    limit = context_body_limit(max_model_len)
    return RequestRejected(
        f"This model's maximum context length is {max_model_len} tokens. However, the request "
        f"body is {size} bytes, more than any prompt of {max_model_len} tokens takes "
        f"({limit} bytes). Please reduce the length of the prompt.",
        param=param,
        code="context_length_exceeded",
        close=True,
    )


async def _read_at_most(request: web.Request, limit: int) -> bytes | None:
    """The body, or None as soon as more than ``limit`` bytes arrived (the rest unread).
    A body a middleware has already read whole is taken from aiohttp's cache of it."""
    if request.body_exists and not request.can_read_body:
        data = await request.read()
        return None if len(data) > limit else data
    chunks: list[bytes] = []
    total = 0
    while chunk := await request.content.readany():
        total += len(chunk)
        if total > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(
    request: web.Request, limits: HttpLimits, *, max_model_len: int | None = None, param: str = "prompt"
) -> Any:
    """The decoded JSON body of ``request``, within the size and time limits (and within
    :func:`context_body_limit` of ``max_model_len`` when given; ``param`` names the prompt
    in that error)."""
    too_large = RequestRejected(
        f"the request body is larger than {limits.max_body_bytes} bytes",
        status=413,
        code="request_too_large",
        close=True,
    )
    context = limits.max_body_bytes + 1
    if max_model_len is not None:
        context = context_body_limit(max_model_len)
    declared = request.content_length
    if declared is not None and declared > limits.max_body_bytes:
        raise too_large
    if declared is not None and declared > context:
        raise _too_long(max_model_len or 0, f"{declared:,}", param)
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            raw = await _read_at_most(request, min(limits.max_body_bytes, context))
    except TimeoutError:
        raise RequestRejected(
            f"the request body did not arrive within {limits.body_timeout_s:g} s",
            status=408,
            code="request_timeout",
            close=True,
            hangup=True,
        ) from None
    if raw is None:
        if context <= limits.max_body_bytes:
            raise _too_long(max_model_len or 0, f"over {context:,}", param)
        raise too_large
    try:
        return json.loads(raw)
    except RecursionError:
        raise RequestRejected("the request body is not valid JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestRejected(f"the request body is not valid JSON: {exc}") from None
