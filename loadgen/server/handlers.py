"""The reference server's request handlers (:class:`ServerApi`, one per app).

A generation request (completions, chat, Responses or Anthropic Messages: an
:class:`~loadgen.server.render.Api` each) is read and parsed (:mod:`loadgen.server.guard`,
the API's parser), checked against injected faults and ``max_in_flight``, handed to the
engine and answered whole or streamed by one loop, the API's
:class:`~loadgen.server.render.Renderer` writing its events (:mod:`loadgen.server.generation`);
engine errors become OpenAI-style rejections (429 ``queue_full``, 400
``context_length_exceeded``, 503 ``engine_error``). :meth:`ServerApi.drain` is SIGTERM's
graceful shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from time import perf_counter_ns
from typing import Any, Protocol

import numpy as np
from aiohttp import web
from aiohttp.tcp_helpers import tcp_nodelay

from loadgen.errors import EngineError, PromptTooLong, QueueFull
from loadgen.server.config import HttpLimits
from loadgen.server.engine.interface import AsyncEngine, EngineRequest, SamplingParams, TokenOutput
from loadgen.server.faults import FaultConfig, FaultInjector, FaultPlan
from loadgen.server.generation import SSE_HEADERS, Generation
from loadgen.server.guard import read_json
from loadgen.server.messages_api import MESSAGES
from loadgen.server.prometheus import RequestTrace, ServerMetrics
from loadgen.server.rejected import RequestRejected
from loadgen.server.render import CHAT, COMPLETIONS, Api, Renderer
from loadgen.server.responses_api import RESPONSES
from loadgen.server.tokenizer import Tokenizer
from loadgen.server.tools import ToolPolicy, choose_tool

__all__ = ["CountSampler", "ServerApi"]

log = logging.getLogger(__name__)


async def _aclose(it: AsyncIterator[TokenOutput]) -> None:
    aclose = getattr(it, "aclose", None)
    if aclose is not None:
        await aclose()


class CountSampler(Protocol):
    """Draws whole numbers (a workload length distribution fits: the CLI passes one)."""

    def sample(self, rng: np.random.Generator, n: int) -> Any: ...


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
        tools: ToolPolicy | None = None,
    ) -> None:
        self.seed = seed
        self.tools = tools or ToolPolicy()
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
        return await self._serve(request, COMPLETIONS)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, CHAT)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, RESPONSES)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, MESSAGES)

    # -- generation ---------------------------------------------------------------------

    def admit(self, max_tokens: int) -> FaultPlan | None:
        """A request's faults drawn (``max_tokens``: the tokens it may stream); raises the
        injected failure's 500, or 429 beyond ``max_in_flight`` open requests."""
        plan = self.faults.plan(max_tokens) if self.faults is not None else None
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
        return plan

    async def _serve(self, request: web.Request, api: Api) -> web.StreamResponse:
        arrival_ns = perf_counter_ns()
        body = await read_json(request, self.http, max_model_len=self.engine.max_model_len, param=api.param)
        parsed = api.parse(
            body,
            model_name=self.model_name,
            tokenizer=self.tokenizer,
            max_model_len=self.engine.max_model_len,
        )
        parsed.call = choose_tool(parsed, self.tools, self.seed)
        plan = self.admit(parsed.max_tokens)
        rid = f"{api.id_prefix}{uuid.uuid4().hex}"
        params = SamplingParams(
            max_tokens=parsed.max_tokens,
            min_tokens=parsed.min_tokens,
            ignore_eos=parsed.ignore_eos,
            temperature=parsed.temperature,
            seed=parsed.seed,
        )
        outputs = self.engine.generate(EngineRequest(rid, parsed.prompt_ids, params, parsed.encoder_patches))
        trace = RequestTrace(
            id=rid,
            endpoint=api.endpoint,
            stream=parsed.stream,
            arrival_ns=arrival_ns,
            prompt_tokens=len(parsed.prompt_ids),
        )
        budget = 0
        if api.reasons and self.reasoning_tokens is not None:
            budget = max(int(self.reasoning_tokens.sample(self._reasoning_rng, 1)[0]), 0)
        gen = Generation(self.tokenizer, parsed, budget)
        renderer = api.renderer(self.model_name, trace, parsed)
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
                raise RequestRejected(str(exc), param=api.param, code="context_length_exceeded") from exc
            except EngineError as exc:
                raise RequestRejected(str(exc), status=503, type="server_error", code="engine_error") from exc
            except StopAsyncIteration:
                raise RequestRejected(
                    "the engine finished the request without output", status=500, type="server_error"
                ) from None
            trace.output_arrived(first, perf_counter_ns())
            started = True
            if parsed.stream:
                return await self._stream(request, renderer, trace, gen, first, outputs, plan)
            try:
                return await self._complete(request, renderer, trace, gen, first, outputs, plan)
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
    async def _next(outputs: AsyncIterator[TokenOutput], trace: RequestTrace) -> TokenOutput:
        """The engine's next output, its arrival noted in ``trace`` (where vLLM's frontend
        timestamps an engine-core output: before detokenizing and writing it)."""
        try:
            out = await outputs.__anext__()
        except StopAsyncIteration:  # the engine ended without a finish reason
            return TokenOutput(request_id="", token_ids=[], finish_reason="abort")
        trace.output_arrived(out, perf_counter_ns())
        return out

    async def _stream(
        self,
        request: web.Request,
        renderer: Renderer,
        trace: RequestTrace,
        gen: Generation,
        first: TokenOutput,
        outputs: AsyncIterator[TokenOutput],
        plan: FaultPlan | None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=SSE_HEADERS)
        response.enable_chunked_encoding()
        out = first
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
                    lead, data = renderer.step(gen, text, finish)
                    if lead:
                        await response.write(lead)
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
                out = await self._next(outputs, trace)
            tail = renderer.tail(gen)
            if tail:
                await response.write(tail)
            trace.done_ns = perf_counter_ns()
            trace.finish_reason = gen.finish_reason or "abort"
            await response.write_eof()
        except asyncio.CancelledError:
            self._stop_cancelling()  # the drain is over: a last event, then the stream's end
            await self._end_stream(response, renderer, trace, gen)
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
        renderer: Renderer,
        trace: RequestTrace,
        gen: Generation,
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
            out = await self._next(outputs, trace)
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
        body = renderer.body(gen, text, reasoning, now)
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
        self, response: web.StreamResponse, renderer: Renderer, trace: RequestTrace, gen: Generation
    ) -> None:
        """End a stream the drain cut: the API's last events (chat: ``finish_reason: "abort"``,
        usage if asked, [DONE])."""
        if trace.done_ns:  # the stream's end was already sent
            return
        trace.finish_reason = "abort"
        trace.done_ns = perf_counter_ns()
        try:
            if not response.prepared:
                return
            await response.write(renderer.abort(gen))
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
