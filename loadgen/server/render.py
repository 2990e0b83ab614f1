"""How one API renders a request's generation: the seam between the serving loop and a wire format.

:class:`~loadgen.server.handlers.ServerApi` runs every generation route the same way: read
and parse the body into a :class:`~loadgen.server.protocol.ParsedRequest`, run the engine,
feed its outputs to a :class:`~loadgen.server.generation.Generation`. What differs per API
is an :class:`Api` (its parser and its names) and a :class:`Renderer` (what a stream's
events and a whole answer carry). This module has the protocol and OpenAI's completions and
chat renderers; :mod:`loadgen.server.responses_api` and :mod:`loadgen.server.messages_api`
have the Responses and Anthropic Messages ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any, Protocol

from loadgen.server.generation import DONE, Generation, sse, stream_chunk
from loadgen.server.prometheus import RequestTrace
from loadgen.server.protocol import ParsedRequest, parse_request, usage_body
from loadgen.server.rejected import RequestRejected
from loadgen.server.tokenizer import Tokenizer
from loadgen.server.tools import ToolCall

__all__ = ["CHAT", "COMPLETIONS", "Api", "ChatRenderer", "Renderer", "event", "parse_as_chat"]


class Renderer(Protocol):
    """One request's wire format (one renderer per request: it may keep state)."""

    def step(self, gen: Generation, text: str, finish: str | None) -> tuple[bytes, bytes]:
        """The events of one engine output that released ``text`` and/or ``gen.reasoning``
        (or finished): ``(lead, data)``, written in that order; the output is stamped as sent
        when ``data`` is written."""
        ...

    def tail(self, gen: Generation) -> bytes:
        """What follows the finishing step's events (may be empty)."""
        ...

    def abort(self, gen: Generation) -> bytes:
        """The end of a stream the drain cut (the stream is open, nothing finished it yet)."""
        ...

    def body(self, gen: Generation, text: str, reasoning: str, now_ns: int) -> dict[str, Any]:
        """The whole answer of a request that is not streamed."""
        ...


Parser = Callable[..., ParsedRequest]
"""``parse(body, *, model_name, tokenizer, max_model_len) -> ParsedRequest`` (raises
:class:`~loadgen.server.rejected.RequestRejected`)."""


@dataclass(frozen=True, slots=True)
class Api:
    """A generation route's wire format: how its body parses and how its answers render."""

    endpoint: str  # the trace's endpoint label (``/loadgen/requests``)
    id_prefix: str  # of the request id (``chatcmpl-``, ``resp_``, ``msg_``)
    param: str  # the prompt's field, named in context-length errors
    reasons: bool  # answers reason first when the server is configured to
    parse: Parser
    renderer: Callable[[str, RequestTrace, ParsedRequest], Renderer]


