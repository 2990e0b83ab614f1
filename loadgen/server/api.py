"""The reference server's OpenAI-compatible HTTP API (aiohttp.web) over an :class:`AsyncEngine`.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models``,
``GET /health``, ``GET /metrics`` (Prometheus text, vLLM names) and
``GET /loadgen/requests`` (server timings of the last finished requests, JSON).

Streaming answers are Server-Sent Events, ``data: {json}\\n\\n``, each written and
flushed on its own: one event per engine output (one token per decode step). Chat streams
start with a role event (``delta: {"role": "assistant", "content": ""}``) just before the
first token. The last output event carries ``finish_reason`` and a vendor field
``"loadgen": {queue_s, prefill_s, decode_s, ttft_s, e2e_s, decode_steps, preemptions,
cached_tokens}`` (the engine's timings, plus any other timing the engine reports, e.g.
``kv_transfer_s``; ``ttft_s``/``e2e_s`` fall back to the API's own when the engine gave
none, e.g. for a request ended by a ``stop`` string). With
``stream_options.include_usage`` a usage-only event (``"choices": []``) follows; with
``continuous_usage_stats`` too (as in vLLM, only together with ``include_usage``) every
event carries the cumulative usage. The stream ends with ``data: [DONE]``.

``usage.completion_tokens`` counts every token the engine generated, including an EOS
token and the words of a matched stop sequence (neither appears in the text).

Reasoning (``reasoning_tokens``, ``loadgen serve --reasoning-tokens DIST``): each chat
request draws a count from the distribution (seeded) and streams that many of its first
generated tokens as ``delta.reasoning`` (vLLM's field name since 0.9; older vLLM and
DeepSeek call it ``reasoning_content``) before the answer's ``delta.content``. As in vLLM,
reasoning tokens are part of ``max_tokens`` and ``usage.completion_tokens``; a
non-streamed answer carries them in ``message.reasoning``. Completions requests have no
reasoning field: their text is unchanged.

Errors are OpenAI-style JSON (``{"error": {"message", "type", "param", "code"}}``): 400 for
invalid bodies, unknown models and prompts over the context length, 401 without the API key
(when one is set), 408 for a body that does not arrive in time, 413 for a body over the size
limit (see :mod:`loadgen.server.guard`), 429 when the engine's queue (or ``max_in_flight``)
is full, 404/405 for unknown routes and methods, 500 for injected faults and server bugs,
503 ``shutting_down`` while SIGTERM drains (:meth:`ServerApi.drain`; ``/metrics`` and
``/loadgen/requests`` stay open). A client that disconnects mid-request aborts its engine
request (the engine's iterator is closed, freeing its KV blocks).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from time import perf_counter_ns
from typing import Any, Protocol

import numpy as np
from aiohttp import web
from aiohttp.tcp_helpers import tcp_nodelay

from loadgen.errors import EngineError, PromptTooLong, QueueFull
from loadgen.server.config import HttpLimits
from loadgen.server.engine.interface import AsyncEngine, EngineRequest, SamplingParams, TokenOutput
from loadgen.server.faults import FaultConfig, FaultInjector, FaultPlan
from loadgen.server.guard import check_api_key, read_json
from loadgen.server.prometheus import RequestTrace, ServerMetrics
from loadgen.server.protocol import ParsedRequest, RequestRejected, error_body, parse_request, usage_body
from loadgen.server.tokenizer import Tokenizer, WordTokenizer

__all__ = ["API_KEY", "CountSampler", "ServerApi", "create_app"]

log = logging.getLogger(__name__)

_SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
_DONE = b"data: [DONE]\n\n"
_TIMING_KEYS = ("queue_s", "prefill_s", "decode_s", "ttft_s", "e2e_s", "decode_steps", "preemptions")


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def _aclose(it: AsyncIterator[TokenOutput]) -> None:
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        await aclose()


class CountSampler(Protocol):
    """Draws whole numbers (a workload length distribution fits: the CLI passes one)."""

    def sample(self, rng: np.random.Generator, n: int) -> Any: ...


class _Generation:
    """Turns engine outputs into released text (stop sequences applied) and counts tokens;
    the first ``reasoning_budget`` tokens' text goes to ``reasoning`` instead (per feed)."""

    __slots__ = (
        "cached",
        "finish_reason",
        "min_tokens",
        "reasoning",
        "reasoning_all",
        "reasoning_budget",
        "stop_reason",
        "stream",
        "timings",
        "tokens",
    )

    def __init__(self, tok: Tokenizer, parsed: ParsedRequest, reasoning_budget: int = 0) -> None:
        self.reasoning_budget = reasoning_budget
        self.reasoning = ""  # the reasoning text released by the last feed
        self.reasoning_all: list[str] = []
        self.stream = tok.output_stream(parsed.stop)
        self.min_tokens = parsed.min_tokens
        self.tokens = 0
        self.cached = 0
        self.finish_reason: str | None = None
        self.stop_reason: str | None = None
        self.timings: dict[str, float] | None = None

    def feed(self, out: TokenOutput) -> str:
        """Text released by one engine output (``""`` if none); sets ``finish_reason``."""
        self.cached = max(self.cached, out.num_cached_tokens)
        parts: list[str] = []
        thinking: list[str] = []
        self.reasoning = ""
        ids = out.token_ids
        eos = out.finish_reason == "stop" and bool(ids)  # the last id is EOS: count, not show
        for token_id in ids[:-1] if eos else ids:
            self.tokens += 1
            text, stopped = self.stream.push(token_id, may_stop=self.tokens >= self.min_tokens)
            if self.tokens <= self.reasoning_budget:
                thinking.append(text)
                self.reasoning = "".join(thinking)
            else:
                parts.append(text)
            if stopped:
                if self.reasoning:
                    self.reasoning_all.append(self.reasoning)
                self.finish_reason = "stop"
                self.stop_reason = self.stream.matched
                return "".join(parts)
        self.tokens += eos
        if self.reasoning:
            self.reasoning_all.append(self.reasoning)
        if out.finish_reason is not None:
            parts.append(self.stream.flush())
            self.finish_reason = out.finish_reason
            self.timings = dict(out.timings) if out.timings else None
        return "".join(parts)

    def vendor(self, trace: RequestTrace, now_ns: int) -> dict[str, Any]:
        """The ``loadgen`` vendor field of the final event."""
        timings = self.timings or {}
        out: dict[str, Any] = {}
        for key in _TIMING_KEYS:
            value = timings.get(key)
            if key in ("decode_steps", "preemptions") and value is not None:
                value = int(value)
            out[key] = value
        if out["ttft_s"] is None:
            out["ttft_s"] = trace.ttft_s
        if out["e2e_s"] is None:
            out["e2e_s"] = (now_ns - trace.arrival_ns) / 1e9
        out["cached_tokens"] = self.cached
        for key, value in timings.items():  # engine extras, e.g. kv_transfer_s
            out.setdefault(key, value)
        return out


