"""The OpenAI wire format of the reference server: strict request parsing and body shapes.

Parsing turns a decoded JSON body into a :class:`ParsedRequest` or raises
:class:`RequestRejected` (an OpenAI-style error: status, message, param, code). Fields the
server does not use are ignored, like vLLM does; fields it uses are type-checked strictly.
``prompt_tokens + max_tokens`` must fit ``max_model_len``; a prompt is tokenised with a cap
and a token-id list measured before its ids are checked, so a prompt far over the context
costs work in proportion to ``max_model_len``. Images (:mod:`loadgen.server.vision`) and
tools (rendered into the prompt; answered by :mod:`loadgen.server.tools`) count as prompt.

Docs: docs/server.md ("Parsing and errors", "Tool calls", "Hostile clients and shutdown").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from loadgen.server.rejected import RequestRejected
from loadgen.server.tokenizer import Tokenizer
from loadgen.server.vision import chat_image_part, image_prompt_ids

__all__ = [
    "ParsedRequest",
    "parse_request",
    "usage_body",
]

_INT = "integer"
_NUM = "number"
_BOOL = "boolean"
_STR = "string"


def usage_body(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


@dataclass(slots=True)
class ParsedRequest:
    """A validated completions or chat request, prompt already tokenized."""

    chat: bool
    prompt_ids: list[int]
    max_tokens: int  # resolved: never None
    min_tokens: int = 0
    ignore_eos: bool = False
    stop: tuple[tuple[str, ...], ...] = ()
    temperature: float = 1.0
    seed: int | None = None
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    encoder_patches: int = 0  # the images' vision-encoder patches (their tokens are in prompt_ids)
    tools: tuple[tuple[str, str], ...] = ()  # each function tool's (name, argument key)
    tool_choice: str = "auto"  # "none", "auto" or "required" (a named function: required)
    tool_name: str | None = None  # the function tool_choice names
    tool_results: int = 0  # tool results in the history (chat ``tool`` messages)
    call: tuple[str, str] | None = None  # the tool this answer calls, (name, key): the server decides


def _check(value: Any, kind: str) -> bool:
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == _BOOL:
        return isinstance(value, bool)
    return isinstance(value, str)


def _field(body: dict[str, Any], key: str, kind: str, default: Any = None) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if not _check(value, kind):
        raise RequestRejected(
            f"'{key}' must be {'an' if kind == _INT else 'a'} {kind}, got {type(value).__name__}: {value!r:.60}",
            param=key,
        )
    return value


def _over_context(max_model_len: int, chat: bool) -> RequestRejected:
    where = "messages" if chat else "prompt"
    return RequestRejected(
        f"This model's maximum context length is {max_model_len} tokens. However, the "
        f"{where} alone has more than {max_model_len} tokens. Please reduce the length of "
        f"the prompt.",
        param=where,
        code="context_length_exceeded",
    )


def _encode(tok: Tokenizer, text: str, max_model_len: int) -> list[int]:
    capped = getattr(tok, "encode_at_most", None)
    if capped is None:
        return tok.encode(text)
    ids: list[int] | None = capped(text, max_model_len)
    if ids is None:
        raise _over_context(max_model_len, chat=False)
    return ids


def _parse_prompt(body: dict[str, Any], tok: Tokenizer, max_model_len: int) -> list[int]:
    prompt = body.get("prompt")
    if prompt is None:
        raise RequestRejected("'prompt' is required", param="prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return _encode(tok, prompt, max_model_len)
    if isinstance(prompt, list) and len(prompt) > max_model_len:
        raise _over_context(max_model_len, chat=False)
    if isinstance(prompt, list) and all(_check(t, _INT) for t in prompt):
        bad = [t for t in prompt if not 0 <= t < tok.vocab_size]
        if bad:
            raise RequestRejected(f"token id {bad[0]} is outside the vocabulary [0, {tok.vocab_size})", param="prompt")
        return list(prompt)
    raise RequestRejected(
        "'prompt' must be a string, a list of token ids, or a list holding "
        "one of those (batches of several prompts are not supported)",
        param="prompt",
    )


def _content_text(content: Any, i: int, images: list[Any] | None = None) -> str:
    """A message's text; its ``image_url`` parts go to ``images`` (:mod:`loadgen.server.vision`)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if images is not None and isinstance(part, dict) and part.get("type") == "image_url":
                images.append(chat_image_part(part, f"messages[{i}].content[{j}]"))
                continue
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise RequestRejected(
                    f"messages[{i}].content: only parts of type 'text' with a string 'text'"
                    + (" or 'image_url'" if images is not None else "")
                    + " are supported",
                    param="messages",
                )
            texts.append(part["text"])
        return " ".join(texts)
    raise RequestRejected(f"messages[{i}].content must be a string or a list of text parts", param="messages")


