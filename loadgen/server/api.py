"""The reference server's OpenAI-compatible HTTP API (aiohttp.web) over an :class:`AsyncEngine`.

Routes: ``POST /v1/completions``, ``/v1/chat/completions``, ``/v1/responses``,
``/v1/messages``, ``/v1/embeddings``, ``/v1/rerank`` (and ``/v2/rerank``), ``/v1/score``;
``GET /v1/models``, ``/health``, ``/metrics`` and ``/loadgen/requests``. The handlers are
:class:`~loadgen.server.handlers.ServerApi`'s; what an answer and a stream carry is in
:mod:`loadgen.server.generation`, :mod:`loadgen.server.responses_api`,
:mod:`loadgen.server.messages_api` and :mod:`loadgen.server.pooling_api`; what is refused
before a handler runs, in :mod:`loadgen.server.guard`. Errors are OpenAI-style JSON
(Anthropic's on ``/v1/messages``); a client that disconnects aborts its engine request.

Docs: docs/server.md ("The routes", "Parsing and errors").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from loadgen.server.config import HttpLimits
from loadgen.server.engine.interface import AsyncEngine
from loadgen.server.faults import FaultConfig
from loadgen.server.guard import MESSAGES_PATH, check_api_key
from loadgen.server.handlers import CountSampler, ServerApi
from loadgen.server.messages_api import anthropic_error_body
from loadgen.server.pooling_api import add_pooling_routes
from loadgen.server.rejected import RequestRejected, error_body
from loadgen.server.tokenizer import Tokenizer, WordTokenizer
from loadgen.server.tools import ToolPolicy

__all__ = ["API_KEY", "create_app"]

log = logging.getLogger(__name__)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_OPEN_WHILE_DRAINING = ("/metrics", "/loadgen/requests")


def _json_error(request: web.Request, status: int, body: dict[str, Any]) -> web.Response:
    """An error answer in the route's own shape (Anthropic's for ``/v1/messages``)."""
    if request.path == MESSAGES_PATH:
        body = anthropic_error_body(status, body["error"]["message"])
    return web.json_response(body, status=status)


def _error_middleware(api: ServerApi) -> Any:
    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if api.draining and request.path not in _OPEN_WHILE_DRAINING:
                raise RequestRejected(
                    "the server is shutting down", status=503, type="server_error", code="shutting_down", close=True
                )
            check_api_key(request, api.http.api_key)
            return await handler(request)
        except RequestRejected as exc:
            api.metrics.reject(exc.status)
            response = _json_error(request, exc.status, exc.body())
            if exc.close:
                response.force_close()
            if exc.hangup and request.transport is not None:
                await response.prepare(request)
                await response.write_eof()
                request.transport.close()
            return response
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
            message = (
                f"{request.method} {request.path}: {exc.reason}" if exc.status in (404, 405) else exc.text or exc.reason
            )
            return _json_error(request, exc.status, error_body(message, type=kind, code=str(exc.status)))
        except Exception:
            log.exception("unhandled error in %s %s", request.method, request.path)
            return _json_error(request, 500, error_body("internal server error", type="server_error"))

    return errors


API_KEY = web.AppKey("loadgen_api", ServerApi)


def create_app(
    engine: AsyncEngine,
    *,
    model_name: str | None = None,
    faults: FaultConfig | None = None,
    max_in_flight: int | None = None,
    history: int = 10_000,
    tokenizer: Tokenizer | None = None,
    manage_engine: bool = True,
    http: HttpLimits | None = None,
    reasoning_tokens: CountSampler | None = None,
    seed: int = 0,
    tools: ToolPolicy | None = None,
) -> web.Application:
    """The aiohttp application serving ``engine`` under the name ``model_name``.

    ``model_name`` defaults to the engine's; ``faults`` injects seeded failures;
    ``max_in_flight`` answers 429 beyond that many open requests (on top of the engine's
    own queue limit); ``history`` is how many finished requests ``/loadgen/requests``
    keeps; the tokenizer defaults to the engine's own (an ``engine.tokenizer`` attribute,
    e.g. a real model's), else a :class:`WordTokenizer` of the engine's vocabulary.
    With ``manage_engine`` the app starts the engine on startup and stops it on cleanup.
    ``http``: the API key, body timeout and body size limit (:mod:`loadgen.server.guard`).
    ``reasoning_tokens`` (drawn with ``seed``) makes chat answers reason first (module doc);
    ``tools``: how often a request with ``tools`` and ``tool_choice: "auto"`` gets a tool call
    (:mod:`loadgen.server.tools`).
    """
    http = http or HttpLimits()
    name = model_name or engine.model_name
    tok: Tokenizer | None = tokenizer
    if tok is None:
        tok = getattr(engine, "tokenizer", None)
    if tok is None:
        tok = WordTokenizer(engine.vocab_size)
    api = ServerApi(
        engine,
        model_name=name,
        faults=faults,
        max_in_flight=max_in_flight,
        history=history,
        tokenizer=tok,
        http=http,
        reasoning_tokens=reasoning_tokens,
        seed=seed,
        tools=tools,
    )
    app = web.Application(middlewares=[_error_middleware(api)], client_max_size=http.max_body_bytes)
    app[API_KEY] = api
    app.router.add_post("/v1/completions", api.completions)
    app.router.add_post("/v1/chat/completions", api.chat_completions)
    app.router.add_post("/v1/responses", api.responses)
    app.router.add_post(MESSAGES_PATH, api.messages)
    add_pooling_routes(app, api)
    app.router.add_get("/v1/models", api.models)
    app.router.add_get("/health", api.health)
    app.router.add_get("/metrics", api.prometheus)
    app.router.add_get("/loadgen/requests", api.recent)
    app.on_shutdown.append(api.cancel_all)
    if manage_engine:

        async def start_engine(app: web.Application) -> None:
            await engine.start()

        async def stop_engine(app: web.Application) -> None:
            await engine.stop()

        app.on_startup.append(start_engine)
        app.on_cleanup.append(stop_engine)
    return app
