"""``loadgen matrix FILE.toml``: one workload and profile against several server configurations.

A matrix file names the server configurations (a command template and a grid or list of
parameters, or a fixed URL), the workload, the load profile and the SLOs. For each
configuration loadgen starts the server in its own process group (its output kept in
``server.log``), waits for ``/health``, runs the profile with ``/metrics`` scraped (each
level's length by :func:`loadgen.load.profiles.with_budget`, as ``loadgen run`` does), and
stops the server (SIGTERM, SIGKILL after a grace period). A server that does not start, or
dies during its run, is reported in ``matrix.json`` and the matrix goes on. The output
folder holds one run folder per configuration, ``matrix.json`` and ``matrix.html`` (every
configuration against the baseline, via the comparison page).

docs/guide.md, "Compare serving configurations" → "The matrix file", has the file format.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import tomllib
from rich.console import Console
from rich.markup import escape

from loadgen.client.dialects import get_dialect
from loadgen.client.discovery import normalize_url, split_credentials
from loadgen.errors import ConfigError, LoadgenError
from loadgen.inputs import InputError, open_input
from loadgen.load.profiles import Profile, check_limits, load_profile, profile_from_dict, with_budget
from loadgen.metrics.results import RunSummary
from loadgen.metrics.slo import parse_slo
from loadgen.orchestrate.config import DashboardAt, Origin, RunConfig
from loadgen.orchestrate.execution import execute
from loadgen.paths import search_dirs
from loadgen.workload.spec import Workload, load_workload, workload_from_flags

__all__ = ["MATRIX_FILE", "MatrixSpec", "ServerConfig", "load_matrix", "run_matrix"]

MATRIX_FILE = "matrix.json"
_TOP = {"name", "description", "baseline", "server", "grid", "configs", "run"}
_SERVER = {"command", "url", "health_timeout_s", "stop_grace_s"}
_RUN = {
    "api",
    "workload",
    "prompt_tokens",
    "output_tokens",
    "slos",
    "profile",
    "seed",
    "model",
    "trials",
    "api_key_env",
    "header_env",
}


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """One configuration: its name and parameters (label -> value substituted)."""

    name: str
    params: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class MatrixSpec:
    """A validated matrix file."""

    name: str
    source: str
    configs: list[ServerConfig]
    baseline: str
    command: str | None
    url: str | None
    health_timeout_s: float
    stop_grace_s: float
    api: str
    workload: Workload
    profile: Profile
    slos: list[str]
    seed: int = 0
    model: str | None = None
    description: str = ""
    trials: int = 1
    api_key_env: str | None = None  # the variable holding a key, sent as the dialect says (OpenAI: Bearer)
    header_env: dict[str, str] = field(default_factory=dict)  # header name -> the variable holding its value


def _err(source: str, key: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: {key}: {message}")


def _check_keys(table: Any, allowed: set[str], source: str, where: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise _err(source, where, f"must be a table with keys: {', '.join(sorted(allowed))}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise _err(
            source,
            f"{where}.{unknown[0]}" if where else unknown[0],
            f"unknown key; allowed: {', '.join(sorted(allowed))}",
        )
    return table


def _values(name: str, value: Any, source: str) -> list[tuple[str, str]]:
    """A grid axis as ``(label, value)`` pairs: a list of scalars or a table label = value."""
    if isinstance(value, dict) and value:
        pairs = list(value.items())
    elif isinstance(value, list) and value:
        pairs = [(str(v), v) for v in value]
    else:
        raise _err(source, f"grid.{name}", "must be a non-empty list or a table of label = value")
    out = []
    for label, v in pairs:
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise _err(source, f"grid.{name}", f"values must be strings or numbers, got {v!r}")
        out.append((str(label), str(v)))
    return out


def _configs(data: dict[str, Any], source: str) -> list[ServerConfig]:
    if "grid" in data and "configs" in data:
        raise _err(source, "grid", "give either [grid] or [[configs]], not both")
    if "grid" in data:
        grid = data["grid"]
        if not isinstance(grid, dict) or not grid:
            raise _err(source, "grid", "needs at least one parameter")
        axes = [(name, _values(name, value, source)) for name, value in grid.items()]
        out = []
        for combo in itertools.product(*(vals for _, vals in axes)):
            labels = {name: label for (name, _), (label, _) in zip(axes, combo)}
            params = {name: value for (name, _), (_, value) in zip(axes, combo)}
            out.append(ServerConfig(",".join(f"{k}={v}" for k, v in labels.items()), params, labels))
        return out
    if "configs" in data:
        entries = data["configs"]
        if not isinstance(entries, list) or not entries:
            raise _err(source, "configs", "must be a non-empty list of {name = ..., params = {...}}")
        out = []
        for i, entry in enumerate(entries):
            entry = _check_keys(entry, {"name", "params"}, source, f"configs[{i}]")
            name, params = entry.get("name"), entry.get("params", {})
            if not isinstance(name, str) or not name.strip():
                raise _err(source, f"configs[{i}].name", "must be a non-empty string")
            if not isinstance(params, dict):
                raise _err(source, f"configs[{i}].params", "must be a table")
            out.append(
                ServerConfig(
                    name.strip(), {k: str(v) for k, v in params.items()}, {k: str(v) for k, v in params.items()}
                )
            )
        return out
    return [ServerConfig("server")]


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.=," else "_" for c in name)[:120] or "config"


def load_matrix(path: Path, duration_s: float | None = None) -> MatrixSpec:
    """Read and validate a matrix file; every error names the file and the key.
    ``duration_s`` (``loadgen matrix --duration``) sets each level's length over the file's
    profile as ``loadgen run --duration`` does: no request cap."""
    source = str(path)
    try:
        with open_input(path) as fh:  # (a FIFO or a device: refused, not read)
            data = tomllib.loads(fh.read().decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such matrix file") from None
    except InputError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{source}: not a valid TOML file ({exc})") from None
    _check_keys(data, _TOP, source, "")
    server = _check_keys(data.get("server", {}), _SERVER, source, "server")
    command, url = server.get("command"), server.get("url")
    if (command is None) == (url is None):
        raise _err(source, "server", 'give either command = "..." or url = "..."')
    for key, value in (("command", command), ("url", url)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise _err(source, f"server.{key}", "must be a non-empty string")
    configs = _configs(data, source)
    if url is not None and len(configs) > 1:
        raise _err(source, "server.url", "a fixed URL is one configuration; use command = ... for a grid")
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise _err(source, "configs", "configuration names must be unique")
    if command is not None:
        for cfg in configs:
            try:
                _format(command, cfg, 0)
            except KeyError as exc:
                raise _err(source, "server.command", f"uses {{{exc.args[0]}}}, which no parameter gives") from None
            except ValueError as exc:  # shlex: an unbalanced quote, in the command or a parameter's value
                raise _err(
                    source,
                    "server.command",
                    f"configuration {cfg.name!r} does not split into arguments "
                    f"({exc}); check the quotes in its parameters {cfg.params}",
                ) from None
    timeouts = {}
    for key, default in (("health_timeout_s", 60.0), ("stop_grace_s", 10.0)):
        value = server.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
            raise _err(source, f"server.{key}", f"must be seconds in (0, 3600], got {value!r}")
        timeouts[key] = float(value)
    baseline = data.get("baseline", names[0])
    if baseline not in names:
        raise _err(source, "baseline", f"{baseline!r} is not a configuration; valid: {', '.join(names)}")
    run = _check_keys(data.get("run", {}), _RUN, source, "run")
    if "workload" in run and ("prompt_tokens" in run or "output_tokens" in run):
        raise _err(source, "run.workload", "give either workload or prompt_tokens/output_tokens")
    if "prompt_tokens" in run or "output_tokens" in run:
        workload = workload_from_flags(str(run.get("prompt_tokens", "256")), str(run.get("output_tokens", "128")))
    else:
        workload = load_workload(str(run.get("workload", "chat")), search_dirs("workloads"))
    prof_data = run.get("profile")
    if isinstance(prof_data, str):
        profile = load_profile(prof_data, search_dirs("profiles"))
    elif isinstance(prof_data, dict):
        profile = profile_from_dict(prof_data, f"{source} [run.profile]")
    else:
        raise _err(source, "run.profile", "give a profile's name or a [run.profile] table")
    if duration_s is not None:
        profile = with_budget(profile, None, duration_s)
        profile.validate({"duration_s": "--duration"})
        check_limits(profile, {"duration_s": "--duration"})
    slos = run.get("slos", profile.slos)
    if not isinstance(slos, list) or not all(isinstance(s, str) for s in slos):
        raise _err(source, "run.slos", 'must be a list of strings like ["ttft=500ms"]')
    for s in slos:
        parse_slo(s)
    api, seed, model = run.get("api", "chat"), run.get("seed", 0), run.get("model")
    if model is not None and not isinstance(model, str):
        raise _err(source, "run.model", "must be a string")
    key_env = run.get("api_key_env")
    if key_env is not None and (not isinstance(key_env, str) or not key_env):
        raise _err(source, "run.api_key_env", "must be the name of an environment variable")
    header_env = run.get("header_env", {})
    if not isinstance(header_env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in header_env.items()
    ):
        raise _err(source, "run.header_env", 'must be a table of header name = "ENV_VARIABLE"')
    trials = run.get("trials", 1)
    spec = MatrixSpec(
        name=str(data.get("name", Path(path).stem)),
        source=source,
        configs=configs,
        baseline=baseline,
        command=command,
        url=url,
        api=api,
        workload=workload,
        profile=profile,
        slos=list(slos),
        seed=seed,
        model=model,
        description=str(data.get("description", "")),
        trials=trials,
        api_key_env=key_env,
        header_env=dict(header_env),
        **timeouts,
    )
    run_config(spec, url or "http://127.0.0.1", {}, Path("."), "check")  # the [run] table's values, checked now
    return spec


_ORIGIN_KEYS = {
    "api": "run.api",
    "seed": "run.seed",
    "model": "run.model",
    "trials": "run.trials",
    "slos": "run.slos",
    "headers": "run.header_env",
}


def run_config(
    spec: MatrixSpec, url: str, headers: dict[str, str], out: Path, label: str, dashboard: DashboardAt | None = None
) -> RunConfig:
    """One configuration's run: the matrix's ``[run]`` table against ``url``; an error names
    the file and its key (``m.toml: run.trials: ...``)."""
    base, url_auth = split_credentials(normalize_url(url))  # a fixed URL's password: a header
    return RunConfig(
        url=base,
        api=spec.api,
        headers={**url_auth, **headers},
        workload=spec.workload,
        profile=spec.profile,
        out=out,
        model=spec.model,
        slos=[parse_slo(s) for s in spec.slos],
        seed=spec.seed,
        label=label,
        command=["loadgen", "matrix", spec.source],
        live=False,
        scrape_metrics=True,
        trials=spec.trials,
        dashboard=dashboard,
        origin=Origin(source=spec.source, keys=_ORIGIN_KEYS),
    )


def _format(template: str, cfg: ServerConfig, port: int) -> list[str]:
    text = template.format_map({**cfg.params, "port": port})
    argv = shlex.split(text)
    if argv and argv[0] == "loadgen":  # this installation's loadgen, found without PATH
        argv = [sys.executable, "-m", "loadgen", *argv[1:]]
    return argv


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _Server:
    """A configuration's server process: its own process group, output in ``log``."""

    def __init__(self, argv: list[str], log: Path, url: str) -> None:
        self.argv, self.log_path, self.url = argv, log, url
        self.log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )

    def wait_healthy(self, timeout_s: float) -> str | None:
        """None once ``/health`` answers 200, else why not (exited, timed out)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                return f"the server exited with code {code} before it was healthy (see server.log)"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return None
            time.sleep(0.2)
        return f"no healthy /health within {timeout_s:g} s (see server.log)"

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM to the group, SIGKILL after ``grace_s``; the exit code."""
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(grace_s)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait(10)
            return self.proc.returncode
        finally:
            self.log.close()


