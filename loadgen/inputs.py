"""A user's input file (dataset, trace, tokenizer, workload, profile, tools), opened safely.

Only a regular file is read (or a folder, where the caller allows one): a FIFO without a
writer would block ``open()`` or ``read()`` in C, where no signal handler runs, and a
device such as ``/dev/zero`` never ends. :func:`open_input` opens without blocking and
checks the opened descriptor, so a path swapped between the check and the open is
refused too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = ["InputError", "input_problem", "open_input"]

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def _problem(mode: int, folder_ok: bool) -> str | None:
    if stat.S_ISREG(mode) or (folder_ok and stat.S_ISDIR(mode)):
        return None
    return f"is {_kind(mode)}, not a regular file" + (" or a folder" if folder_ok else "")


def input_problem(path: str | Path, *, folder_ok: bool = False) -> str | None:
    """Why ``path`` cannot be read as an input (``"no such file"``, ``"is a FIFO, not a
    regular file"``, ...), or None when it can. Never opens it, never blocks."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    return _problem(mode, folder_ok)


class InputError(OSError):
    """Raised by :func:`open_input`; ``str(exc)`` is the reason (callers add the file's name)."""

    def __str__(self) -> str:
        return str(self.strerror)


def open_input(path: str | Path) -> BinaryIO:
    """``path`` opened for reading in binary, refused unless it is a regular file
    (:class:`InputError`, an ``OSError`` whose ``strerror`` says why; a missing file raises
    ``FileNotFoundError`` as ``open()`` does)."""
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        why = _problem(os.fstat(fd).st_mode, False)
        if why is not None:
            raise InputError(22, why)
        if _NONBLOCK:  # (no effect on a regular file; cleared so the file reads as usual)
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
