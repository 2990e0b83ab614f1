"""API dialects: one module per API family owns its wire format; this registry lists them.

A dialect (:class:`Dialect`, in :mod:`.base`) builds the streamed and the non-streamed
request bodies, makes the key's headers, parses one event, says what ends a stream, and
reads usage. The command line, matrix files and :class:`~loadgen.orchestrate.RunConfig`
name one by its ``name`` (``--api``); :func:`dialect_names` lists what :func:`get_dialect`
accepts. Built in: :mod:`.openai` (``chat``, ``completions``), and the
non-streamed :mod:`.embeddings` (``embeddings``) and :mod:`.rerank` (``rerank``, ``score``). Adding an API is one module:
subclass :class:`Dialect` and :func:`register` an instance (docs/client.md, "Adding an API").
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

from loadgen.client.dialects.base import AnswerInfo, Dialect, DialectOptions, EventInfo
from loadgen.client.dialects.embeddings import Embeddings
from loadgen.client.dialects.messages import Messages
from loadgen.client.dialects.openai import Chat, Completions
from loadgen.client.dialects.rerank import Rerank, Score
from loadgen.client.dialects.responses import Responses
from loadgen.errors import ConfigError

__all__ = [
    "DIALECTS",
    "AnswerInfo",
    "Dialect",
    "DialectOptions",
    "EventInfo",
    "dialect_names",
    "get_dialect",
    "register",
    "unregister",
]

_REGISTRY: dict[str, Dialect] = {}
DIALECTS: Mapping[str, Dialect] = MappingProxyType(_REGISTRY)  # a live, read-only view of the registry

D = TypeVar("D", bound=Dialect)


def register(dialect: D) -> D:
    """Add ``dialect`` under its ``name`` (a name taken by another dialect is a ConfigError);
    returns it, so ``CHAT = register(Chat())`` reads as a definition."""
    if not dialect.name or not dialect.path.startswith("/"):
        raise ConfigError(
            f"a dialect needs a name and a path starting with '/' (got {dialect.name!r}, {dialect.path!r})"
        )
    if _REGISTRY.get(dialect.name, dialect) is not dialect:
        raise ConfigError(f"API {dialect.name!r} is registered already")
    _REGISTRY[dialect.name] = dialect
    return dialect


def unregister(name: str) -> None:
    """Remove the dialect called ``name`` (nothing if there is none)."""
    _REGISTRY.pop(name, None)


def dialect_names() -> list[str]:
    """The registered dialects' names, in the order they were registered."""
    return list(_REGISTRY)


def get_dialect(name: str) -> Dialect:
    """The dialect called ``name``; an unknown name is a ConfigError (key ``--api``) listing the valid ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"unknown API {name!r}; choose one of: {', '.join(_REGISTRY)}", field="api") from None


register(Chat())
register(Completions())
register(Responses())
register(Messages())
register(Embeddings())
register(Rerank())
register(Score())
