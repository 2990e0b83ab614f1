"""Pooling routes of the reference server: ``/v1/embeddings``, ``/v1/rerank``, ``/v1/score``.

Pooling requests are prefill-only: as vLLM's OpenAI server does, every input (every
embedding input, every query-document pair) becomes its own engine request, submitted
together, and the scheduler batches them into steps with everything else; each finishes in
the step that computes its last prompt token, with no decode step and no LM head. Engines
without pooling answer 501 ``not_supported``. Vectors and scores are deterministic functions
of the tokens (:func:`embed`; :data:`DEFAULT_DIMENSIONS`, at most :data:`MAX_DIMENSIONS`).

The bodies, the answers and measured costs: docs/server.md, "Pooling routes and images".
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from time import perf_counter_ns
from typing import Any

import numpy as np
from aiohttp import web

from loadgen.errors import EngineError, PromptTooLong, QueueFull
from loadgen.server.engine.interface import EngineRequest, SamplingParams, TokenOutput
from loadgen.server.guard import read_json
from loadgen.server.handlers import ServerApi
from loadgen.server.prometheus import RequestTrace
from loadgen.server.rejected import RequestRejected

__all__ = ["DEFAULT_DIMENSIONS", "MAX_DIMENSIONS", "PoolingApi", "add_pooling_routes", "embed"]

DEFAULT_DIMENSIONS = 256
MAX_DIMENSIONS = 4096


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 over a uint64 array (arrays wrap silently; scalars would warn)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = x ^ (x >> np.uint64(31))
    return out


def embed(token_ids: Sequence[int], dimensions: int = DEFAULT_DIMENSIONS) -> np.ndarray:
    """The unit vector of ``token_ids``: the sum of one pseudo-random vector per token."""
    ids, counts = np.unique(np.asarray(token_ids, dtype=np.uint64), return_counts=True)
    cols = np.arange(dimensions, dtype=np.uint64)
    bits = _mix(ids[:, None] * np.uint64(0x100000001B3) + cols[None, :])
    unit = (bits >> np.uint64(11)).astype(np.float64) / float(1 << 53) * 2.0 - 1.0
    vec = counts.astype(np.float64) @ unit
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm > 0.0 else vec


def _relevance(a: Sequence[int], b: Sequence[int]) -> float:
    return (1.0 + float(embed(a) @ embed(b))) / 2.0


def _model(body: Any, model_name: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise RequestRejected("the request body must be a JSON object")
    model = body.get("model", model_name)
    if model is None:
        model = model_name
    if not isinstance(model, str) or model != model_name:
        raise RequestRejected(
            f"The model `{model!s:.60}` does not exist; this server serves `{model_name}`.",
            param="model",
            code="model_not_found",
        )
    return body


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


class PoolingApi:
    """The pooling handlers over a :class:`ServerApi` (its engine, tokenizer, metrics)."""

    def __init__(self, api: ServerApi) -> None:
        self.api = api

    # ------------------------------------------------------------------ parsing
    def _tokens(self, text: Any, param: str) -> list[int]:
        api = self.api
        limit = api.engine.max_model_len
        if isinstance(text, str):
            capped = getattr(api.tokenizer, "encode_at_most", None)
            ids: list[int] | None = capped(text, limit) if capped is not None else api.tokenizer.encode(text)
        elif _is_ids(text):
            ids = list(text) if len(text) <= limit else None
            bad = [t for t in ids or () if not 0 <= t < api.tokenizer.vocab_size]
            if bad:
                raise RequestRejected(
                    f"{param}: token id {bad[0]} is outside the vocabulary [0, {api.tokenizer.vocab_size})", param=param
                )
        else:
            raise RequestRejected(f"{param} must be a string or a list of token ids", param=param)
        if ids is None or len(ids) > limit:
            raise RequestRejected(
                f"{param}: this model's maximum context length is {limit} tokens; the input is longer",
                param=param,
                code="context_length_exceeded",
            )
        return ids

    def _inputs(self, body: dict[str, Any]) -> list[list[int]]:
        value = body.get("input")
        if value is None:
            raise RequestRejected("'input' is required", param="input")
        if isinstance(value, str) or (_is_ids(value) and value):
            items: list[Any] = [value]
        elif isinstance(value, list) and value:
            items = value
        else:
            raise RequestRejected(
                "'input' must be a string, a list of strings, or token ids (a non-empty list)", param="input"
            )
        prompts = [self._tokens(item, f"input[{i}]") for i, item in enumerate(items)]
        for i, ids in enumerate(prompts):
            if not ids:
                raise RequestRejected(f"input[{i}] is empty (0 tokens)", param="input")
        return prompts

    @staticmethod
    def _text(value: Any, param: str) -> str:
        if isinstance(value, dict) and isinstance(value.get("text"), str):
            return str(value["text"])
        if not isinstance(value, str):
            raise RequestRejected(f"{param} must be a string", param=param)
        return value

    def _texts(self, value: Any, param: str) -> list[str]:
        if isinstance(value, list):
            if not value:
                raise RequestRejected(f"'{param}' must not be empty", param=param)
            return [self._text(v, f"{param}[{i}]") for i, v in enumerate(value)]
        return [self._text(value, param)]

    def _pair(self, a: str, b: str, param: str) -> tuple[list[int], list[int]]:
        first, second = self._tokens(a, param), self._tokens(b, param)
        if not first and not second:
            raise RequestRejected(f"{param}: both texts are empty (0 tokens)", param=param)
        if len(first) + len(second) > self.api.engine.max_model_len:
            raise RequestRejected(
                f"{param}: the pair is longer than the maximum context length ({self.api.engine.max_model_len} tokens)",
                param=param,
                code="context_length_exceeded",
            )
        return first, second

    # ------------------------------------------------------------------ the engine
    async def _read(self, request: web.Request) -> dict[str, Any]:
        api = self.api
        body = await read_json(request, api.http)  # many inputs may each be a whole context
        body = _model(body, api.model_name)
        if not getattr(api.engine, "supports_pooling", False):
            raise RequestRejected(
                f"{request.path}: this engine does not serve pooling requests (embeddings, rerank, score); "
                "the sim engine does (without disaggregation)",
                status=501,
                type="invalid_request_error",
                code="not_supported",
            )
        api.admit(1)  # an injected failure, or 429 beyond max_in_flight, as for generation
        return body

    @staticmethod
    async def _last(outputs: AsyncIterator[TokenOutput]) -> TokenOutput:
        try:
            async for out in outputs:
                if out.finish_reason is not None:
                    return out
        finally:
            aclose = getattr(outputs, "aclose", None)
            if aclose is not None:
                await aclose()
        return TokenOutput("", [], finish_reason="abort")

    async def _run(self, kind: str, prompts: list[list[int]]) -> str:
        """Run every prompt as a pooling request, together; return the request id."""
        api = self.api
        arrival = perf_counter_ns()
        rid = f"{kind}-{uuid.uuid4().hex}"
        params = SamplingParams(max_tokens=1, pooling=True)
        trace = RequestTrace(
            id=rid, endpoint=kind, stream=False, arrival_ns=arrival, prompt_tokens=sum(map(len, prompts))
        )
        task = asyncio.current_task()
        if task is not None:
            api.tasks.add(task)
        api.in_flight += 1
        jobs = [
            asyncio.ensure_future(self._last(api.engine.generate(EngineRequest(f"{rid}-{i}", ids, params))))
            for i, ids in enumerate(prompts)
        ]
        try:
            finals = await asyncio.gather(*jobs)
        except QueueFull as exc:
            raise RequestRejected(
                str(exc) or "the waiting queue is full", status=429, type="rate_limit_error", code="queue_full"
            ) from exc
        except PromptTooLong as exc:
            raise RequestRejected(str(exc), param="input", code="context_length_exceeded") from exc
        except EngineError as exc:
            raise RequestRejected(str(exc), status=503, type="server_error", code="engine_error") from exc
        except asyncio.CancelledError:
            raise RequestRejected(
                "the server is shutting down", status=503, type="server_error", code="shutting_down", close=True
            ) from None
        finally:
            for job in jobs:
                job.cancel()
            await asyncio.gather(*jobs, return_exceptions=True)
            api.in_flight -= 1
            if task is not None:
                api.tasks.discard(task)
        if any(out.finish_reason != "stop" for out in finals):
            raise RequestRejected("the engine aborted the request", status=503, type="server_error")
        slowest = max((out.timings or {} for out in finals), key=lambda t: t.get("e2e_s", 0.0))
        trace.engine = dict(slowest)
        trace.cached_tokens = sum(out.num_cached_tokens for out in finals)
        trace.finish_reason = "stop"
        trace.done_ns = perf_counter_ns()
        trace.events.append((trace.done_ns, 0))
        trace.outputs.append(trace.done_ns)
        trace.final_ns = trace.done_ns
        api.metrics.record(trace)
        return rid

    # ------------------------------------------------------------------ handlers
    async def embeddings(self, request: web.Request) -> web.Response:
        """``POST /v1/embeddings`` (module docstring)."""
        body = await self._read(request)
        fmt = body.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise RequestRejected("'encoding_format' must be 'float' or 'base64'", param="encoding_format")
        dims = body.get("dimensions")
        if dims is None:
            dims = DEFAULT_DIMENSIONS
        if not (isinstance(dims, int) and not isinstance(dims, bool) and 1 <= dims <= MAX_DIMENSIONS):
            raise RequestRejected(f"'dimensions' must be an integer in [1, {MAX_DIMENSIONS}]", param="dimensions")
        prompts = self._inputs(body)
        await self._run("embd", prompts)
        data = []
        for i, ids in enumerate(prompts):
            vec = embed(ids, dims)
            value: Any = base64.b64encode(vec.astype("<f4").tobytes()).decode() if fmt == "base64" else vec.tolist()
            data.append({"object": "embedding", "index": i, "embedding": value})
        tokens = sum(map(len, prompts))
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": self.api.model_name,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def rerank(self, request: web.Request) -> web.Response:
        """``POST /v1/rerank`` (module docstring)."""
        body = await self._read(request)
        query = self._text(body.get("query"), "query")
        documents = body.get("documents")
        if not isinstance(documents, list) or not documents:
            raise RequestRejected("'documents' must be a non-empty list", param="documents")
        docs = [self._text(d, f"documents[{i}]") for i, d in enumerate(documents)]
        top_n = body.get("top_n")
        if top_n is not None and not (isinstance(top_n, int) and not isinstance(top_n, bool)):
            raise RequestRejected("'top_n' must be an integer", param="top_n")
        if top_n is None or top_n <= 0:
            top_n = len(docs)
        keep_text = body.get("return_documents", True) is not False
        pairs = [self._pair(query, d, f"documents[{i}]") for i, d in enumerate(docs)]
        rid = await self._run("rerank", [q + d for q, d in pairs])
        scored = sorted(((i, _relevance(q, d)) for i, (q, d) in enumerate(pairs)), key=lambda item: (-item[1], item[0]))
        results = []
        for i, score in scored[:top_n]:
            item: dict[str, Any] = {"index": i, "relevance_score": score}
            if keep_text:
                item["document"] = {"text": docs[i]}
            results.append(item)
        tokens = sum(len(q) + len(d) for q, d in pairs)
        return web.json_response(
            {"id": rid, "model": self.api.model_name, "usage": {"total_tokens": tokens}, "results": results}
        )

    async def score(self, request: web.Request) -> web.Response:
        """``POST /v1/score`` (module docstring)."""
        body = await self._read(request)
        first = self._texts(body.get("text_1"), "text_1")
        second = self._texts(body.get("text_2"), "text_2")
        if len(first) == 1:
            first = first * len(second)
        elif len(second) == 1:
            second = second * len(first)
        if len(first) != len(second):
            raise RequestRejected(
                f"'text_1' and 'text_2' must have the same length, or one of them a single text "
                f"(got {len(first)} and {len(second)})",
                param="text_2",
            )
        pairs = [self._pair(a, b, f"text_2[{i}]") for i, (a, b) in enumerate(zip(first, second))]
        rid = await self._run("score", [q + d for q, d in pairs])
        tokens = sum(len(q) + len(d) for q, d in pairs)
        return web.json_response(
            {
                "id": rid,
                "object": "list",
                "created": int(time.time()),
                "model": self.api.model_name,
                "data": [{"index": i, "object": "score", "score": _relevance(q, d)} for i, (q, d) in enumerate(pairs)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
            }
        )


def add_pooling_routes(app: web.Application, api: ServerApi) -> None:
    """Register the pooling routes (module docstring) on ``app``."""
    pooling = PoolingApi(api)
    app.router.add_post("/v1/embeddings", pooling.embeddings)
    app.router.add_post("/v1/rerank", pooling.rerank)
    app.router.add_post("/v2/rerank", pooling.rerank)
    app.router.add_post("/v1/score", pooling.score)
