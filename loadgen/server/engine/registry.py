"""Preset registries: a dict filled by a decorator, looked up by name.

A preset is registered under one or more names (aliases) by decorating the function that
builds it; the function runs once, at registration. Lookups ignore case and surrounding
spaces; one that fails raises :class:`~loadgen.errors.ConfigError` listing the valid names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from loadgen.errors import ConfigError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(dict[str, T]):
    """Presets by name. ``what`` names the kind in errors, ``key`` is the flag it comes from."""

    def __init__(self, what: str, key: str) -> None:
        super().__init__()
        self.what = what
        self.key = key

    def preset(self, *names: str) -> Callable[[Callable[[], T]], Callable[[], T]]:
        """Register the decorated factory's preset under ``names`` (the first is its name)."""

        def register(factory: Callable[[], T]) -> Callable[[], T]:
            value = factory()
            for name in names:
                self[name] = value
            return factory

        return register

    def lookup(self, name: str, valid: Iterable[str] | None = None, *, what: str | None = None) -> T:
        """The preset called ``name``, if it is among ``valid`` (default: every name)."""
        names = list(self if valid is None else valid)
        found = name.strip().lower()
        if found not in names:
            raise ConfigError(f"unknown {what or self.what} {name!r}; valid: {', '.join(names)}", key=self.key)
        return self[found]
