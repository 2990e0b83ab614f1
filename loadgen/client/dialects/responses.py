"""The OpenAI Responses dialect: ``responses`` (``POST /v1/responses``).

The body sends the prompt as ``input``, ``max_output_tokens`` and ``stream: true`` (tools
and images in the Responses shape); the key goes as ``Authorization: Bearer``. Events name
their kind in the data's ``type``; ``response.completed`` (usage) or ``response.incomplete``
(cut at ``max_output_tokens``: a finish, not a failure) ends the answer, and there is no end
marker. The body and the events in full: docs/client.md, "Wire formats of the built-in
dialects"; which events are output and which reasoning: docs/metrics.md, "Per request".
"""

from __future__ import annotations

from typing import Any

from loadgen.client.dialects.base import Dialect, DialectOptions, EventInfo
from loadgen.client.dialects.images import input_image_parts, with_image_parts
from loadgen.client.dialects.toolcalls import responses_calls, responses_items
from loadgen.client.dialects.typed import add_options, message_of, typed_decode
from loadgen.records import RequestSpec

__all__ = ["Responses"]

_TEXT = "response.output_text.delta"
_ARGS = "response.function_call_arguments.delta"
_REASONING = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
_ENDS = frozenset({"response.completed", "response.incomplete"})
_DELTAS = frozenset({_TEXT, _ARGS, *_REASONING})


def _tool(tool: Any) -> Any:
    """A chat-shaped tool (``{"type": "function", "function": {...}}``) in the Responses shape."""
    if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
        return {"type": "function", **tool["function"]}
    return tool


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        return {"type": "function", "name": choice["function"].get("name")}
    return choice


def _input(prompt: str | list[dict[str, Any]], images: Any = ()) -> Any:
    if isinstance(prompt, str) and not images:
        return prompt
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    items: list[dict[str, Any]] = []
    for m in messages:
        if "tool_calls" in m or m.get("role") == "tool":  # an agent's history (chat-shaped): Responses items
            items += responses_items(m)
        else:
            items.append({"role": m.get("role", "user"), "content": m.get("content", "")})
    if images:  # the last user message's content: its input_text part, then an input_image part each
        items = with_image_parts(items, input_image_parts(images), text_type="input_text")
    return items


def _body(spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": options.model,
        "input": _input(spec.prompt, spec.images),
        "max_output_tokens": spec.max_tokens,
        "stream": True,
    }
    return add_options(body, spec, options, _tool, _tool_choice)


def _end(obj: dict[str, Any], kind: str) -> EventInfo:
    response = obj.get("response")
    vendor = obj.get("loadgen")  # a server's own timings (the reference server's), beside the response
    vendor = vendor if type(vendor) is dict else None
    if not isinstance(response, dict):
        return EventInfo(False, None, kind.removeprefix("response."), None, vendor)
    usage = response.get("usage")
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    if not (reason and isinstance(reason, str)):
        status = response.get("status")
        reason = status if status and isinstance(status, str) else kind.removeprefix("response.")
    return EventInfo(False, usage if isinstance(usage, dict) else None, reason, None, vendor)


def _event(obj: dict[str, Any]) -> EventInfo:
    kind = obj.get("type")
    if kind == _TEXT:
        delta = obj.get("delta")
        return EventInfo(bool(delta), None, None, None, None, False, delta if type(delta) is str else "")
    if type(kind) is not str:
        return EventInfo(False, None, None)
    if kind in _REASONING:
        return EventInfo(bool(obj.get("delta")), None, None, None, None, True)
    if kind == _ARGS:
        return EventInfo(bool(obj.get("delta")), None, None)
    if kind in _ENDS:
        return _end(obj, kind)
    if kind == "response.failed":
        response = obj.get("response")
        err = response.get("error") if isinstance(response, dict) else None
        return EventInfo(False, None, None, message_of(err, "response failed"))
    if kind == "error":
        return EventInfo(False, None, None, message_of(obj, "error event"))
    return EventInfo(False, None, None)


class Responses(Dialect):
    name = "responses"
    path = "/v1/responses"
    description = "OpenAI Responses (POST /v1/responses, input text or items, tools)"
    tools = True
    images = True

    build_body = staticmethod(_body)
    parse_event = staticmethod(_event)  # a plain function: no bound method per event
    collect_calls = staticmethod(responses_calls)
    decode = staticmethod(typed_decode(_DELTAS))

    def non_stream_body(self, spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
        body = _body(spec, options)
        body["stream"] = False
        body["max_output_tokens"] = 1
        if "min_tokens" in body:
            body["min_tokens"] = 1
        return body

    def usage_counts(self, usage: dict[str, Any]) -> tuple[Any, Any]:
        return usage.get("input_tokens"), usage.get("output_tokens")
