"""The contract between the reference server's HTTP API and its engines.

The API (:mod:`loadgen.server.api`) only uses what is declared here; engines
(``sim`` and ``torch``, both through :class:`~loadgen.server.engine.streams.OutputStreams`)
implement :class:`AsyncEngine`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["AsyncEngine", "EngineRequest", "EngineStats", "SamplingParams", "TokenOutput"]


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int = 16
    min_tokens: int = 0
    ignore_eos: bool = False
    temperature: float = 1.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    pooling: bool = False  # prefill only (embeddings, scores): finish after the prompt, no token


@dataclass(slots=True)
class EngineRequest:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    encoder_patches: int = 0  # vision-encoder input patches, priced before the prefill


@dataclass(slots=True)
class TokenOutput:
    """New tokens of one request from one engine step (usually one token).

    ``finish_reason`` is set on the last output: "length", "stop" or "abort". A pooling
    request (``SamplingParams.pooling``) ends with one output of no tokens, "stop".
    ``timings`` (on the last output only) holds server-side per-request timings in
    seconds: queue_s, prefill_s, decode_s, decode_steps, preemptions, ttft_s, e2e_s.
    """

    request_id: str
    token_ids: list[int]
    finish_reason: str | None = None
    num_cached_tokens: int = 0
    timings: dict[str, float] | None = None


@dataclass(slots=True)
class EngineStats:
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0  # fraction of KV blocks in use, 0..1
    prefix_cache_queries: int = 0  # prompt tokens looked up
    prefix_cache_hits: int = 0  # prompt tokens found cached
    prefix_cache_preempted_queries: int = 0  # the same, for requests preempted before
    prefix_cache_preempted_hits: int = 0
    preemptions: int = 0
    spec_drafts: int = 0  # speculative decoding: drafts proposed (a request's draft in one step)
    prompt_tokens: int = 0  # processed prompt tokens (counter)
    generation_tokens: int = 0  # generated tokens (counter)
    steps: int = 0
    busy_s: float = 0.0  # clock seconds spent running steps (counter)
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_accepted_per_position: tuple[int, ...] = ()


class AsyncEngine(Protocol):
    """An engine driven by its own step loop in the server's event loop (or a process)."""

    max_model_len: int
    vocab_size: int
    model_name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def generate(self, request: EngineRequest) -> AsyncIterator[TokenOutput]:
        """Add the request and yield its outputs until finished.

        Raises :class:`loadgen.errors.EngineError` subclasses before yielding anything
        when the request is rejected (prompt too long, waiting queue full). Closing the
        iterator early (client disconnect) aborts the request and frees its KV blocks.
        """
        ...

    def stats(self) -> EngineStats: ...
