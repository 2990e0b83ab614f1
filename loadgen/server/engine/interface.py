"""The contract between the reference server's HTTP API and its engines.

The API (:mod:`loadgen.server.api`) only uses what is declared here; engines
(``sim`` and ``torch``, both through :class:`~loadgen.server.engine.streams.OutputStreams`)
implement :class:`AsyncEngine`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["AsyncEngine", "EngineRequest", "EngineStats", "SamplingParams", "TokenOutput", "sum_stats"]


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
    prompt_tokens: int = 0  # processed prompt tokens (counter)
    generation_tokens: int = 0  # generated tokens (counter)
    steps: int = 0
    busy_s: float = 0.0  # clock seconds spent running steps (counter)
    # speculative decoding (counters, as vLLM's SpecDecodingStats): verify passes of a
    # request with drafts, draft tokens verified, drafts accepted, and accepted per draft
    # position (index i: steps whose draft i was accepted; K entries, empty when off)
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_accepted_per_position: tuple[int, ...] = ()


def sum_stats(parts: list[EngineStats]) -> EngineStats:
    """Every field of ``parts`` summed (per-position counters element by element; KV
    usage: their mean)."""
    total = EngineStats()
    for f in dataclasses.fields(EngineStats):
        values = [getattr(s, f.name) for s in parts]
        if f.name == "spec_accepted_per_position":
            width = max((len(v) for v in values), default=0)
            setattr(total, f.name, tuple(sum(v[i] for v in values if i < len(v)) for i in range(width)))
        else:
            setattr(total, f.name, sum(values))
    total.kv_usage = total.kv_usage / len(parts) if parts else 0.0
    return total


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
