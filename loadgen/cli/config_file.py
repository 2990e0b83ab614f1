"""``loadgen run --config FILE``: options from a TOML file or a run folder's run.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tomllib
import typer

__all__ = ["config_callback", "config_defaults"]

# a run.json's command repeats the run, without what a new run must not reuse and the
# values never stored
_NOT_REPEATED = ("--out", "--header", "--config", "--label", "--save-result", "--prompt-salt", "--repeat-prompts")


def _read(path: Path) -> str:
    from loadgen.inputs import open_input

    try:
        with open_input(path) as fh:  # (a FIFO or a device: refused, not read)
            return fh.read().decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _repeated(argv: list[str]) -> list[str]:
    kept, skip = [], False
    for i, arg in enumerate(argv):
        flag = arg.split("=", 1)[0]
        if skip:
            skip = False
            continue
        if flag in _NOT_REPEATED:
            skip = "=" not in arg and i + 1 < len(argv)
            continue
        kept.append(arg)
    return kept


def config_defaults(command: Any, path: Path) -> dict[str, Any]:
    """The options a ``--config`` file gives ``loadgen run`` (see :func:`config_callback`)."""
    text = _read(path)
    if path.suffix == ".json":
        from loadgen.errors import ConfigError
        from loadgen.runinfo import RunInfo

        try:
            run = RunInfo.from_json(json.loads(text), source=str(path))
        except (ValueError, ConfigError) as exc:
            raise typer.BadParameter(f"{path} is not a loadgen run.json ({exc})") from None
        argv = run.command[2:]  # a run's own command line
        if not argv:
            raise typer.BadParameter(f"{path} is not a loadgen run.json (no 'command' list)")
        sub = command.make_context("run", _repeated(argv), resilient_parsing=True)
        given = {
            k: v for k, v in sub.params.items() if getattr(sub.get_parameter_source(k), "name", "") == "COMMANDLINE"
        }
        # the same prompt text: the run's salt, or none when it sent them unsalted (--repeat-prompts, or before salts)
        salt = run.config.prompt_salt
        return {**given, **({"prompt_salt": salt} if salt is not None else {"repeat_prompts": True})}
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise typer.BadParameter(f"{path}: not valid TOML ({exc})") from None
    names = {p.name for p in command.params if p.name}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in names or name in ("config",):
            raise typer.BadParameter(
                f"{path}: unknown option {key!r} (keys are loadgen run's options, e.g. url, workload, concurrency, slo)"
            )
        out[name] = value
    return out


def config_callback(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """``--config FILE``: every option from a TOML file (keys are the options' names) or a
    run folder's ``run.json`` (its command line); flags given on the command line win."""
    if value is not None:
        ctx.default_map = {**(ctx.default_map or {}), **config_defaults(ctx.command, value)}
    return value