def _parse_messages(
    body: dict[str, Any], tok: Tokenizer, max_model_len: int, images: list[Any] | None = None
) -> list[int]:
    messages = body.get("messages")
    if messages is None:
        raise RequestRejected("'messages' is required", param="messages")
    if not isinstance(messages, list) or not messages:
        raise RequestRejected("'messages' must be a non-empty list", param="messages")
    pairs = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise RequestRejected(f"messages[{i}] must be an object", param="messages")
        role = msg.get("role")
        if not isinstance(role, str) or not role or any(c.isspace() for c in role):
            raise RequestRejected(f"messages[{i}].role must be a non-empty string without spaces", param="messages")
        text = _content_text(msg.get("content"), i, images)
        if msg.get("tool_calls") is not None:
            text = " ".join([text, *_tool_calls_text(msg["tool_calls"], i)]).strip()
        pairs.append((role, text))
    tools = body.get("tools")
    if tools:
        pairs.insert(0, ("tools", json.dumps(tools, separators=(", ", ": "))))
    capped = getattr(tok, "apply_chat_template_at_most", None)
    if capped is None:
        return tok.apply_chat_template(pairs)
    ids: list[int] | None = capped(pairs, max_model_len)
    if ids is None:
        raise _over_context(max_model_len, chat=True)
    return ids


def _tool_calls_text(calls: Any, i: int) -> list[str]:
    """An assistant message's ``tool_calls`` as prompt text: each function's name and arguments."""
    where = f"messages[{i}].tool_calls"
    if not isinstance(calls, list):
        raise RequestRejected(f"{where} must be a list", param="messages")
    texts = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not (
            isinstance(function, dict)
            and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments", ""), str)
        ):
            raise RequestRejected(
                f"{where}[{j}] must be an object with a 'function' of a string 'name' and string 'arguments'",
                param="messages",
            )
        texts += [function["name"], function.get("arguments", "")]
    return texts


def _argument_key(function: dict[str, Any]) -> str:
    """The parameter the server's arguments fill: the function's first string property, else ``query``."""
    params = function.get("parameters")
    props = params.get("properties") if isinstance(params, dict) else None
    if isinstance(props, dict):
        for key, spec in props.items():
            if isinstance(spec, dict) and spec.get("type") == "string":
                return str(key)
    return "query"


def _parse_tools(body: dict[str, Any]) -> tuple[tuple[tuple[str, str], ...], str, str | None]:
    """``(tools as (name, argument key), tool_choice, the named function)``."""
    raw = body.get("tools")
    tools: list[tuple[str, str]] = []
    if raw is not None:
        if not isinstance(raw, list):
            raise RequestRejected("'tools' must be a list of tools", param="tools")
        for j, tool in enumerate(raw):
            function = tool.get("function") if isinstance(tool, dict) else None
            if not (
                isinstance(tool, dict)
                and tool.get("type", "function") == "function"
                and isinstance(function, dict)
                and isinstance(function.get("name"), str)
                and function["name"]
            ):
                raise RequestRejected(
                    f"tools[{j}] must be {{'type': 'function', 'function': {{'name': a non-empty string, ...}}}}",
                    param="tools",
                )
            tools.append((function["name"], _argument_key(function)))
    choice = body.get("tool_choice")
    name: str | None = None
    if choice is None:
        choice = "auto"
    elif isinstance(choice, dict):
        function = choice.get("function")
        if not (isinstance(function, dict) and isinstance(function.get("name"), str)):
            raise RequestRejected(
                "'tool_choice' must be 'none', 'auto', 'required' or "
                "{'type': 'function', 'function': {'name': a string}}",
                param="tool_choice",
            )
        name = function["name"]
        if name not in {n for n, _ in tools}:
            raise RequestRejected(
                f"'tool_choice' names the function {name!r:.60}, not one of 'tools'", param="tool_choice"
            )
        choice = "required"
    elif choice not in ("none", "auto", "required"):
        raise RequestRejected(
            f"'tool_choice' must be 'none', 'auto', 'required' or a named function, got {choice!r:.60}",
            param="tool_choice",
        )
    if choice == "required" and not tools:
        raise RequestRejected("'tool_choice' 'required' needs 'tools'", param="tool_choice")
    return tuple(tools), choice, name


