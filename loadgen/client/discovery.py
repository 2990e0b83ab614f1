"""Before any load: normalise the target URL, check it answers, find the model.

One GET with httpx on the run's event loop; any failure is one :class:`TargetError`
line. Bounded like every read (:mod:`loadgen.client.bounded`): the answer is read up to
``MAX_ANSWER`` bytes after decompression, and the whole of discovery has a deadline
(``deadline_s``) beside the timeout of each read, so a server that trickles its answer
cannot hold the run, and Ctrl-C or SIGTERM act at once (nothing runs in a thread).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from loadgen.client.bounded import ACCEPT_ENCODING, DISCOVERY_S, MAX_ANSWER, read_capped
from loadgen.client.redact import Redactor, redact_url
from loadgen.errors import ConfigError, InvalidResponse, TargetError, redirect_text

__all__ = ["ENDPOINT_PATHS", "ServerInfo", "discover", "endpoint_path", "normalize_url", "split_credentials"]

# The API paths the dialects post to (and the model list): a --url ending in one is an
# endpoint pasted where the base URL belongs, so the path is taken off.
ENDPOINT_PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/embeddings",
    "/v1/rerank",
    "/v2/rerank",
    "/v1/score",
    "/v1/models",
)


@dataclass(slots=True)
class ServerInfo:
    base_url: str
    model: str
    models: list[str]
    max_model_len: int | None = None


def endpoint_path(url: str) -> str | None:
    """The API path at the end of ``url`` (``/v1/chat/completions``) that
    :func:`normalize_url` takes off, or None when it ends in none."""
    try:
        path = urlsplit(url.strip()).path.rstrip("/")
    except ValueError:  # not a URL: normalize_url says so
        return None
    return next((p for p in ENDPOINT_PATHS if path.endswith(p)), None)


def normalize_url(url: str) -> str:
    """``http://h:8000/v1/`` or ``http://h:8000/v1/chat/completions`` → ``http://h:8000``
    (any of :data:`ENDPOINT_PATHS`, then a trailing ``/v1``); credentials kept (they are
    used, not stored)."""
    try:
        parts = urlsplit(url.strip())
        _ = parts.port  # parsed on access: a port that is not a number 0-65535 raises
    except ValueError as exc:
        raise ConfigError(f"not a valid URL: {redact_url(url)!r} ({exc})", field="url") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"not an http(s) URL: {url!r} (example: http://127.0.0.1:8000)", field="url")
    path = parts.path.rstrip("/")
    endpoint = endpoint_path(url)
    if endpoint is not None:
        path = path[: -len(endpoint)]
    if path.endswith("/v1"):
        path = path[:-3]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def split_credentials(url: str) -> tuple[str, dict[str, str]]:
    """``http://user:pw@h:8000`` → (``http://h:8000``, a Basic ``Authorization`` header)."""
    import base64
    from urllib.parse import unquote

    parts = urlsplit(url)
    if parts.username is None:
        return url, {}
    token = base64.b64encode(f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()).decode()
    return redact_url(url), {"Authorization": f"Basic {token}"}


async def discover(
    base_url: str,
    headers: dict[str, str],
    model: str | None = None,
    timeout_s: float = 10.0,
    deadline_s: float = DISCOVERY_S,
) -> ServerInfo:
    """GET ``/v1/models``; pick ``model`` (checked when the server lists it) or the first one.

    ``timeout_s`` bounds each read, ``deadline_s`` the whole exchange."""
    url = base_url + "/v1/models"
    shown = redact_url(url)
    redact = Redactor(headers)
    body = b""
    try:
        async with asyncio.timeout(deadline_s):
            async with (
                httpx.AsyncClient(
                    headers={"Accept-Encoding": ACCEPT_ENCODING, **headers}, timeout=timeout_s, follow_redirects=False
                ) as client,
                client.stream("GET", url) as resp,
            ):
                status, location = resp.status_code, resp.headers.get("Location")
                if status == 200:
                    body = await read_capped(
                        resp.aiter_raw(), resp.headers.get("Content-Encoding"), MAX_ANSWER, truncate=False
                    )
    except TimeoutError as exc:
        raise TargetError(f"{shown} did not finish answering within {deadline_s:g} s (discovery's deadline)") from exc
    except httpx.ConnectError as exc:
        raise TargetError(f"cannot reach {shown}: {exc}. Is the server running?") from exc
    except httpx.TimeoutException as exc:
        raise TargetError(f"{shown} did not answer within {timeout_s:g} s") from exc
    except httpx.HTTPError as exc:
        raise TargetError(f"cannot reach {shown}: {type(exc).__name__}: {redact(str(exc))}") from exc
    except InvalidResponse as exc:  # over the cap, a decompression bomb, a corrupt or unknown encoding
        raise TargetError(f"{shown}: {exc}") from exc
    if status in (401, 403):
        raise TargetError(f"{shown} answered {status}: set the API key (--api-key-env NAME)")
    if 300 <= status < 400:
        raise TargetError(
            f"{shown} answered HTTP {status}: {redirect_text(None if location is None else redact(location))}"
        )
    if status != 200:
        if model:  # some servers lack /v1/models; trust the user's model name
            return ServerInfo(base_url, model, [model])
        hint = " (--url takes the server's base URL, e.g. http://127.0.0.1:8000)" if urlsplit(base_url).path else ""
        raise TargetError(f"{shown} answered HTTP {status}{hint}; pass --model explicitly")
    try:
        data = json.loads(body)
        entries = data["data"]
        ids = [str(e["id"]) for e in entries]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise TargetError(f"{shown} returned an unexpected body (not an OpenAI model list)") from exc
    if model is None:
        if not ids:
            raise TargetError(f"{shown} lists no models; pass --model")
        model = ids[0]
    max_len = None
    for e in entries:
        if isinstance(e, dict) and str(e.get("id")) == model and isinstance(e.get("max_model_len"), int):
            max_len = e["max_model_len"]
    return ServerInfo(base_url, model, ids, max_len)