class ServerApi:
    """Request handlers and state of one app (reachable as ``app[API_KEY]``)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        model_name: str,
        faults: FaultConfig | None,
        max_in_flight: int | None,
        history: int,
        tokenizer: Tokenizer,
        http: HttpLimits,
        reasoning_tokens: CountSampler | None = None,
        seed: int = 0,
    ) -> None:
        self.reasoning_tokens = reasoning_tokens
        self._reasoning_rng = np.random.default_rng([seed, 0x7EA5])
        self.engine = engine
        self.http = http
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.metrics = ServerMetrics(model_name, history=history)
        self.faults = FaultInjector(faults) if faults is not None and faults.active else None
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.tasks: set[asyncio.Task[Any]] = set()
        self.draining = False  # SIGTERM: new requests get 503 (see drain)
        self.ending = False  # the drain's grace period is over: open streams end now
        self.created = int(time.time())

    # -- small routes -------------------------------------------------------------------

    async def models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "loadgen",
            "root": self.engine.model_name,
            "parent": None,
            "max_model_len": self.engine.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def prometheus(self, request: web.Request) -> web.Response:
        per_replica = getattr(self.engine, "replica_stats", None)  # a ReplicatedEngine
        replicas = per_replica() if per_replica is not None else ()
        telemetry = getattr(self.engine, "gpu_telemetry", None)  # the sim's simulated GPUs
        gpus = telemetry() if telemetry is not None else []
        text = self.metrics.render(self.engine.stats(), replicas, gpus)
        return web.Response(body=text.encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def recent(self, request: web.Request) -> web.Response:
        raw = request.query.get("limit")
        limit = None
        if raw is not None:
            try:
                limit = int(raw)
            except ValueError:
                raise RequestRejected(f"'limit' must be an integer, got {raw!r}", param="limit") from None
        return web.json_response({"object": "list", "data": self.metrics.log.to_json(limit)})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    # -- generation ---------------------------------------------------------------------

    async def _serve(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        arrival_ns = perf_counter_ns()
        body = await read_json(
            request, self.http, max_model_len=self.engine.max_model_len, param="messages" if chat else "prompt"
        )
        parsed = parse_request(
            body,
            chat=chat,
            model_name=self.model_name,
            tokenizer=self.tokenizer,
            max_model_len=self.engine.max_model_len,
        )
        plan = self.faults.plan(parsed.max_tokens) if self.faults is not None else None
        if plan is not None and plan.fail:
            self.metrics.faults["fail"] += 1
            raise RequestRejected(
                "injected failure (fault injection)", status=500, type="server_error", code="injected_fault"
            )
        if self.max_in_flight is not None and self.in_flight >= self.max_in_flight:
            raise RequestRejected(
                f"too many requests in flight (max {self.max_in_flight})",
                status=429,
                type="rate_limit_error",
                code="rate_limit_exceeded",
            )
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        params = SamplingParams(
            max_tokens=parsed.max_tokens,
            min_tokens=parsed.min_tokens,
            ignore_eos=parsed.ignore_eos,
            temperature=parsed.temperature,
            seed=parsed.seed,
        )
        outputs = self.engine.generate(EngineRequest(rid, parsed.prompt_ids, params))
        trace = RequestTrace(
            id=rid,
            endpoint="chat" if chat else "completions",
            stream=parsed.stream,
            arrival_ns=arrival_ns,
            prompt_tokens=len(parsed.prompt_ids),
        )
        budget = 0
        if chat and self.reasoning_tokens is not None:
            budget = max(int(self.reasoning_tokens.sample(self._reasoning_rng, 1)[0]), 0)
        gen = _Generation(self.tokenizer, parsed, budget)
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        self.in_flight += 1
        started = False
        try:
            try:
                first = await outputs.__anext__()
            except asyncio.CancelledError:
                self._stop_cancelling()
                raise RequestRejected(
                    "the server is shutting down", status=503, type="server_error", code="shutting_down", close=True
                ) from None
            except QueueFull as exc:
                raise RequestRejected(
                    str(exc) or "the waiting queue is full", status=429, type="rate_limit_error", code="queue_full"
                ) from exc
            except PromptTooLong as exc:
                raise RequestRejected(
                    str(exc), param="messages" if chat else "prompt", code="context_length_exceeded"
                ) from exc
            except EngineError as exc:
                raise RequestRejected(str(exc), status=503, type="server_error", code="engine_error") from exc
            except StopAsyncIteration:
                raise RequestRejected(
                    "the engine finished the request without output", status=500, type="server_error"
                ) from None
            started = True
            if parsed.stream:
                return await self._stream(request, parsed, trace, gen, first, outputs, plan)
            try:
                return await self._complete(request, trace, gen, first, outputs, plan)
            except asyncio.CancelledError:
                self._stop_cancelling()
                trace.finish_reason = "abort"
                raise RequestRejected(
                    "the server is shutting down", status=503, type="server_error", code="shutting_down", close=True
                ) from None
        finally:
            await _aclose(outputs)
            self.in_flight -= 1
            if task is not None:
                self.tasks.discard(task)
            if started:
                trace.engine = gen.timings
                if not trace.done_ns:
                    trace.done_ns = perf_counter_ns()
                self.metrics.record(trace)

    @staticmethod
    async def _next(outputs: AsyncIterator[TokenOutput]) -> TokenOutput:
        try:
            return await outputs.__anext__()
        except StopAsyncIteration:  # the engine ended without a finish reason
            return TokenOutput(request_id="", token_ids=[], finish_reason="abort")

    def _chunk(
        self,
        trace: RequestTrace,
        chat: bool,
        text: str | None,
        finish: str | None,
        role: bool = False,
        reasoning: str = "",
    ) -> dict[str, Any]:
        choice: dict[str, Any]
        if chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if reasoning and not role:
                delta["reasoning"] = reasoning
            if text is not None and not role and (text or not reasoning):
                delta["content"] = text
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        return {
            "id": trace.id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
        }

    async def _stream(
        self,
        request: web.Request,
        parsed: ParsedRequest,
        trace: RequestTrace,
        gen: _Generation,
        first: TokenOutput,
        outputs: AsyncIterator[TokenOutput],
        plan: FaultPlan | None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=_SSE_HEADERS)
        response.enable_chunked_encoding()
        prompt_tokens = trace.prompt_tokens
        chat = parsed.chat
        out = first
        role_sent = not chat
        last_tokens = 0
        try:
            await response.prepare(request)
            if request.transport is not None:  # aiohttp sets it already; be explicit
                tcp_nodelay(request.transport, True)
            while True:
                text = gen.feed(out)
                finish = gen.finish_reason
                trace.output_tokens = gen.tokens
                trace.cached_tokens = gen.cached
                if text or gen.reasoning or finish is not None:
                    if plan is not None and plan.stall():
                        self.metrics.faults["stall"] += 1
                        await asyncio.sleep(plan.stall_s)
                    if not role_sent:
                        role = self._chunk(trace, chat, None, None, role=True)
                        if parsed.continuous_usage:
                            role["usage"] = usage_body(prompt_tokens, 0)
                        await response.write(_sse(role))
                        role_sent = True
                    chunk = self._chunk(trace, chat, text, finish, reasoning=gen.reasoning)
                    if parsed.continuous_usage:
                        chunk["usage"] = usage_body(prompt_tokens, gen.tokens)
                    if finish is not None:
                        if gen.stop_reason is not None:
                            chunk["choices"][0]["stop_reason"] = gen.stop_reason
                        chunk["loadgen"] = gen.vendor(trace, perf_counter_ns())
                    data = _sse(chunk)
                    sent_ns = perf_counter_ns()  # the bytes go to the socket in this write
                    await response.write(data)
                    if text or gen.reasoning:
                        trace.events.append((sent_ns, gen.tokens - last_tokens))
                        last_tokens = gen.tokens
                    if (
                        plan is not None
                        and plan.disconnect_after is not None
                        and (len(trace.events) >= plan.disconnect_after or finish is not None)
                    ):
                        self.metrics.faults["disconnect"] += 1
                        if request.transport is not None:
                            request.transport.close()
                        return response
                if finish is not None:
                    break
                out = await self._next(outputs)
            if parsed.include_usage:
                usage_only = self._chunk(trace, chat, None, None)
                usage_only["choices"] = []
                usage_only["usage"] = usage_body(prompt_tokens, gen.tokens)
                await response.write(_sse(usage_only))
            await response.write(_DONE)
            trace.done_ns = perf_counter_ns()
            trace.finish_reason = gen.finish_reason or "abort"
            await response.write_eof()
        except asyncio.CancelledError:
            self._stop_cancelling()  # the drain is over: a last event, then [DONE]
            await self._end_stream(response, parsed, trace, gen)
        except ConnectionError:  # the client went away: finally (in _serve) aborts the request
            pass
        except Exception:  # too late for an error status: cut the stream, the client sees it
            log.exception("error while streaming %s", trace.id)
            if request.transport is not None:
                request.transport.close()
        return response

    async def _complete(
        self,
        request: web.Request,
        trace: RequestTrace,
        gen: _Generation,
        first: TokenOutput,
        outputs: AsyncIterator[TokenOutput],
        plan: FaultPlan | None,
    ) -> web.StreamResponse:
        parts = []
        out = first
        while True:
            parts.append(gen.feed(out))
            if gen.finish_reason is not None:
                break
            out = await self._next(outputs)
        text = "".join(parts)
        reasoning = "".join(gen.reasoning_all)
        now = perf_counter_ns()
        if text or reasoning:
            trace.events.append((now, gen.tokens))
        trace.output_tokens = gen.tokens
        trace.cached_tokens = gen.cached
        if plan is not None and plan.disconnect_after is not None:
            self.metrics.faults["disconnect"] += 1
            if request.transport is not None:
                request.transport.close()
            return web.Response()
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": gen.finish_reason}
        if trace.endpoint == "chat":
            choice["message"] = {"role": "assistant", "content": text}
            if reasoning:
                choice["message"]["reasoning"] = reasoning
        else:
            choice["text"] = text
        if gen.stop_reason is not None:
            choice["stop_reason"] = gen.stop_reason
        body = {
            "id": trace.id,
            "object": "chat.completion" if trace.endpoint == "chat" else "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": usage_body(trace.prompt_tokens, gen.tokens),
            "loadgen": gen.vendor(trace, now),
        }
        trace.finish_reason = gen.finish_reason or "abort"
        trace.done_ns = perf_counter_ns()
        return web.json_response(body)

    def _stop_cancelling(self) -> None:
        """Inside a handler the drain cancelled: re-raise unless the drain did it."""
        task = asyncio.current_task()
        if not self.ending or task is None:
            raise asyncio.CancelledError
        task.uncancel()

    async def _end_stream(
        self, response: web.StreamResponse, parsed: ParsedRequest, trace: RequestTrace, gen: _Generation
    ) -> None:
        """End a stream the drain cut: ``finish_reason: "abort"``, usage if asked, [DONE]."""
        if trace.done_ns:  # [DONE] was already sent
            return
        trace.finish_reason = "abort"
        trace.done_ns = perf_counter_ns()
        try:
            if not response.prepared:
                return
            chunk = self._chunk(trace, parsed.chat, "", "abort")
            chunk["loadgen"] = gen.vendor(trace, trace.done_ns)
            await response.write(_sse(chunk))
            if parsed.include_usage:
                usage_only = self._chunk(trace, parsed.chat, None, None)
                usage_only["choices"] = []
                usage_only["usage"] = usage_body(trace.prompt_tokens, gen.tokens)
                await response.write(_sse(usage_only))
            await response.write(_DONE)
            await response.write_eof()
        except ConnectionError:
            pass

    async def drain(self, timeout_s: float, hurry: asyncio.Event | None = None) -> None:
        """SIGTERM, as ``vllm serve`` shuts down: from now on new requests get 503; open
        requests have ``timeout_s`` to finish (less if ``hurry`` is set: a second signal),
        then every open stream gets a last event with ``finish_reason: "abort"`` and
        ``[DONE]`` (a request not streamed yet: 503)."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        hurried = asyncio.ensure_future((hurry or asyncio.Event()).wait())
        try:
            while self.tasks and not hurried.done() and (left := deadline - loop.time()) > 0:
                await asyncio.wait({*self.tasks, hurried}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hurried.cancel()
        if self.tasks:
            self.ending = True
            pending = set(self.tasks)
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=5.0)

    async def cancel_all(self, app: web.Application) -> None:
        """``on_shutdown``: end open requests now (their engine requests are aborted)."""
        for task in list(self.tasks):
            task.cancel()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_OPEN_WHILE_DRAINING = ("/metrics", "/loadgen/requests")