def _headline(summary: RunSummary) -> dict[str, Any]:
    levels = []
    for lv in summary.levels:
        levels.append(
            {
                "load": lv.load.to_json(),
                "ok": lv.requests.ok,
                "failed": lv.requests.failed,
                "ttft_ms_p50": lv.ttft_ms.p50,
                "ttft_ms_p99": lv.ttft_ms.p99,
                "itl_ms_p99": lv.itl_ms.p99,
                "tpot_ms_p50": lv.tpot_ms.p50,
                "output_tokens_per_s": lv.throughput.output_tokens_per_s,
                "slo_attainment": lv.goodput.slo_attainment,
                "goodput_rps": lv.goodput.requests_per_s,
            }
        )
    cap = summary.capacity
    return {"levels": levels, "capacity": None if cap is None else cap.to_json()}


def _headers(spec: MatrixSpec) -> dict[str, str]:
    """The secrets a matrix sends, read from the environment (never from its file)."""
    headers: dict[str, str] = {}
    for name, var in spec.header_env.items():
        if var not in os.environ:
            raise ConfigError(f"{spec.source}: run.header_env.{name}: the variable {var} is not set")
        headers[name] = os.environ[var]
    if spec.api_key_env is not None:
        if spec.api_key_env not in os.environ:
            raise ConfigError(f"{spec.source}: run.api_key_env: the variable {spec.api_key_env} is not set")
        headers.update(get_dialect(spec.api).auth_headers(os.environ[spec.api_key_env]))
    return headers


