"""What the reference server checks before a request reaches the API: the key and the body.

- **API key** (``loadgen serve --api-key``, as ``vllm serve --api-key``): every ``/v1/*``
  route wants ``Authorization: Bearer KEY``, compared in constant time; other routes
  (``/health``, ``/metrics``, ``/loadgen/requests``) and ``OPTIONS`` stay open, as in vLLM.
  A missing or wrong key is a 401 that never repeats what was sent.
- **Body size**: a body over ``max_body_bytes`` (declared in ``Content-Length`` or found
  while reading a chunked body) is a 413; the connection is not kept alive.
- **Body timeout**: the whole body must arrive within ``body_timeout_s`` of the handler
  starting, else a 408 and the connection is closed (a client that sends headers and never
  the body no longer holds a connection forever).
- **JSON**: invalid JSON, invalid UTF-8 and JSON nested too deeply for the parser are 400s.

Every refusal is a :class:`~loadgen.server.protocol.RequestRejected` (an OpenAI-style
error); nothing here logs.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from typing import Any

from aiohttp import web

from loadgen.server.config import HttpLimits
from loadgen.server.protocol import RequestRejected

__all__ = ["check_api_key", "read_json"]

def _protected(request: web.Request) -> bool:
    path = request.path
    return request.method != "OPTIONS" and (path == "/v1" or path.startswith("/v1/"))


def check_api_key(request: web.Request, api_key: str | None) -> None:
    """Raise a 401 unless ``request`` may pass (see the module docstring)."""
    if api_key is None or not _protected(request):
        return
    sent = request.headers.get("Authorization", "").encode("utf-8", "surrogatepass")
    if not hmac.compare_digest(sent, f"Bearer {api_key}".encode()):
        raise RequestRejected("Incorrect or missing API key: send 'Authorization: Bearer "
                              "<key>' with the key given to --api-key", status=401,
                              code="invalid_api_key")


async def read_json(request: web.Request, limits: HttpLimits) -> Any:
    """The decoded JSON body of ``request``, within the size and time limits."""
    too_large = RequestRejected(f"the request body is larger than {limits.max_body_bytes} bytes",
                                status=413, code="request_too_large", close=True)
    declared = request.content_length
    if declared is not None and declared > limits.max_body_bytes:
        raise too_large
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            raw = await request.read()
    except TimeoutError:
        raise RequestRejected(f"the request body did not arrive within "
                              f"{limits.body_timeout_s:g} s", status=408,
                              code="request_timeout", close=True, hangup=True) from None
    except web.HTTPRequestEntityTooLarge:
        raise too_large from None
    try:
        return json.loads(raw)
    except RecursionError:
        raise RequestRejected("the request body is not valid JSON: nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestRejected(f"the request body is not valid JSON: {exc}") from None
