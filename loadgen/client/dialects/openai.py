"""The OpenAI dialects: ``completions`` (``/v1/completions``) and ``chat`` (``/v1/chat/completions``).

Both ask for ``stream_options.include_usage`` so the final event carries ``usage``;
``continuous_usage_stats`` (vLLM, SGLang) is opt-in and gives per-event token counts.
``ignore_eos``/``min_tokens`` make vLLM-style servers produce the requested output length;
strict servers (OpenAI itself) reject unknown fields, so ``strict=True`` leaves them out.
The stream ends at ``data: [DONE]``; a ``finish_reason`` ends the answer unless the body
asks for several choices (``n`` > 1). The key goes as ``Authorization: Bearer``.

Reasoning models stream their thinking in ``delta.reasoning_content`` (DeepSeek, vLLM
before 0.9) or ``delta.reasoning`` (vLLM since); an event whose only output is reasoning
is marked ``reasoning``. Tool-call deltas (``delta.tool_calls[].function.arguments``) are
answer output. ``tools``/``tool_choice`` (chat only) go into the body as given (a request's
own ``tools`` instead of the run's: an agentic workload's group; its history may hold
assistant tool calls and ``tool`` messages, :mod:`.toolcalls`). A request's
images (chat only) make the last user message's content a list: its text part, then one
``image_url`` part per image, a ``data:`` URL (:mod:`.images`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from loadgen.client.dialects.base import Dialect, DialectOptions, EventInfo
from loadgen.client.dialects.images import chat_image_parts, with_image_parts
from loadgen.client.dialects.toolcalls import chat_calls
from loadgen.records import RequestSpec

__all__ = ["Chat", "Completions"]

_orjson_loads = orjson.loads
_OrjsonError = orjson.JSONDecodeError
_BIG_INT = re.compile("[0-9]{19}")  # an integer orjson may read as a float


def _common_body(spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": options.model,
        "stream": True,
        options.max_tokens_field: spec.max_tokens,
        "stream_options": {"include_usage": True},
    }
    if options.temperature is not None:
        body["temperature"] = options.temperature
    if not options.strict:
        body["ignore_eos"] = True
        body["min_tokens"] = spec.max_tokens
        if options.continuous_usage:
            body["stream_options"]["continuous_usage_stats"] = True
    if options.extra_body:
        body.update(options.extra_body)
    return body


def _completions_body(spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
    body = _common_body(spec, options)
    prompt = spec.prompt
    if isinstance(prompt, list):  # chat messages sent to a completions endpoint: join contents
        prompt = "\n".join(str(m.get("content", "")) for m in prompt)
    body["prompt"] = prompt
    return body


def _chat_body(spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
    body = _common_body(spec, options)
    prompt = spec.prompt
    messages: list[Any] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    if spec.images:  # the user message's content becomes [text part, image_url parts...]
        messages = with_image_parts(messages, chat_image_parts(spec.images))
    body["messages"] = messages
    tools = options.tools if spec.tools is None else spec.tools
    if tools is not None:
        body["tools"] = tools
    if options.tool_choice is not None:
        body["tool_choice"] = options.tool_choice
    return body


def _error_text(err: Any) -> str | None:
    if err is None:
        return None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


def _decode(data: str) -> Any:
    """``json.loads(data)``, the same value, in a third of the time: orjson reads the event,
    and ``json`` reads what orjson refuses (NaN, a lone surrogate, very deep nesting: the
    same value or the same error as ``json``). orjson reads an integer outside 64 bits as a
    float; no value read from a content event depends on that (only truthiness and string
    types are), so ``json`` reads again an event whose usage counts came out as floats, or
    one with a vendor object or an error that holds a run of 19 digits."""
    try:
        obj = _orjson_loads(data)
    except _OrjsonError:
        return json.loads(data)
    if type(obj) is dict:
        usage = obj.get("usage")
        if type(usage) is dict and (
            type(usage.get("prompt_tokens")) is float or type(usage.get("completion_tokens")) is float
        ):
            return json.loads(data)
        if ("loadgen" in obj or "error" in obj) and _BIG_INT.search(data):
            return json.loads(data)
    return obj


def _info(
    obj: dict[str, Any], has_output: bool, finish: str | None, reasoning: bool = False, text: str = ""
) -> EventInfo:
    usage, vendor, err = obj.get("usage"), obj.get("loadgen"), obj.get("error")
    return EventInfo(
        has_output,
        usage if isinstance(usage, dict) else None,
        finish,
        None if err is None else _error_text(err),
        vendor if isinstance(vendor, dict) else None,
        reasoning,
        text,
    )


def _completions_event(obj: dict[str, Any]) -> EventInfo:
    has_output = False
    finish = None
    text = ""
    choices = obj.get("choices")
    if isinstance(choices, list):  # a ``choices`` that is not a list has none; nor is a choice that is not an object
        for ch in choices:
            if not isinstance(ch, dict):
                continue
            piece = ch.get("text")
            if piece or ch.get("token_ids"):
                has_output = True
                if isinstance(piece, str):
                    text += piece
            reason = ch.get("finish_reason")
            if reason and isinstance(reason, str):
                finish = reason
    return _info(obj, has_output, finish, False, text)


def _chat_event(obj: dict[str, Any]) -> EventInfo:
    answer = reasoning = False
    finish = None
    text = ""
    choices = obj.get("choices")
    if isinstance(choices, list):
        for ch in choices:
            if not isinstance(ch, dict):
                continue
            delta = ch.get("delta")
            if delta and isinstance(delta, dict):
                content = delta.get("content")
                if content or delta.get("tool_calls"):
                    answer = True
                    if isinstance(content, str):
                        text += content
                if delta.get("reasoning_content") or delta.get("reasoning"):  # DeepSeek / vLLM reasoning parsers
                    reasoning = True
            if ch.get("token_ids"):
                answer = answer or not reasoning
            reason = ch.get("finish_reason")
            if reason and isinstance(reason, str):
                finish = reason
    return _info(obj, answer or reasoning, finish, reasoning and not answer, text)


class _OpenAI(Dialect):
    """What both OpenAI APIs share: the body's common fields, usage, [DONE], Bearer."""

    done_marker = "[DONE]"
    decode = staticmethod(_decode)

    def non_stream_body(self, spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
        body = self.build_body(spec, options)
        body["stream"] = False
        body.pop("stream_options", None)
        body[options.max_tokens_field] = 1
        if "min_tokens" in body:
            body["min_tokens"] = 1
        return body

    def usage_counts(self, usage: dict[str, Any]) -> tuple[Any, Any]:
        return usage.get("prompt_tokens"), usage.get("completion_tokens")

    def finish_ends(self, body: dict[str, Any]) -> bool:
        choices = body.get("n")
        return not (type(choices) is int and choices > 1)


class Completions(_OpenAI):
    name = "completions"
    path = "/v1/completions"
    description = "OpenAI completions (POST /v1/completions, a prompt text)"

    build_body = staticmethod(_completions_body)
    parse_event = staticmethod(_completions_event)  # a plain function: no bound method per event


class Chat(_OpenAI):
    name = "chat"
    path = "/v1/chat/completions"
    description = "OpenAI chat completions (POST /v1/chat/completions, messages, tools)"
    tools = True
    images = True

    build_body = staticmethod(_chat_body)
    parse_event = staticmethod(_chat_event)  # a plain function: no bound method per event
    collect_calls = staticmethod(chat_calls)