def run_matrix(
    spec: MatrixSpec,
    out: Path,
    console: Console,
    *,
    run_one: Callable[[RunConfig, Console], Any] = execute,
    dashboard: DashboardAt | None = None,
) -> dict[str, Any]:
    """Run every configuration of ``spec`` into ``out``; write and return ``matrix.json``.
    With ``dashboard``, each configuration's run serves its live page at one address in
    turn (a port 0 is chosen once), so one open page follows the whole matrix."""
    out = Path(out)
    if dashboard is not None and dashboard.port == 0:
        dashboard = replace(dashboard, port=_free_port())
    secrets = _headers(spec)  # before anything starts: a missing variable is one line
    if out.exists() and any(out.iterdir()) and not (out / MATRIX_FILE).exists():
        raise ConfigError(f"{out} exists and is not a matrix folder; give an empty or new folder", field="out")
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    entries: list[dict[str, Any]] = []
    doc: dict[str, Any] = {
        "name": spec.name,
        "source": spec.source,
        "baseline": spec.baseline,
        "description": spec.description,
        "configs": entries,
    }
    for i, cfg in enumerate(spec.configs):
        folder = out / _safe_name(cfg.name)
        if folder.exists():
            raise ConfigError(f"{folder} exists: give a new --out folder for a new matrix", field="out")
        folder.mkdir(parents=True)
        entry: dict[str, Any] = {"name": cfg.name, "params": cfg.labels, "folder": folder.name, "status": "pending"}
        entries.append(entry)
        console.print(f"[bold]{i + 1}/{len(spec.configs)} {escape(cfg.name)}[/bold]", highlight=False)
        t0 = time.monotonic()
        server: _Server | None = None
        url = spec.url
        try:
            if spec.command is not None:
                port = _free_port()
                argv = _format(spec.command, cfg, port)
                entry["command"] = shlex.join(argv)
                url = f"http://127.0.0.1:{port}"
                try:
                    server = _Server(argv, folder / "server.log", url)
                except OSError as exc:
                    entry.update(status="failed_to_start", error=f"could not start the server: {exc}")
                    continue
                why = server.wait_healthy(spec.health_timeout_s)
                if why is not None:
                    entry.update(status="failed_to_start", error=why)
                    continue
            assert url is not None
            run_cfg = run_config(spec, url, secrets, folder / "run", cfg.name, dashboard)
            try:
                outcome = run_one(run_cfg, console)
            except LoadgenError as exc:  # the target refused (discovery, calibration): go on
                entry.update(status="run_failed", error=str(exc))
                continue
            entry["run"] = "run"
            entry["summary"] = _headline(outcome.summary)
            died = server is not None and server.proc.poll() is not None
            if outcome.interrupted or outcome.signum:
                entry["status"] = "interrupted"
                entry["signal"] = outcome.signum  # SIGINT or SIGTERM: the exit code follows it
                break
            entry["status"] = "server_died" if died else "ok"
            if died:
                assert server is not None
                entry["error"] = f"the server exited with code {server.proc.returncode} during the run"
        finally:
            if server is not None:
                entry["server_exit_code"] = server.stop(spec.stop_grace_s)
            entry["wall_s"] = round(time.monotonic() - t0, 2)
            (out / MATRIX_FILE).write_text(json.dumps(doc, indent=2) + "\n")
            if entry["status"] not in ("ok", "pending"):
                console.print(
                    f"[yellow]{escape(cfg.name)}: {entry['status']}: {escape(str(entry.get('error', '')))}[/yellow]",
                    highlight=False,
                )
    doc["wall_s"] = round(time.monotonic() - started, 2)
    doc["html"] = _render(out, spec, entries, console)
    (out / MATRIX_FILE).write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def _render(out: Path, spec: MatrixSpec, entries: list[dict[str, Any]], console: Console) -> str | None:
    """``matrix.html``: the configurations that ran, the baseline first, compared."""
    from loadgen.report.compare import render_comparison

    done = [e for e in entries if "run" in e]
    base = [e for e in done if e["name"] == spec.baseline]
    if not base:
        console.print(f"[yellow]the baseline {escape(spec.baseline)} did not run: no matrix.html[/yellow]")
        return None
    ordered = base + [e for e in done if e["name"] != spec.baseline]
    if len(ordered) < 2:
        return None
    page = render_comparison(
        [out / e["folder"] / "run" for e in ordered], out / "matrix.html", labels=[e["name"] for e in ordered]
    )
    return page.name


def with_profile(spec: MatrixSpec, **changes: Any) -> MatrixSpec:
    """``spec`` with its profile's fields replaced (tests and quick runs)."""
    return replace(spec, profile=replace(spec.profile, **changes))
