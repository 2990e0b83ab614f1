"""The client's one configuration: :class:`RunConfig`, checked once, handed down whole.

Every way of starting a run builds one: the ``loadgen run`` flags
(:mod:`loadgen.orchestrate.from_flags`), a ``--config`` file, ``--resume`` (:mod:`loadgen.orchestrate.recover`), a
matrix file (:mod:`loadgen.orchestrate.matrix`), the demo and the Python API (:func:`loadgen.run`).
``RunConfig.__post_init__`` checks every field, and the profile's own
:meth:`~loadgen.load.profiles.Profile.validate`, so no builder can skip a rule or repeat
one. An error is one :class:`~loadgen.errors.ConfigError` that names what the user wrote:
the flag (``--timeout: ...``), the file and its key (``matrix.toml: run.trials: ...``), or
the field's name when the config was built in Python; :class:`Origin` says which.

The config is frozen: a builder that needs a variant uses :func:`dataclasses.replace`,
which checks the new one again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from loadgen.errors import ConfigError
from loadgen.load.profiles import Profile
from loadgen.metrics.gates import Gates
from loadgen.metrics.slo import SLO
from loadgen.records import MAX_LEVEL_S
from loadgen.workload.agent_trace import AgentTrace
from loadgen.workload.distributions import Distribution
from loadgen.workload.spec import Workload
from loadgen.workload.traces import Trace

if TYPE_CHECKING:
    from loadgen.load.runner import LevelPlan
    from loadgen.load.sweeps import Sweep
    from loadgen.metrics.results import LevelSummary
    from loadgen.runinfo import RunInfo

__all__ = [
    "DEFAULT_TRANSPORT",
    "MAX_TRIALS",
    "MAX_WORKERS",
    "DashboardAt",
    "Origin",
    "Resume",
    "RunConfig",
    "check_dashboard",
]

MAX_TRIALS = 100  # --trials: repeats of one level
MAX_WORKERS = 1024  # --workers: processes or Ray actors that send
DEFAULT_TRANSPORT = "fast"  # HTTP/1.1 on httptools (loadgen/client/transports/fast.py); aiohttp and httpx on request


@dataclass
class Resume:
    """A run continued in its own folder from its first unfinished level (``--resume``;
    see :mod:`loadgen.orchestrate.recover`): the sweep, fed the finished levels' summaries, and the
    plan of the level to run next."""

    run: RunInfo  # the folder's run.json
    gen: Sweep
    plan: LevelPlan
    levels: list[LevelSummary]


@dataclass(frozen=True)
class Origin:
    """Where a config's values came from, so that an error names them as the user wrote
    them: ``keys`` maps a field (``request_timeout_s``) or a profile field
    (``profile.levels``) to a flag or a file key; ``source`` is the file, if any."""

    source: str | None = None
    keys: Mapping[str, str] = field(default_factory=dict)

    def key(self, name: str) -> str:
        return self.keys.get(name, name)

    def error(self, name: str, message: str) -> ConfigError:
        return ConfigError(message, source=self.source, key=self.key(name))

    def profile_keys(self) -> dict[str, str]:
        """The profile fields' names, as :meth:`Profile.validate` takes them."""
        return {k.removeprefix("profile."): v for k, v in self.keys.items() if k.startswith("profile.")}