def _parse_stop(body: dict[str, Any]) -> tuple[tuple[str, ...], ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise RequestRejected("'stop' must be a string or a list of strings", param="stop")
    words = tuple(tuple(s.split()) for s in items)
    if any(not w for w in words):
        raise RequestRejected(
            "'stop' strings must contain at least one word (stop sequences are matched on whole words)", param="stop"
        )
    return words


def parse_request(body: Any, *, chat: bool, model_name: str, tokenizer: Tokenizer, max_model_len: int) -> ParsedRequest:
    """Validate a completions (``chat=False``) or chat body; raise :class:`RequestRejected`."""
    if not isinstance(body, dict):
        raise RequestRejected("the request body must be a JSON object")
    model = _field(body, "model", _STR, model_name)
    if model != model_name:
        raise RequestRejected(
            f"The model `{model}` does not exist; this server serves `{model_name}`.",
            param="model",
            code="model_not_found",
        )
    n = _field(body, "n", _INT, 1)
    if n != 1:
        raise RequestRejected(f"only n=1 is supported, got n={n}", param="n")
    if _field(body, "best_of", _INT, 1) != 1:
        raise RequestRejected("only best_of=1 is supported", param="best_of")
    if not chat and _field(body, "echo", _BOOL, False):
        raise RequestRejected("echo is not supported", param="echo")
    if body.get("logprobs") not in (None, False):
        raise RequestRejected("logprobs are not supported", param="logprobs")

    tools, tool_choice, tool_name = _parse_tools(body) if chat else ((), "auto", None)
    images: list[Any] = []
    prompt_ids = (
        _parse_messages(body, tokenizer, max_model_len, images)
        if chat
        else _parse_prompt(body, tokenizer, max_model_len)
    )
    if images:
        prompt_ids = prompt_ids + image_prompt_ids(images, tokenizer.vocab_size)
    if not prompt_ids:
        raise RequestRejected("the prompt is empty (0 tokens)", param="messages" if chat else "prompt")

    key = "max_tokens"
    max_tokens = _field(body, "max_tokens", _INT)
    if chat and body.get("max_completion_tokens") is not None:
        key = "max_completion_tokens"
        max_tokens = _field(body, key, _INT)
    if max_tokens is not None and max_tokens < 1:
        raise RequestRejected(f"'{key}' must be at least 1, got {max_tokens}", param=key)
    min_tokens = _field(body, "min_tokens", _INT, 0)
    if min_tokens < 0 or (max_tokens is not None and min_tokens > max_tokens):
        raise RequestRejected(f"'min_tokens' must be between 0 and {key}, got {min_tokens}", param="min_tokens")
    temperature = float(_field(body, "temperature", _NUM, 1.0))
    if temperature < 0.0:
        raise RequestRejected(f"'temperature' must be >= 0, got {temperature}", param="temperature")

    stream = _field(body, "stream", _BOOL, False)
    options = body.get("stream_options")
    include_usage = continuous = False
    if options is not None:
        if not stream:
            raise RequestRejected("'stream_options' is only allowed when 'stream' is true", param="stream_options")
        if not isinstance(options, dict):
            raise RequestRejected("'stream_options' must be an object", param="stream_options")
        include_usage = _field(options, "include_usage", _BOOL, False)
        # As in vLLM, per-event usage needs include_usage as well.
        continuous = include_usage and _field(options, "continuous_usage_stats", _BOOL, False)

    prompt_len = len(prompt_ids)
    if max_tokens is None:
        max_tokens = max_model_len - prompt_len
    if max_tokens < 1 or prompt_len + max_tokens > max_model_len:
        raise RequestRejected(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_len + max(max_tokens, 0)} tokens ({prompt_len} in the "
            f"{'messages' if chat else 'prompt'}, {max(max_tokens, 0)} in the completion). "
            "Please reduce the length of the prompt or completion.",
            param="messages" if chat else "prompt",
            code="context_length_exceeded",
        )
    return ParsedRequest(
        chat=chat,
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_field(body, "ignore_eos", _BOOL, False),
        stop=_parse_stop(body),
        temperature=temperature,
        seed=_field(body, "seed", _INT),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        encoder_patches=sum(image.patches for image in images),
        tools=tools,
        tool_choice=tool_choice,
        tool_name=tool_name,
        tool_results=sum(isinstance(m, dict) and m.get("role") == "tool" for m in body["messages"]) if chat else 0,
    )
