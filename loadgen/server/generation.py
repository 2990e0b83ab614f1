"""From engine outputs to OpenAI answers: released text, token counts, stream chunks.

Streaming answers are Server-Sent Events, ``data: {json}\\n\\n``, each written and flushed on
its own: one event per engine output. The last output event carries ``finish_reason`` and
the engine's timings as a vendor ``"loadgen"`` field; ``stream_options`` adds the usage
event (or usage on every event); the stream ends with ``data: [DONE]``.
``usage.completion_tokens`` counts every token the engine generated (EOS and stop words
included). With ``--reasoning-tokens`` a chat answer streams its first tokens as
``delta.reasoning``.

Docs: docs/server.md, "Completions and chat streams".
"""

from __future__ import annotations

import json
import time
from typing import Any

from loadgen.server.engine.interface import TokenOutput
from loadgen.server.prometheus import RequestTrace
from loadgen.server.protocol import ParsedRequest
from loadgen.server.tokenizer import Tokenizer

__all__ = ["DONE", "SSE_HEADERS", "Generation", "sse", "stream_chunk"]

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
DONE = b"data: [DONE]\n\n"
_TIMING_KEYS = ("queue_s", "prefill_s", "decode_s", "ttft_s", "e2e_s", "decode_steps", "preemptions")


def sse(obj: dict[str, Any]) -> bytes:
    """One Server-Sent Event carrying ``obj`` as compact JSON."""
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def stream_chunk(
    model_name: str,
    trace: RequestTrace,
    chat: bool,
    text: str | None,
    finish: str | None,
    role: bool = False,
    reasoning: str = "",
) -> dict[str, Any]:
    """One stream chunk of ``trace``'s answer (``role``: the chat stream's role event)."""
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
        "model": model_name,
        "choices": [choice],
    }


class Generation:
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