@dataclass(frozen=True)
class DashboardAt:
    """Where the live dashboard listens (``--dashboard``): loopback unless asked; off
    loopback its every URL needs the token the console prints. Port 0: any free port."""

    host: str = "127.0.0.1"
    port: int = 8089


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs, checked on construction. ``headers`` may hold secrets and
    is never written (run.json keeps their names only)."""

    url: str  # the server's base URL, e.g. http://127.0.0.1:8000 (credentials go in headers)
    api: str  # a dialect's name (loadgen.client.dialects)
    workload: Workload
    profile: Profile
    out: Path  # the run folder
    model: str | None = None  # None: the first of /v1/models
    slos: list[SLO] = field(default_factory=list)
    seed: int = 0
    # the prompt text's per-run salt (docs: workloads/README.md, "Prompt text and calibration"):
    # None draws a fresh one when the run starts; repeat_prompts sends the unsalted text of the seed
    prompt_salt: int | None = None
    repeat_prompts: bool = False
    transport: str = DEFAULT_TRANSPORT  # "fast"; --http2 needs httpx
    http2: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    strict: bool = False
    continuous_usage: bool = False
    inputs: Distribution | None = None  # non-streamed APIs: inputs per request (--batch-size, --documents); None: 1
    calibrate: bool = True
    read_timeout_s: float = 120.0
    request_timeout_s: float = 600.0
    label: str = ""
    command: list[str] = field(default_factory=list)
    live: bool = True
    scrape_metrics: bool = False  # poll the target's /metrics into server_metrics.jsonl
    scrape_urls: list[str] = field(default_factory=list)  # other Prometheus endpoints read with it (DCGM)
    workers: int | str = "auto"  # worker processes that send (the coordinator sends nothing), or "auto"
    ray: str | None = None  # workers are Ray actors of this cluster ("auto" or an address) instead
    gates: Gates = field(default_factory=Gates)  # --fail-on: what makes the run fail (exit code)
    abort_on_fail: bool = False  # stop the sweep at the first level that fails a gate
    trials: int = 1  # each level runs this many times (its own requests, arrival seed + i)
    resume: Resume | None = None  # continue the run in ``out`` instead of starting one
    tokenizer: Path | None = None  # a tokenizer.json: exact prompt lengths (else calibrated words)
    trace: Trace | None = None  # replay this trace's rows at their recorded times (one open-loop level)
    agent_trace: AgentTrace | None = None  # replay this agent trace's tasks (open loop at their starts, or closed)
    warm_connections: bool = True  # open each level's connections before its clock starts
    ramp_up_s: float = 0.0  # closed loop: users join evenly over this many seconds, left out of the measured window
    dashboard: DashboardAt | None = None  # serve the live page while the run goes on (None: no page)
    origin: Origin = field(default_factory=Origin, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.out, str):  # the Python API may give a string
            object.__setattr__(self, "out", Path(self.out))
        self.validate()

    def validate(self) -> None:
        """Raise :class:`ConfigError` for the first invalid field (see the module docstring)."""
        o = self.origin
        _check_url(self.url, "url", o)
        from loadgen.client.dialects import get_dialect
        from loadgen.client.transports import TRANSPORTS

        try:
            get_dialect(self.api)
        except ConfigError as exc:
            raise o.error("api", str(exc).split(": ", 1)[-1]) from None
        if self.transport not in TRANSPORTS:
            raise o.error("transport", f"unknown transport {self.transport!r}; choose one of: {', '.join(TRANSPORTS)}")
        if self.http2 and self.transport != "httpx":
            raise o.error("http2", "HTTP/2 needs the httpx transport (--transport httpx)")
        for name in ("read_timeout_s", "request_timeout_s"):
            seconds = getattr(self, name)
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf:
                raise o.error(name, f"must be a number of seconds > 0, got {seconds!r}")
        if not isinstance(self.warm_connections, bool):
            raise o.error("warm_connections", f"must be true or false, got {self.warm_connections!r}")
        ramp = self.ramp_up_s
        if isinstance(ramp, bool) or not isinstance(ramp, (int, float)) or not 0 <= ramp <= MAX_LEVEL_S:
            raise o.error("ramp_up_s", f"must be a number of seconds in [0, {MAX_LEVEL_S}], got {ramp!r}")
        if ramp and self.profile.mode != "concurrency":
            raise o.error("ramp_up_s", "spreads closed-loop users: it needs a concurrency profile (--concurrency)")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise o.error("seed", f"must be an integer, got {self.seed!r}")
        salt = self.prompt_salt
        if salt is not None and (isinstance(salt, bool) or not isinstance(salt, int) or not 0 < salt < 1 << 64):
            raise o.error("prompt_salt", f"must be a 64-bit whole number > 0, got {salt!r}")
        if not isinstance(self.repeat_prompts, bool):
            raise o.error("repeat_prompts", f"must be true or false, got {self.repeat_prompts!r}")
        if self.repeat_prompts and salt is not None:
            raise o.error("prompt_salt", "give a prompt salt or repeat the prompts unsalted, not both")
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or not 1 <= self.trials <= MAX_TRIALS:
            raise o.error("trials", f"must be an integer in [1, {MAX_TRIALS}], got {self.trials!r}")
        _check_workers(self.workers, o)
        check_dashboard(self.dashboard, o)
        if self.ray is not None and not (isinstance(self.ray, str) and self.ray.strip()):
            raise o.error("ray", "give auto or a Ray cluster's address")
        if not str(self.out).strip():
            raise o.error("out", "give a folder")
        if not all(isinstance(s, SLO) for s in self.slos):
            raise o.error("slos", "must be SLO objects (loadgen.metrics.slo.parse_slo)")
        for url in self.scrape_urls:
            _check_url(url, "scrape_urls", o, example="http://127.0.0.1:9400/metrics")
        _check_headers(self.headers, o)
        _check_gates(self.gates, o)
        if (self.workload.tools is not None or self.workload.agent is not None) and not get_dialect(self.api).tools:
            from loadgen.client.dialects import dialect_names

            takes = _either(n for n in dialect_names() if get_dialect(n).tools)
            what = "is an agent's (tool calls)" if self.workload.agent is not None else "sends tools"
            raise o.error("api", f"workload {self.workload.name!r} {what}: they need the {takes} API")
        if self.workload.images is not None and not get_dialect(self.api).images:
            from loadgen.client.dialects import dialect_names

            takes = _either(n for n in dialect_names() if get_dialect(n).images)
            raise o.error("api", f"workload {self.workload.name!r} sends images: they need the {takes} API")
        if self.inputs is not None and get_dialect(self.api).streams:
            raise o.error("inputs", f"inputs per request are for the non-streamed APIs, not {self.api}")
        if self.trace is not None and self.profile.arrival != "trace":
            raise o.error("trace", "a trace replays with the profile of its own times (arrival = 'trace')")
        if self.agent_trace is not None:
            _check_agent_trace(self.agent_trace, self, o)
        self.profile.validate(o.profile_keys())
        if self.profile.precision and self.ray is not None:
            raise o.error("profile.precision", "not with --ray yet (Ray actors cannot be told to end a level early)")


def _check_agent_trace(trace: AgentTrace, cfg: RunConfig, o: Origin) -> None:
    """An agent-trace replay: one level, open loop at the tasks' starts or closed, and an API with tools."""
    from loadgen.client.dialects import dialect_names, get_dialect

    if cfg.trace is not None:
        raise o.error("agent_trace", "replay a request trace or an agent trace, not both")
    if not get_dialect(cfg.api).tools:
        takes = _either(n for n in dialect_names() if get_dialect(n).tools)
        raise o.error("api", f"an agent trace's calls are tool calls: they need the {takes} API")
    prof = cfg.profile
    if prof.kind != "levels" or len(prof.levels) != 1:
        raise o.error("profile", "an agent trace replays as one level")
    if prof.mode == "rate" and (prof.arrival != "trace" or trace.offsets is None):
        raise o.error(
            "profile", "an open-loop agent-trace replay runs at the tasks' recorded starts (arrival = 'trace')"
        )


