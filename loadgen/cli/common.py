"""What every ``loadgen`` command shares: the typer app, the consoles, and the wrappers
that turn a :class:`~loadgen.errors.LoadgenError` into one line and a signal into its
exit code."""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from loadgen.errors import ConfigError, LoadgenError
from loadgen.signals import TERMINATING, exit_code, raise_on_sigterm

__all__ = ["app", "console", "err_console", "flag_of", "friendly", "out_folder", "sigterm_unwinds"]

app = typer.Typer(
    name="loadgen",
    help="Load testing and latency benchmarking for LLM inference servers (TTFT, ITL, TPOT, goodput).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True, highlight=False)
F = TypeVar("F", bound=Callable[..., Any])
# the fields below the command line whose flag is not "--" and the field's name with dashes
_FLAGS = {
    "headers": "--header",
    "prompt_token_range": "--min-prompt-tokens/--max-prompt-tokens",
}


def flag_of(field: str) -> str:
    """The flag a field of the code below the command line is given by (``window`` is
    ``--window``): how an error on that field names it (:meth:`ConfigError.named`)."""
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def _as_user_wrote(exc: LoadgenError) -> LoadgenError:
    if isinstance(exc, ConfigError) and exc.field and not exc.key:
        return exc.named(flag_of(exc.field))
    return exc


def friendly(fn: F) -> F:
    """LoadgenError → one red line and exit 2; Ctrl-C, SIGTERM or SIGHUP outside a run →
    exit 130, 143 or 129."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LoadgenError as exc:
            shown = _as_user_wrote(exc)
            err_console.print(f"[bold red]error:[/bold red] {escape(str(shown))}", soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            err_console.print(
                "[yellow]interrupted[/yellow]" if signum == signal.SIGINT else "[yellow]terminated[/yellow]"
            )
            raise typer.Exit(exit_code(signum)) from None

    return wrapper  # type: ignore[return-value]


def sigterm_unwinds(fn: F) -> F:
    """SIGTERM or SIGHUP while ``fn`` runs, outside a run's own handler (discovery,
    calibration, the report), unwinds like Ctrl-C: one line and exit 143 or 129 (see
    :mod:`loadgen.signals`)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = {sig: signal.getsignal(sig) for sig in TERMINATING}
        raise_on_sigterm()
        try:
            return fn(*args, **kwargs)
        finally:
            for sig, handler in previous.items():
                if handler is not None:
                    with contextlib.suppress(ValueError):  # not the main thread
                        signal.signal(sig, handler)

    return wrapper  # type: ignore[return-value]


def console() -> Console:
    """stdout console; wide enough for the level table when output is not a terminal."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else 150)


def out_folder(text: str | None) -> str | None:
    """An ``--out`` as given: an empty name is refused (it would mean the current directory)."""
    if text is not None and not text.strip():
        raise ConfigError("give a folder (an empty name would mean the current directory)", key="--out")
    return text
