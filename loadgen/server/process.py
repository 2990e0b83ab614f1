"""Run ``loadgen serve`` in a child process (the demo and end-to-end tests use it).

A separate process keeps the server's event loop and the client's apart, as they would
be in a real deployment (and on two cores, each gets one).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO

from loadgen.errors import ServerError

__all__ = ["ServerProcess"]

_READY = re.compile(r"listening on (http://\S+)")


class ServerProcess:
    """``with ServerProcess(["--no-chunked-prefill"]) as url: ...`` — a server on a free loopback port."""

    def __init__(self, args: Sequence[str] = (), *, startup_timeout_s: float = 60.0) -> None:
        self.args = list(args)
        self.startup_timeout_s = startup_timeout_s
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None
        self._lines: list[str] = []

    def __enter__(self) -> str:
        cmd = [sys.executable, "-m", "loadgen.cli", "serve", "--host", "127.0.0.1", "--port", "0", *self.args]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        found = threading.Event()
        assert self.proc.stdout is not None
        out: IO[str] = self.proc.stdout

        def pump() -> None:  # keep reading so the child never blocks on a full pipe
            for line in out:
                self._lines.append(line.rstrip())
                m = _READY.search(line)
                if m and not found.is_set():
                    self.url = m.group(1)
                    found.set()
            found.set()

        threading.Thread(target=pump, daemon=True).start()
        if not found.wait(self.startup_timeout_s) or not self.url:
            self.__exit__()
            tail = " | ".join(self._lines[-3:]) or "no output"
            raise ServerError(f"the reference server did not start: {tail}")
        return self.url

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    @property
    def output(self) -> list[str]:
        return list(self._lines)
