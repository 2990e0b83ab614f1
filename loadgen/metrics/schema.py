"""The JSON Schema of ``summary.json``, derived from the typed results themselves.

``loadgen schema summary`` prints it; tests validate real summaries against it. It is
generated from the dataclasses of :mod:`loadgen.metrics.results` (their type hints, JSON
key names and ``omit_none`` marks), so it cannot drift from what ``to_json()`` writes:

- a ``float`` is ``number`` or ``null`` (NaN and infinities are written as ``null``);
  ``int | float`` is ``number``; ``X | None`` adds ``null``;
- a dataclass is an ``object`` whose required keys are the fields without a default
  (``omit_none`` fields may be absent), with no other keys allowed;
- ``list[X]`` is an ``array``; ``tuple[X, Y]`` an ``array`` of those items;
  ``dict[str, X]`` an ``object`` of ``X`` values;
- a field marked ``required`` is required even though it has a default.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

from loadgen.metrics.results import SCHEMA_VERSION, RunSummary

__all__ = ["json_schema", "summary_schema"]

_DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _type(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        nullable = type(None) in args
        rest = [a for a in args if a is not type(None)]
        if rest and all(a in (int, float) for a in rest):
            inner: dict[str, Any] = {"type": "number"}
        elif len(rest) == 1:
            inner = _type(rest[0], defs)
        else:
            inner = {"anyOf": [_type(a, defs) for a in rest]}
        return {"anyOf": [inner, {"type": "null"}]} if nullable else inner
    if origin is list:
        (item,) = typing.get_args(tp)
        return {"type": "array", "items": _type(item, defs)}
    if origin is tuple:
        items = typing.get_args(tp)
        if items[-1] is Ellipsis:
            return {"type": "array", "items": _type(items[0], defs)}
        return {
            "type": "array",
            "prefixItems": [_type(a, defs) for a in items],
            "minItems": len(items),
            "maxItems": len(items),
        }
    if origin is dict:
        _, item = typing.get_args(tp)
        return {"type": "object", "additionalProperties": _type(item, defs)}
    if origin is Literal:  # a mode: one of its strings
        return {"type": "string", "enum": list(typing.get_args(tp))}
    if isinstance(tp, type) and callable(getattr(tp, "json_text", None)):  # written as its text
        return {"type": "string"}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder: recursion ends here
            defs[name] = _object(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    if tp is float:
        return {"type": ["number", "null"]}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is str:
        return {"type": "string"}
    return {}


def _object(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        key = f.metadata.get("json", f.name)
        props[key] = _type(hints[f.name], defs)
        no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if (no_default or f.metadata.get("required")) and not f.metadata.get("omit_none"):
            required.append(key)
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split())
    if required:
        out["required"] = required
    return out


def json_schema(cls: type, *, title: str) -> dict[str, Any]:
    """The JSON Schema of ``cls.to_json()`` output, definitions inlined under ``$defs``."""
    defs: dict[str, Any] = {}
    root = _object(cls, defs)
    return {"$schema": _DRAFT, "title": title, **root, "$defs": defs}


def summary_schema() -> dict[str, Any]:
    """The schema of ``summary.json`` (this version's ``schema_version``)."""
    schema = json_schema(RunSummary, title=f"loadgen summary.json, schema_version {SCHEMA_VERSION}")
    schema["properties"]["schema_version"] = {"const": SCHEMA_VERSION}
    return schema
