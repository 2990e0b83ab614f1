"""Transports: how a request reaches the server and its answer comes back, one module each.

A transport sends one request and fills in its
:class:`~loadgen.records.RequestRecord` (:class:`loadgen.load.transport.Transport`, the
runner's seam). :class:`StreamingTransport` (in :mod:`.base`) does everything but the
HTTP exchange: the body, the record, the end grace, redaction, error kinds, the stale
keep-alive resend. Built in: :mod:`.fast` (the default: HTTP/1.1 on httptools, with
:mod:`.fast_conn`), :mod:`.aiohttp_transport` (``aiohttp``) and :mod:`.httpx_transport`
(``httpx``, HTTP/2). ``--transport NAME`` (:class:`~loadgen.orchestrate.RunConfig`'s
``transport``) names one; :func:`make_transport` builds it.

Adding a transport is one module: subclass :class:`StreamingTransport`, implement its
:meth:`~StreamingTransport.exchange` (and :meth:`~StreamingTransport.warm_one` to open
connections ahead of a level), and :func:`register` the class under its name
(docs/architecture.md, "Extending loadgen").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TypeVar

from loadgen.client.transports.aiohttp_transport import AiohttpTransport
from loadgen.client.transports.base import (
    END_GRACE_S,
    ERROR_KINDS,
    FOREIGN_ERRORS,
    Stale,
    StreamingTransport,
    TransportConfig,
)
from loadgen.client.transports.fast import FastTransport
from loadgen.client.transports.httpx_transport import HttpxTransport
from loadgen.errors import ConfigError

__all__ = [
    "END_GRACE_S",
    "ERROR_KINDS",
    "FOREIGN_ERRORS",
    "TRANSPORTS",
    "AiohttpTransport",
    "FastTransport",
    "HttpxTransport",
    "Stale",
    "StreamingTransport",
    "TransportConfig",
    "make_transport",
    "register",
    "transport_names",
    "unregister",
]

Factory = Callable[[TransportConfig], StreamingTransport]
F = TypeVar("F", bound=Factory)

_REGISTRY: dict[str, Factory] = {}
TRANSPORTS: Mapping[str, Factory] = MappingProxyType(_REGISTRY)  # a live, read-only view of the registry


def register(name: str, factory: F) -> F:
    """Add ``factory`` (a :class:`StreamingTransport` subclass, or any callable taking a
    :class:`TransportConfig`) under ``name``; a name taken by another is a ConfigError.
    Returns ``factory``."""
    if not name:
        raise ConfigError("a transport needs a name")
    if _REGISTRY.get(name, factory) is not factory:
        raise ConfigError(f"transport {name!r} is registered already")
    _REGISTRY[name] = factory
    return factory


def unregister(name: str) -> None:
    """Remove the transport called ``name`` (nothing if there is none)."""
    _REGISTRY.pop(name, None)


def transport_names() -> list[str]:
    """The registered transports' names, in the order they were registered."""
    return list(_REGISTRY)


def make_transport(name: str, config: TransportConfig) -> StreamingTransport:
    """A new transport of the kind called ``name``; an unknown name is a ConfigError listing the valid ones."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"unknown transport {name!r}; choose one of: {', '.join(_REGISTRY)}", field="transport"
        ) from None
    return factory(config)


register("aiohttp", AiohttpTransport)
register("httpx", HttpxTransport)
register("fast", FastTransport)
