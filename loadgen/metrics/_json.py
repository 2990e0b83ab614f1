"""The JSON side of :mod:`loadgen.metrics.results`: typed values to JSON-ready data and back.

A dataclass field's ``json`` metadata names its key (:func:`key`); ``omit_none`` leaves a
``None`` out of the JSON and reads a missing key as ``None``.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, TypeVar, Union

__all__ = ["JSONRecord", "encode_json", "key"]

T = TypeVar("T")


def key(name: str, json_key: str | None = None, *, omit_none: bool = False) -> dict[str, Any]:
    return {"json": json_key or name, "omit_none": omit_none}


def encode_json(value: Any) -> Any:
    """A typed value as JSON-ready data: dataclasses by their fields (a field's ``json``
    metadata names its key; ``omit_none`` leaves a ``None`` out), NaN and infinities as
    ``None``; a value read from text (a precision target) as that text, its ``json_text()``.
    Shared by ``summary.json`` and ``run.json`` (:mod:`loadgen.runinfo`)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        as_text = getattr(value, "json_text", None)
        if callable(as_text):
            return as_text()
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            out[f.metadata.get("json", f.name)] = encode_json(v)
        return out
    if isinstance(value, (list, tuple)):
        return [encode_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode_json(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _decode(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        if len(args) == 1:
            return _decode(args[0], value, where)
        if all(a in (int, float) for a in args):  # ``int | float``: keep the number as written
            return value
        raise TypeError(f"{where}: unsupported union {tp}")
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        return [_decode(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        _, item = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        return {str(k): _decode(item, v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _from_dict(tp, value, where)
    if origin is Literal:  # a mode: one of its strings
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ValueError(f"{where}: expected one of {', '.join(map(str, allowed))}, got {value!r}")
        return value
    scalar = _SCALARS.get(tp)
    if scalar is not None:  # a number is never a bool, unless a bool is expected
        kinds, what = scalar
        if not isinstance(value, kinds) or (tp is not bool and isinstance(value, bool)):
            raise ValueError(f"{where}: expected {what}, got {value!r}")
        return float(typing.cast(float, value)) if tp is float else value
    return value


_SCALARS: dict[Any, tuple[tuple[type, ...], str]] = {
    float: ((int, float), "a number"),
    int: ((int,), "an integer"),
    bool: ((bool,), "true or false"),
    str: ((str,), "a string"),
}


_HINTS: dict[type, dict[str, Any]] = {}


def _from_dict(cls: type[T], data: Any, where: str) -> T:
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected an object, got {type(data).__name__}")
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = f.metadata.get("json", f.name)
        if key not in data:
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
                continue
            if f.metadata.get("omit_none"):
                kwargs[f.name] = None
                continue
            raise ValueError(f"{where}: missing {key!r}")
        kwargs[f.name] = _decode(hints[f.name], data[key], f"{where}.{key}")
    return cls(**kwargs)


class JSONRecord:
    """``to_json``/``from_json`` for the dataclasses below."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN and infinities as ``None``)."""
        out: dict[str, Any] = encode_json(self)
        return out

    @classmethod
    def from_json(cls: type[T], data: Any) -> T:
        """The inverse of :meth:`to_json`; raises ``ValueError`` naming the bad key."""
        return _from_dict(cls, data, cls.__name__)
