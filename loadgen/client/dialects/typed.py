"""What the dialects of APIs with typed events share (``responses``, ``messages``).

Their events name their kind in a ``type`` field of the data (``response.output_text.delta``,
``content_block_delta``, …): the many delta events carry text, a few rare ones carry usage,
the finish or an error. :func:`typed_decode` reads an event like ``json.loads``, fast: orjson
first, and ``json`` again for a rare event that holds a run of 19 digits (orjson reads an
integer past 64 bits as a float, and a usage count or an error there must read as ``json``
reads it); a delta's value is used only for its truth and its being a string, which orjson
reads the same. :func:`message_of` is the text of an error object; :func:`add_options` puts
the run's options into a body, each API's tool shapes given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from typing import Any

import orjson

from loadgen.client.dialects.base import DialectOptions
from loadgen.records import RequestSpec

__all__ = ["add_options", "message_of", "typed_decode"]

_orjson_loads = orjson.loads
_OrjsonError = orjson.JSONDecodeError
_BIG_INT = re.compile("[0-9]{19}")


def typed_decode(frequent: Collection[str]) -> Callable[[str], Any]:
    """A ``decode(data)`` that gives ``json.loads(data)``'s value; events whose ``type`` is in
    ``frequent`` (deltas: nothing but their text is read) are never read twice."""
    common = frozenset(frequent)

    def decode(data: str) -> Any:
        try:
            obj = _orjson_loads(data)
        except _OrjsonError:
            return json.loads(data)
        if type(obj) is dict:
            kind = obj.get("type")
            if not (type(kind) is str and kind in common) and _BIG_INT.search(data):
                return json.loads(data)
        return obj

    return decode


def message_of(err: Any, fallback: str) -> str:
    """The ``message`` of an error object (else its ``code`` or ``type``), or ``fallback``."""
    if isinstance(err, dict):
        for key in ("message", "code", "type"):
            value = err.get(key)
            if value:
                return str(value)
        return fallback
    return fallback if err is None or err == "" else str(err)


def add_options(
    body: dict[str, Any],
    spec: RequestSpec,
    options: DialectOptions,
    tool: Callable[[Any], Any],
    tool_choice: Callable[[Any], Any],
) -> dict[str, Any]:
    """``body`` with the run's options as both typed APIs take them: ``temperature``; the
    tools (the request's own, else the run's) and ``tool_choice``, in the API's shape by
    ``tool`` and ``tool_choice``; vLLM's ``ignore_eos``/``min_tokens`` unless ``strict``;
    then ``extra_body`` over all of it."""
    if options.temperature is not None:
        body["temperature"] = options.temperature
    tools = options.tools if spec.tools is None else spec.tools
    if tools is not None:
        body["tools"] = [tool(t) for t in tools]
    if options.tool_choice is not None:
        body["tool_choice"] = tool_choice(options.tool_choice)
    if not options.strict:
        body["ignore_eos"] = True
        body["min_tokens"] = spec.max_tokens
    if options.extra_body:
        body.update(options.extra_body)
    return body