class ChatRenderer:
    """OpenAI ``/v1/chat/completions`` and ``/v1/completions`` (see :mod:`loadgen.server.generation`)."""

    __slots__ = ("chat", "model_name", "parsed", "role_sent", "tool", "trace")

    def __init__(self, model_name: str, trace: RequestTrace, parsed: ParsedRequest) -> None:
        self.model_name = model_name
        self.trace = trace
        self.parsed = parsed
        self.chat = parsed.chat
        self.role_sent = not parsed.chat
        self.tool = ToolCall(parsed.call) if parsed.call is not None else None

    def _tool_chunk(self, gen: Generation, text: str, finish: str | None) -> dict[str, Any]:
        """A tool call's chunk: reasoning, the next argument piece (the first with the call's id
        and name), ``finish_reason: "tool_calls"`` once the answer ends."""
        assert self.tool is not None
        first = not self.tool.opened
        chunk = stream_chunk(self.model_name, self.trace, True, None, None, reasoning=gen.reasoning)
        choice = chunk["choices"][0]
        if finish == "abort":
            choice["finish_reason"] = finish
        elif finish is not None or text:
            call: dict[str, Any] = {"index": 0}
            if first:
                call.update(id=self.tool.call_id, type="function")
            function = {"name": self.tool.name} if first else {}
            function["arguments"] = self.tool.piece(text, finish is not None)
            call["function"] = function
            choice["delta"]["tool_calls"] = [call]
            choice["finish_reason"] = "tool_calls" if finish is not None else None
        return chunk

    def step(self, gen: Generation, text: str, finish: str | None) -> tuple[bytes, bytes]:
        lead = b""
        prompt_tokens = self.trace.prompt_tokens
        if not self.role_sent:
            role = stream_chunk(self.model_name, self.trace, self.chat, None, None, role=True)
            if self.parsed.continuous_usage:
                role["usage"] = usage_body(prompt_tokens, 0)
            lead = sse(role)
            self.role_sent = True
        if self.tool is not None:
            chunk = self._tool_chunk(gen, text, finish)
        else:
            chunk = stream_chunk(self.model_name, self.trace, self.chat, text, finish, reasoning=gen.reasoning)
        if self.parsed.continuous_usage:
            chunk["usage"] = usage_body(prompt_tokens, gen.tokens)
        if finish is not None:
            if gen.stop_reason is not None:
                chunk["choices"][0]["stop_reason"] = gen.stop_reason
            chunk["loadgen"] = gen.vendor(self.trace, perf_counter_ns())
        return lead, sse(chunk)

    def _usage_only(self, gen: Generation) -> bytes:
        if not self.parsed.include_usage:
            return b""
        usage_only = stream_chunk(self.model_name, self.trace, self.chat, None, None)
        usage_only["choices"] = []
        usage_only["usage"] = usage_body(self.trace.prompt_tokens, gen.tokens)
        return sse(usage_only)

    def tail(self, gen: Generation) -> bytes:
        return self._usage_only(gen) + DONE

    def abort(self, gen: Generation) -> bytes:
        chunk = stream_chunk(self.model_name, self.trace, self.chat, "", "abort")
        chunk["loadgen"] = gen.vendor(self.trace, self.trace.done_ns)
        return sse(chunk) + self._usage_only(gen) + DONE

    def body(self, gen: Generation, text: str, reasoning: str, now_ns: int) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": gen.finish_reason}
        if self.tool is not None:
            function = {"name": self.tool.name, "arguments": self.tool.whole(text)}
            call = {"id": self.tool.call_id, "type": "function", "function": function}
            choice["message"] = {"role": "assistant", "content": None, "tool_calls": [call]}
            choice["finish_reason"] = "tool_calls"
            if reasoning:
                choice["message"]["reasoning"] = reasoning
        elif self.chat:
            choice["message"] = {"role": "assistant", "content": text}
            if reasoning:
                choice["message"]["reasoning"] = reasoning
        else:
            choice["text"] = text
        if gen.stop_reason is not None:
            choice["stop_reason"] = gen.stop_reason
        return {
            "id": self.trace.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": usage_body(self.trace.prompt_tokens, gen.tokens),
            "loadgen": gen.vendor(self.trace, now_ns),
        }


def _parser(chat: bool) -> Parser:
    def parse(body: Any, *, model_name: str, tokenizer: Tokenizer, max_model_len: int) -> ParsedRequest:
        return parse_request(body, chat=chat, model_name=model_name, tokenizer=tokenizer, max_model_len=max_model_len)

    return parse


COMPLETIONS = Api("completions", "cmpl-", "prompt", False, _parser(False), ChatRenderer)
CHAT = Api("chat", "chatcmpl-", "messages", True, _parser(True), ChatRenderer)


def parse_as_chat(
    chat_body: dict[str, Any], rename: dict[str, str], *, model_name: str, tokenizer: Tokenizer, max_model_len: int
) -> ParsedRequest:
    """Parse another API's body, restated as a chat body (``messages`` of string contents),
    with chat's rules; an error's ``param`` is renamed back to the other API's field."""
    try:
        return parse_request(
            chat_body, chat=True, model_name=model_name, tokenizer=tokenizer, max_model_len=max_model_len
        )
    except RequestRejected as exc:
        field = (exc.param or "").split("[")[0]  # vision's params name the part: messages[0].content[0]
        if field in rename:
            exc.param = rename[field]
        raise


def event(kind: str, obj: dict[str, Any]) -> bytes:
    """One named Server-Sent Event (``event: KIND``) carrying ``obj`` as compact JSON."""
    return b"event: " + kind.encode() + b"\n" + sse(obj)
