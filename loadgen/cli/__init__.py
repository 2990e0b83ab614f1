"""The ``loadgen`` command line (typer). The only package that touches argv and exit codes.

Every :class:`loadgen.errors.LoadgenError` becomes one line on stderr and exit code 2;
Ctrl-C (SIGINT), SIGTERM or SIGHUP during a run keeps every finished record, writes the
summary and the report, and exits 130, 143 or 129 (128 + the signal); a run folder that cannot be
written (a full disk) stops the run the same way and exits 74.

``run`` lives in :mod:`~loadgen.cli.run_cmd`, ``serve`` in :mod:`~loadgen.cli.serve_cmd`,
the rest in :mod:`~loadgen.cli.commands`; each only parses and hands a typed
configuration on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadgen.cli.commands import (
    compare,
    demo,
    export,
    matrix,
    profiles,
    report,
    schema,
    version,
    watch,
    workload_app,
    workloads,
)
from loadgen.cli.common import app
from loadgen.cli.run_cmd import run
from loadgen.cli.serve_cmd import serve

__all__ = ["app", "main"]

# the commands, in the order ``loadgen --help`` lists them
_FIRST: tuple[Callable[..., Any], ...] = (run, report, watch, matrix, export, schema, compare, profiles, workloads)
for command in _FIRST:
    app.command()(command)
app.add_typer(workload_app, name="workload")
for command in (serve, demo, version):
    app.command()(command)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
