"""A scripted OpenAI-style streaming server for client tests (aiohttp.web on loopback).

Every request follows a :class:`Script` (the server default, overridden per request by a
``"script": {...}`` field in the JSON body): time to first event, gap between events,
tokens per event, usage reporting, and faults. Events are sent on an absolute schedule
(arrival + ttft + k * itl), so the client-measured gaps can be checked against it. A
request with ``"stream": false`` gets one JSON answer (with ``usage`` unless
``answer_usage`` is off), like llama.cpp's server, which streams no usage but always
reports it in non-streamed answers.

``/v1/responses`` and ``/v1/messages`` stream the OpenAI Responses and Anthropic Messages
event formats (tests/api_formats.py) on the same schedule, with the same faults.

Prompt tokens are counted by a deterministic stand-in tokenizer: ``round(words *
tokens_per_word)`` of the text, plus ``template_tokens`` per chat message.

Each streamed request is logged as :class:`Served` (``ScriptedServer.served``, or ``GET
/scripted/served`` from a server in its own process): when its handler began and when each
output event was handed to the socket, on ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on
Linux, the clock of the client's stamps in any process of the machine). Timing tests compare
the client's stamps with these, not with the script, whose sleeps stretch on a loaded machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

import httpx
from aiohttp import web

from tests.api_formats import FORMATS

__all__ = ["Script", "ScriptedServer", "ScriptedServerProcess", "Served"]


@dataclass
class Script:
    ttft_s: float = 0.02
    itl_s: float = 0.01
    tokens_per_event: int = 1
    output_tokens: int | None = None  # default: the request's max_tokens
    include_usage: bool | None = None  # None: as the request asks (stream_options)
    usage_tokens: int | None = None  # report this completion_tokens instead of the truth
    status: int = 200
    error_message: str = "scripted failure"  # a status other than 200: the answer's error.message
    disconnect_after: int | None = None  # close the connection after this many events
    malformed_after: int | None = None  # send broken JSON after this many events
    error_after: int | None = None  # report an error in the stream after this many events
    error_form: str = "event"  # "event": an SSE `event: error`; "object": data {"error": {...}}
    role_event: bool = True  # chat: a first role-only event (no output)
    line_end: str = "\n"
    done: bool = True  # send [DONE]
    events_per_write: int = 1  # >1: several events written at once (coalesced)
    # a saturating server: above `capacity` requests in flight, each extra one adds this
    # much to the time to first token, and the gaps stretch by the same factor
    capacity: int | None = None
    overload_ttft_s: float = 0.0
    # a cold start: the k-th request served (k < cold_requests) waits cold_ttft_s * (1 - k / cold_requests)
    # more for its first token (caches and compiled kernels warming up)
    cold_requests: int = 0
    cold_ttft_s: float = 0.0
    ttft_jitter_s: float = 0.0  # the k-th request served waits up to this much more, uniform, seeded by k
    raw_body: str | None = None  # answer 200 with this body instead of a stream (garbage)
    answer_usage: bool = True  # non-streamed answers carry usage
    usage_as: Any = None  # non-streamed answers' usage is this value instead (a bad one: {"prompt_tokens": -1})
    flaw: list[str] | None = None  # non-streamed answers: [old, new], the k-th "old" of the JSON text made "new"
    flaw_at: int = 1  # (k: a flaw deep inside a large answer)
    tokens_per_word: float = 1.0  # the stand-in tokenizer's prompt tokens per whitespace word
    template_tokens: int = 3  # chat: tokens a template adds per message
    tokenizer: str | None = None  # a tokenizer.json: prompt tokens counted with it (needs tokenizers), not words
    log_path: str | None = None  # append {"stream", "prompt_tokens"} per request as a JSON line
    tool_calls: bool = False  # chat: the output streams as one tool call's argument deltas
    reasoning: int = 0  # chat: the first this many output events stream delta.reasoning_content
    responses_end: str = "response.completed"  # /v1/responses: the last event's type (or response.incomplete)
    # random stalls (a noisy server): each request, with probability stall_p, waits a further
    # uniform [0, stall_s) before its first token; every request adds a uniform [0, jitter_s)
    stall_p: float = 0.0
    stall_s: float = 0.0
    jitter_s: float = 0.0
    seed: int = 0
    # /v1/embeddings, /v1/rerank, /v1/score: one JSON answer after ttft_s, with this many results
    # more (or fewer) than the inputs sent, and its dimension of embedding
    results_delta: int = 0
    dimensions: int = 8
    # one kind of request served slower: a prompt of at least slow_from_tokens tokens waits
    # slow_ttft_s more for its first token (a workload class the server treats worse)
    slow_from_tokens: int | None = None
    slow_ttft_s: float = 0.0


@dataclass
class Served:
    """One streamed request as the server served it, in ``perf_counter_ns`` (see the module docstring)."""

    prompt: str  # the prompt's texts joined by spaces
    arrival_ns: int  # the handler began (the request had been read)
    writes: list[int] = field(default_factory=list)  # per output event, just before the write that carried it


class ScriptedServer:
    def __init__(self, script: Script | None = None, prompt_tokens: int | None = None) -> None:
        self.script = script or Script()
        self.prompt_tokens = prompt_tokens
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.served: list[Served] = []
        self.url = ""
        self.in_flight = 0
        self._runner: web.AppRunner | None = None
        self._rng = random.Random(self.script.seed)

    async def __aenter__(self) -> ScriptedServer:
        app = web.Application()
        app.router.add_post("/v1/completions", self._handle)
        app.router.add_post("/v1/chat/completions", self._handle)
        for path in FORMATS:
            app.router.add_post(path, self._handle)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/scripted/served", self._served)
        for path in ("/v1/embeddings", "/v1/rerank", "/v1/score"):
            app.router.add_post(path, self._pooling)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted-model", "object": "model"}]})

    async def _served(self, request: web.Request) -> web.Response:
        return web.json_response([asdict(s) for s in self.served])

    async def _pooling(self, request: web.Request) -> web.StreamResponse:
        """An embeddings, rerank or score answer after ``ttft_s`` (one JSON object)."""
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        sc = self.script
        if isinstance(body.get("script"), dict):
            known = {f.name for f in fields(Script)}
            sc = replace(sc, **{k: v for k, v in body["script"].items() if k in known})
        await asyncio.sleep(sc.ttft_s)
        if sc.status != 200:
            return web.json_response({"error": {"message": sc.error_message}}, status=sc.status)
        if sc.raw_body is not None:
            return web.Response(body=sc.raw_body.encode(), content_type="application/json")
        path = request.path
        if path == "/v1/embeddings":
            given = body.get("input")
            texts = given if isinstance(given, list) else [given]
        elif path == "/v1/rerank":
            texts = [body.get("query", ""), *body.get("documents", [])]
        else:
            texts = [body.get("text_1", ""), *body.get("text_2", [])]
        n_prompt = sum(_count(str(t), sc) for t in texts)
        n = max(0, len(texts) - (path != "/v1/embeddings") + sc.results_delta)
        usage = {"prompt_tokens": n_prompt, "total_tokens": n_prompt}
        if path == "/v1/embeddings":
            data = [{"object": "embedding", "index": i, "embedding": [0.5] * sc.dimensions} for i in range(n)]
            obj: dict[str, Any] = {"object": "list", "data": data, "model": "scripted-model", "usage": usage}
        elif path == "/v1/rerank":
            results = [{"index": i, "relevance_score": 1.0 / (i + 1)} for i in range(n)]
            obj = {"id": "x", "model": "scripted-model", "results": results, "usage": {"total_tokens": n_prompt}}
        else:
            data = [{"index": i, "object": "score", "score": 0.5} for i in range(n)]
            obj = {"id": "x", "object": "list", "model": "scripted-model", "data": data, "usage": usage}
        if sc.usage_as is not None:
            obj["usage"] = sc.usage_as
        if not sc.answer_usage:
            del obj["usage"]
        if sc.disconnect_after is not None:  # the first this many bytes of the answer, then the connection closes
            payload = json.dumps(obj).encode()
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            resp.content_length = len(payload)
            await resp.prepare(request)
            await resp.write(payload[: sc.disconnect_after])
            await asyncio.sleep(0.01)
            assert request.transport is not None
            request.transport.close()
            return resp
        if sc.flaw is not None:
            old, new = sc.flaw
            text, at = json.dumps(obj), -1
            for _ in range(sc.flaw_at):
                at = text.index(old, at + 1)
            return web.Response(text=text[:at] + new + text[at + len(old) :], content_type="application/json")
        return web.json_response(obj)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        try:
            return await self._stream(request)
        finally:
            self.in_flight -= 1

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        arrival_ns = time.perf_counter_ns()
        body = await request.json()
        served = len(self.requests)
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        sc = self.script
        if isinstance(body.get("script"), dict):
            known = {f.name for f in fields(Script)}
            sc = replace(sc, **{k: v for k, v in body["script"].items() if k in known})
        if sc.capacity is not None and self.in_flight > sc.capacity:
            extra = self.in_flight - sc.capacity
            sc = replace(
                sc, ttft_s=sc.ttft_s + extra * sc.overload_ttft_s, itl_s=sc.itl_s * self.in_flight / sc.capacity
            )
        if sc.stall_p or sc.jitter_s:
            stall = sc.stall_s * self._rng.random() if self._rng.random() < sc.stall_p else 0.0
            sc = replace(sc, ttft_s=sc.ttft_s + stall + sc.jitter_s * self._rng.random())
        if served < sc.cold_requests:
            sc = replace(sc, ttft_s=sc.ttft_s + sc.cold_ttft_s * (1 - served / sc.cold_requests))
        if sc.ttft_jitter_s:
            sc = replace(sc, ttft_s=sc.ttft_s + random.Random(served).uniform(0, sc.ttft_jitter_s))
        if sc.raw_body is not None:
            return web.Response(text=sc.raw_body, content_type="text/html")
        if sc.status != 200:
            return web.json_response({"error": {"message": sc.error_message}}, status=sc.status)
        chat = request.path.endswith("/chat/completions")
        typed = FORMATS.get(request.path)  # the Responses / Messages formats, else OpenAI's
        if typed is not None:
            texts = typed.prompt_texts(body)
        elif chat:
            texts = [str(m.get("content", "")) for m in body.get("messages", [])]
        else:
            texts = [str(body.get("prompt", ""))]
        if self.prompt_tokens is not None:
            n_prompt = self.prompt_tokens
        elif typed is not None:
            n_prompt = sum(_count(t, sc) for t in texts) + (sc.template_tokens * len(texts) if len(texts) > 1 else 0)
        elif chat:  # each message's words + what a chat template would add
            n_prompt = sum(_count(t, sc) + sc.template_tokens for t in texts)
        else:
            n_prompt = _count(texts[0], sc)
        if sc.slow_from_tokens is not None and n_prompt >= sc.slow_from_tokens:
            sc = replace(sc, ttft_s=sc.ttft_s + sc.slow_ttft_s)
        max_field = "max_tokens" if typed is None else typed.max_field
        n_out = sc.output_tokens if sc.output_tokens is not None else int(body.get(max_field, 16))
        stream = body.get("stream", True) is not False
        if sc.log_path is not None:
            with open(sc.log_path, "a", encoding="utf-8") as log:  # noqa: ASYNC230 - a test log line
                log.write(json.dumps({"stream": stream, "prompt_tokens": n_prompt}) + "\n")
        if not stream:  # one answer when the whole output would have been generated
            await asyncio.sleep(max(0.0, t0 + sc.ttft_s + (n_out - 1) * sc.itl_s - time.perf_counter()))
            usage_of = n_prompt if sc.answer_usage else None
            return web.json_response(_answer(chat, n_out, usage_of) if typed is None else typed.answer(n_out, usage_of))
        opts = body.get("stream_options") or {}
        usage_final = opts.get("include_usage", typed is not None) if sc.include_usage is None else sc.include_usage
        continuous = bool(opts.get("continuous_usage_stats"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        nl = sc.line_end
        pending: list[bytes] = []
        entry = Served(" ".join(texts), arrival_ns)
        self.served.append(entry)
        outputs = 0  # output events in pending

        async def flush() -> None:
            nonlocal outputs
            entry.writes += [time.perf_counter_ns()] * outputs  # before the write: no read can precede it
            outputs = 0
            await resp.write(b"".join(pending))
            pending.clear()

        async def emit(obj: Any, at: float | None = None, event: str | None = None, output: bool = False) -> None:
            nonlocal outputs
            data = obj if isinstance(obj, str) else json.dumps(obj)
            head = f"event: {event}{nl}" if event else ""
            pending.append(f"{head}data: {data}{nl}{nl}".encode())
            outputs += output
            if len(pending) >= sc.events_per_write:
                if at is not None:
                    delay = at - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                await flush()

        def chunk(text: str, finish: str | None, cum: int) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {"content": text} if text else {}
                if sc.tool_calls and text:
                    call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
                    if cum <= sc.tokens_per_event:  # the first delta names the call
                        call.update(id="call_0", type="function")
                        call["function"]["name"] = "lookup"
                    delta = {"tool_calls": [call]}
                elif cum <= sc.reasoning and text:
                    delta = {"reasoning_content": text}
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text, "finish_reason": finish}
            obj: dict[str, Any] = {"id": "x", "object": "chunk", "model": "scripted-model", "choices": [choice]}
            if continuous:
                obj["usage"] = {"prompt_tokens": n_prompt, "completion_tokens": cum}
            return obj

        writer = None if typed is None else typed.writer(n_prompt, sc.responses_end, usage_final)
        if writer is not None:
            for name, obj in writer.start():
                await emit(obj, None, name)
        elif chat and sc.role_event:
            await emit({"id": "x", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        sent = 0
        k = 0
        while sent < n_out:
            if sc.disconnect_after is not None and k >= sc.disconnect_after:
                if pending:
                    await flush()
                request.transport.close()  # type: ignore[union-attr]
                return resp
            if sc.malformed_after is not None and k >= sc.malformed_after:
                await emit("{not json", t0 + sc.ttft_s + k * sc.itl_s)
                break
            if sc.error_after is not None and k >= sc.error_after:
                err = {"error": {"message": "scripted engine failure", "type": "InternalServerError", "code": 500}}
                err_name: str | None = "error" if sc.error_form == "event" else None
                if writer is not None:
                    err_name, err = writer.error(sc.error_form)
                await emit(err, t0 + sc.ttft_s + k * sc.itl_s, err_name)
                break
            n = min(sc.tokens_per_event, n_out - sent)
            sent += n
            finish = "length" if sent >= n_out else None
            at = t0 + sc.ttft_s + k * sc.itl_s
            if writer is not None:
                kind = "tool" if sc.tool_calls else "reasoning" if sent <= sc.reasoning else "text"
                events = writer.delta(" tok" * n, kind)  # the last one carries the output
                for i, (name, obj) in enumerate(events):
                    await emit(obj, at if i == 0 else None, name, output=i == len(events) - 1)
            else:
                await emit(chunk(" tok" * n, finish, sent), at, output=True)
            k += 1
        if writer is not None:
            if sc.error_after is None and sc.malformed_after is None:
                ct = sc.usage_tokens if sc.usage_tokens is not None else sent
                for name, obj in writer.end(ct, usage_final, min(sc.reasoning, sent)):
                    await emit(obj, None, name)
        elif usage_final:
            ct = sc.usage_tokens if sc.usage_tokens is not None else sent
            await emit({"id": "x", "choices": [], "usage": {"prompt_tokens": n_prompt, "completion_tokens": ct}})
        if sc.done and writer is None:  # the typed APIs have no end marker
            await emit("[DONE]")
        if pending:
            await flush()
        await resp.write_eof()
        return resp


def _count(text: str, sc: Script) -> int:
    if sc.tokenizer is not None:
        return len(_tokenizer(sc.tokenizer).encode(text, add_special_tokens=False).ids)
    return round(len(text.split()) * sc.tokens_per_word)


@functools.cache
def _tokenizer(path: str) -> Any:
    import tokenizers

    return tokenizers.Tokenizer.from_file(path)


def _answer(chat: bool, n_out: int, n_prompt: int | None) -> dict[str, Any]:
    """A non-streamed completion of ``n_out`` tokens, with usage when ``n_prompt`` is given."""
    text = " tok" * n_out
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    obj: dict[str, Any] = {
        "id": "x",
        "object": "chat.completion" if chat else "text_completion",
        "model": "scripted-model",
        "choices": [choice],
    }
    if n_prompt is not None:
        obj["usage"] = {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}
    return obj


async def _serve_forever(script: Script) -> None:
    async with ScriptedServer(script) as srv:
        print(srv.url, flush=True)
        await asyncio.Event().wait()


class ScriptedServerProcess:
    """The scripted server in its own process (so it does not share the client's loop)."""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        self.url = ""
        self._proc: Any = None

    def __enter__(self) -> ScriptedServerProcess:
        import subprocess
        import sys

        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.scripted_server", json.dumps(asdict(self.script))],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self._proc.stdout.readline().strip()
        if not self.url:
            raise RuntimeError("scripted server process did not start")
        return self

    async def fetch_served(self) -> list[Served]:
        """The process's log of streamed requests (``ScriptedServer.served``), as it stands now."""
        async with httpx.AsyncClient() as client:
            answer = await client.get(self.url + "/scripted/served")
        return [Served(**s) for s in answer.raise_for_status().json()]

    def __exit__(self, *exc: object) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)
        self._proc.stdout.close()


if __name__ == "__main__":
    import sys

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_forever(Script(**json.loads(sys.argv[1]))))