def _json_error(status: int, message: str, **kw: Any) -> web.Response:
    return web.json_response(error_body(message, **kw), status=status)


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
            response = web.json_response(exc.body(), status=exc.status)
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
            return _json_error(exc.status, message, type=kind, code=str(exc.status))
        except Exception:
            log.exception("unhandled error in %s %s", request.method, request.path)
            return _json_error(500, "internal server error", type="server_error")

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
) -> web.Application:
    """The aiohttp application serving ``engine`` under the name ``model_name``.

    ``model_name`` defaults to the engine's; ``faults`` injects seeded failures;
    ``max_in_flight`` answers 429 beyond that many open requests (on top of the engine's
    own queue limit); ``history`` is how many finished requests ``/loadgen/requests``
    keeps; the tokenizer defaults to the engine's own (an ``engine.tokenizer`` attribute,
    e.g. a real model's), else a :class:`WordTokenizer` of the engine's vocabulary.
    With ``manage_engine`` the app starts the engine on startup and stops it on cleanup.
    ``http``: the API key, body timeout and body size limit (:mod:`loadgen.server.guard`).
    ``reasoning_tokens`` (drawn with ``seed``) makes chat answers reason first (module doc).
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
    )
    app = web.Application(middlewares=[_error_middleware(api)], client_max_size=http.max_body_bytes)
    app[API_KEY] = api
    app.router.add_post("/v1/completions", api.completions)
    app.router.add_post("/v1/chat/completions", api.chat_completions)
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