def check_dashboard(at: DashboardAt | None, o: Origin) -> None:
    """A dashboard's address: a port in [0, 65535], a host without blanks or URL parts."""
    if at is None:
        return
    if not isinstance(at, DashboardAt):
        raise o.error("dashboard", f"must be a DashboardAt(host, port) or None, got {at!r}")
    if isinstance(at.port, bool) or not isinstance(at.port, int) or not 0 <= at.port <= 65535:
        raise o.error("dashboard", f"port must be an integer in [0, 65535] (0: any free port), got {at.port!r}")
    if not isinstance(at.host, str) or not at.host.strip() or any(c.isspace() or c in "/@?#" for c in at.host):
        raise o.error("dashboard", f"host must be an interface's address or name, got {at.host!r}")


def _either(names: Iterable[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    names = list(names)
    return " or ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " or " + names[-1]


def _check_url(url: object, name: str, o: Origin, example: str = "http://127.0.0.1:8000") -> None:
    ok = False
    if isinstance(url, str):
        try:
            parts = urlsplit(url.strip())
            parts.port  # noqa: B018 - raises on a port that is not 0-65535
            ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            pass
    if not ok:
        from loadgen.client.redact import redact_url

        shown = redact_url(url) if isinstance(url, str) else repr(url)
        raise o.error(name, f"expected an http(s) URL such as {example}, got {shown!r}")


def _check_workers(workers: object, o: Origin) -> None:
    if workers == "auto":
        return
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise o.error("workers", f"must be a whole number in [1, {MAX_WORKERS}] or 'auto', got {workers!r}")


def _check_headers(headers: Mapping[str, str], o: Origin) -> None:
    for name, value in headers.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise o.error("headers", "names and values must be strings")
        if not name or " " in name or any(c in name + value for c in "\r\n\x00"):
            raise o.error("headers", f"invalid header {name[:40]!r} (a name without spaces, no line breaks)")


def _check_gates(gates: Gates, o: Origin) -> None:
    from loadgen.metrics.gates import GATES

    unknown = sorted(set(gates.reasons) - set(GATES))
    if unknown:
        raise o.error("gates", f"unknown gate {unknown[0]!r}; choose from: {', '.join(GATES)}")
    rate = gates.max_error_rate
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate < 1.0:
        raise o.error("max_error_rate", f"must be a share in [0, 1), got {rate!r}")
