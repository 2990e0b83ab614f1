"""API dialects: how to build a streaming request body and read one SSE event's JSON.

Two OpenAI dialects are supported: ``completions`` (``/v1/completions``) and ``chat``
(``/v1/chat/completions``). Both ask for ``stream_options.include_usage`` so the final
event carries ``usage``; ``continuous_usage_stats`` (vLLM, SGLang) is opt-in and gives
per-event token counts. ``ignore_eos``/``min_tokens`` make vLLM-style servers produce the
requested output length; strict servers (OpenAI itself) reject unknown fields, so
``strict=True`` leaves them out.

Reasoning models stream their thinking in ``delta.reasoning_content`` (DeepSeek, vLLM
before 0.9) or ``delta.reasoning`` (vLLM since); an event whose only output is reasoning
is marked ``reasoning``. Tool-call deltas (``delta.tool_calls[].function.arguments``) are
answer output. ``tools``/``tool_choice`` (chat only) go into the body as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from loadgen.errors import ConfigError
from loadgen.records import RequestSpec

__all__ = ["DialectOptions", "Dialect", "EventInfo", "DIALECTS", "get_dialect"]


@dataclass(slots=True)
class DialectOptions:
    model: str = ""
    strict: bool = False  # no ignore_eos / min_tokens / continuous_usage_stats
    continuous_usage: bool = False
    temperature: float | None = 0.0
    max_tokens_field: str = "max_tokens"
    extra_body: dict[str, Any] | None = None
    tools: list[Any] | None = None  # chat: the workload's tool definitions
    tool_choice: Any = None  # chat: "auto", "required", "none" or {"type": "function", ...}


@dataclass(slots=True)
class EventInfo:
    """What one event's JSON says: output present, its usage, finish reason, errors.

    Whatever the JSON holds, the fields have their types: a ``choices`` that is not a list
    has no choices, a ``usage`` or ``loadgen`` that is not an object is absent, a
    ``finish_reason`` that is not a non-empty string is none."""

    has_output: bool
    usage: dict[str, Any] | None
    finish_reason: str | None
    error: str | None = None
    vendor: dict[str, Any] | None = None
    reasoning: bool = False  # the event's output is reasoning only (no answer text or tool call)
    text: str = ""  # the answer text it carries (chat content or completion text)


def _common_body(spec: RequestSpec, opts: DialectOptions) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": opts.model,
        "stream": True,
        opts.max_tokens_field: spec.max_tokens,
        "stream_options": {"include_usage": True},
    }
    if opts.temperature is not None:
        body["temperature"] = opts.temperature
    if not opts.strict:
        body["ignore_eos"] = True
        body["min_tokens"] = spec.max_tokens
        if opts.continuous_usage:
            body["stream_options"]["continuous_usage_stats"] = True
    if opts.extra_body:
        body.update(opts.extra_body)
    return body


def _completions_body(spec: RequestSpec, opts: DialectOptions) -> dict[str, Any]:
    body = _common_body(spec, opts)
    prompt = spec.prompt
    if isinstance(prompt, list):  # chat messages sent to a completions endpoint: join contents
        prompt = "\n".join(str(m.get("content", "")) for m in prompt)
    body["prompt"] = prompt
    return body


def _chat_body(spec: RequestSpec, opts: DialectOptions) -> dict[str, Any]:
    body = _common_body(spec, opts)
    prompt = spec.prompt
    body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    if opts.tools is not None:
        body["tools"] = opts.tools
    if opts.tool_choice is not None:
        body["tool_choice"] = opts.tool_choice
    return body


def _error_text(obj: dict[str, Any]) -> str | None:
    err = obj.get("error")
    if err is None:
        return None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


def _choices(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The event's choices that are objects; ``choices`` that is not a list has none."""
    choices = obj.get("choices")
    if not isinstance(choices, list):
        return []
    return [ch for ch in choices if isinstance(ch, dict)]


def _info(obj: dict[str, Any], has_output: bool, finish: str | None, reasoning: bool = False,
          text: str = "") -> EventInfo:  # fmt: skip
    usage, vendor = obj.get("usage"), obj.get("loadgen")
    return EventInfo(has_output, usage if isinstance(usage, dict) else None, finish, _error_text(obj),
                     vendor if isinstance(vendor, dict) else None, reasoning=reasoning, text=text)  # fmt: skip


def _finish_reason(ch: dict[str, Any], finish: str | None) -> str | None:
    reason = ch.get("finish_reason")
    return reason if isinstance(reason, str) and reason else finish


def _completions_event(obj: dict[str, Any]) -> EventInfo:
    has_output = False
    finish = None
    text = ""
    for ch in _choices(obj):
        if ch.get("text") or ch.get("token_ids"):
            has_output = True
            if isinstance(ch.get("text"), str):
                text += ch["text"]
        finish = _finish_reason(ch, finish)
    return _info(obj, has_output, finish, text=text)


def _chat_event(obj: dict[str, Any]) -> EventInfo:
    answer = reasoning = False
    finish = None
    text = ""
    for ch in _choices(obj):
        delta = ch.get("delta") or {}
        if isinstance(delta, dict):
            content = delta.get("content")
            if content or delta.get("tool_calls"):
                answer = True
                if isinstance(content, str):
                    text += content
            if delta.get("reasoning_content") or delta.get("reasoning"):  # DeepSeek / vLLM reasoning parsers
                reasoning = True
        if ch.get("token_ids"):
            answer = answer or not reasoning
        finish = _finish_reason(ch, finish)
    return _info(obj, answer or reasoning, finish, reasoning=reasoning and not answer, text=text)


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    path: str
    build_body: Callable[[RequestSpec, DialectOptions], dict[str, Any]]
    parse_event: Callable[[dict[str, Any]], EventInfo]


DIALECTS: dict[str, Dialect] = {
    "completions": Dialect("completions", "/v1/completions", _completions_body, _completions_event),
    "chat": Dialect("chat", "/v1/chat/completions", _chat_body, _chat_event),
}


def get_dialect(name: str) -> Dialect:
    try:
        return DIALECTS[name]
    except KeyError:
        raise ConfigError(f"unknown API {name!r}; choose one of: {', '.join(DIALECTS)}", key="--api") from None
