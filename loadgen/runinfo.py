"""The typed run record: ``run.json`` is the serialisation of a :class:`RunInfo`.

A run writes its record when it starts (what it runs against and how), again after each
Ray clock estimate (``workers``) and when it ends (``finished``); ``--resume`` appends to
``resumed``. Readers (``--resume``, ``--config``, ``loadgen report``, :mod:`loadgen.orchestrate.recover`)
read attributes of the record, never string paths into the file's dict.

``to_json()`` writes the keys loadgen has always written, plus ``schema_version``
(:data:`RUN_SCHEMA_VERSION`). ``from_json()`` reads files of earlier versions too (no
``schema_version``; a key they did not write takes its default) and ignores keys it does
not know; a value of the wrong kind raises :class:`~loadgen.errors.ConfigError` naming its
key path, e.g. ``run.json: config.workers: must be a whole number in [1, 1024] or "auto",
got -3``. Fields marked ``omit_none`` are left out of the file when ``None``.
:func:`run_schema` is the JSON Schema of the file, generated from these dataclasses.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union

from loadgen.errors import ConfigError
from loadgen.load.precision import Spec, parse_target
from loadgen.load.profiles import KINDS, MODES, Profile
from loadgen.metrics.results import encode_json
from loadgen.metrics.schema import json_schema

__all__ = [
    "MAX_WORKERS",
    "RUN_SCHEMA_VERSION",
    "Calibration",
    "ClassInfo",
    "ClientConfig",
    "ClockAnchor",
    "ClockEstimate",
    "DatasetInfo",
    "Finished",
    "ImagesInfo",
    "Machine",
    "Resumed",
    "RunInfo",
    "SessionsInfo",
    "Target",
    "TraceInfo",
    "WorkerClock",
    "WorkloadInfo",
    "run_schema",
]

RUN_SCHEMA_VERSION = 1
MAX_WORKERS = 1024  # --workers: at most this many processes

T = TypeVar("T")
_OMIT = {"omit_none": True}
_REQUIRED = {"required": True}


class _Invalid(ValueError):
    """A bad value at ``key`` (a path relative to where it was found)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _kind(value: Any) -> str:
    return (
        "null" if value is None else repr(value) if isinstance(value, (bool, int, float, str)) else type(value).__name__
    )


def _decode(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None and len(args) < len(typing.get_args(tp)):
            return None
        for arg in args:
            try:
                return _decode(arg, value, where)
            except _Invalid:
                if len(args) == 1:
                    raise
        raise _Invalid(where, f"expected {' or '.join(_name(a) for a in args)}, got {_kind(value)}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise _Invalid(where, f"expected a list, got {_kind(value)}")
        items = typing.get_args(tp)
        if origin is list or items[-1] is Ellipsis:
            return (list if origin is list else tuple)(
                _decode(items[0], v, f"{where}[{i}]") for i, v in enumerate(value)
            )
        if len(value) != len(items):
            raise _Invalid(where, f"expected a list of {len(items)}, got {len(value)} items")
        return tuple(_decode(t, v, f"{where}[{i}]") for i, (t, v) in enumerate(zip(items, value)))
    if origin is dict:
        _, item = typing.get_args(tp)
        if not isinstance(value, dict):
            raise _Invalid(where, f"expected an object, got {_kind(value)}")
        return {str(k): _decode(item, v, _join(where, str(k))) for k, v in value.items()}
    if tp is Spec:  # a precision target, written as its text
        if not isinstance(value, str):
            raise _Invalid(where, f"expected a string, got {_kind(value)}")
        try:
            return parse_target(value)
        except ValueError as exc:
            raise _Invalid(where, str(exc)) from None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _from_dict(tp, value, where)
    want = {float: (int, float), int: (int,), bool: (bool,), str: (str,)}.get(tp)
    if want is None:
        return value  # Any
    if not isinstance(value, want) or (tp is not bool and isinstance(value, bool)):
        raise _Invalid(where, f"expected {_name(tp)}, got {_kind(value)}")
    return float(value) if tp is float else value


def _name(tp: Any) -> str:
    names = {float: "a number", int: "a whole number", bool: "true or false", str: "a string"}
    return names.get(tp, "an object" if dataclasses.is_dataclass(tp) else "a list")


_HINTS: dict[type, dict[str, Any]] = {}


def _from_dict(cls: type[T], data: Any, where: str) -> T:
    if not isinstance(data, dict):
        raise _Invalid(where, f"expected an object, got {_kind(data)}")
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            no_default = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            if no_default or f.metadata.get("required"):
                raise _Invalid(_join(where, f.name), "missing")
            continue
        kwargs[f.name] = _decode(hints[f.name], data[f.name], _join(where, f.name))
    try:
        out = cls(**kwargs)
    except _Invalid as exc:  # a dataclass's own check: its key, under where
        raise _Invalid(_join(where, exc.key), exc.message) from None
    if cls is Profile:
        _check_profile(out, where)
    return out


def _check_profile(prof: Any, where: str) -> None:
    if prof.kind not in KINDS:
        raise _Invalid(_join(where, "kind"), f"unknown kind {prof.kind!r}; allowed: {', '.join(KINDS)}")
    if prof.mode not in MODES:
        raise _Invalid(_join(where, "mode"), f"unknown mode {prof.mode!r}; allowed: {', '.join(MODES)}")


class _Record:
    """``to_json``/``from_json`` for the dataclasses below."""

    __slots__ = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN and infinities as ``None``; ``omit_none`` fields left out when ``None``)."""
        out: dict[str, Any] = encode_json(self)
        return out

    @classmethod
    def from_json(cls: type[T], data: Any, source: str = "run.json") -> T:
        """The inverse of :meth:`to_json`; raises :class:`ConfigError` naming ``source`` and the bad key."""
        try:
            return _from_dict(cls, data, "")
        except _Invalid as exc:
            raise ConfigError(exc.message, source=source, key=exc.key or None) from None


@dataclass(frozen=True, slots=True)
class ClockAnchor(_Record):
    """The run's one wall-clock anchor: ``time.time()`` and ``perf_counter_ns()`` read together."""

    unix_s: float
    perf_counter_ns: int


@dataclass(frozen=True, slots=True)
class Target(_Record):
    """The server: its URL without credentials or query string, API dialect, model, context length."""

    url: str
    api: str = "chat"
    model: str | None = None
    max_model_len: int | None = None


@dataclass(frozen=True, slots=True)
class ClassInfo(_Record):
    """One request class; each length distribution as text that parses back to it."""

    name: str
    weight: float
    prompt_tokens: str
    output_tokens: str
    shared_prefix_groups: int = 0
    shared_prefix_tokens: int = 0


@dataclass(frozen=True, slots=True)
class SessionsInfo(_Record):
    """A workload's ``[sessions]`` table (distributions as text)."""

    turns: str
    think_time_ms: str | None = None
    system_prompt_tokens: int = 0
    groups: int = 1
    zipf: float = 1.0


@dataclass(frozen=True, slots=True)
class DatasetInfo(_Record):
    """A dataset replay: how it was read, and (once measured) how many entries it kept."""

    path: str
    format: str = "auto"
    min_prompt_tokens: int | None = None
    max_prompt_tokens: int | None = None
    replacement: bool = False
    output_tokens: int | None = None
    image_root: str | None = field(default=None, metadata=_OMIT)  # the folder image references are relative to
    entries: int | None = field(default=None, metadata=_OMIT)
    file_entries: int | None = field(default=None, metadata=_OMIT)
    skipped_without_prompt: int | None = field(default=None, metadata=_OMIT)
    entries_with_images: int | None = field(default=None, metadata=_OMIT)  # entries that name their own images
    lengths: str | None = field(default=None, metadata=_OMIT)  # "exact" (a tokenizer) or "calibrated"


@dataclass(frozen=True, slots=True)
class ImagesInfo(_Record):
    """A workload's ``[images]`` table: ``count`` a request, and either synthesised
    ``width`` x ``height`` images of ``format`` or ``files`` (the globs, absolute; ``matched``
    files whose bytes hash to ``sha256``). Distributions as text that parses back."""

    count: str
    width: str | None = field(default=None, metadata=_OMIT)
    height: str | None = field(default=None, metadata=_OMIT)
    format: str | None = field(default=None, metadata=_OMIT)
    files: list[str] | None = field(default=None, metadata=_OMIT)
    matched: int | None = field(default=None, metadata=_OMIT)
    sha256: str | None = field(default=None, metadata=_OMIT)


@dataclass(frozen=True, slots=True)
class WorkloadInfo(_Record):
    """The workload the requests were drawn from; ``tools`` is how many tools were sent."""

    classes: list[ClassInfo]
    name: str = ""
    description: str = ""
    source: str = ""
    sessions: SessionsInfo | None = field(default=None, metadata=_OMIT)
    tools: int | None = field(default=None, metadata=_OMIT)
    dataset: DatasetInfo | None = field(default=None, metadata=_OMIT)
    images: ImagesInfo | None = field(default=None, metadata=_OMIT)
    overrides: list[str] | None = field(default=None, metadata=_OMIT)  # flags that set its lengths


@dataclass(frozen=True, slots=True)
class ClientConfig(_Record):
    """The client's settings (``header_names``: names only, values are never written)."""

    seed: int = 0
    # the prompts' per-run salt (16 hex digits); absent: the seed's unsalted prompts, the same every run
    prompt_salt: str | None = field(default=None, metadata=_OMIT)
    transport: str = "aiohttp"
    http2: bool = False
    strict: bool = False
    continuous_usage: bool = False
    inputs: str | None = field(default=None, metadata=_OMIT)  # non-streamed APIs: inputs per request (a distribution)
    read_timeout_s: float = 120.0
    request_timeout_s: float = 600.0
    header_names: list[str] = field(default_factory=list)
    workers: int | str = 1  # as asked: a number or "auto"
    workers_started: int | None = field(default=None, metadata=_OMIT)  # what the run started ("auto" resolved)
    ray: str | None = None
    trials: int = 1
    warm_connections: bool = True
    ramp_up_s: float = 0.0

    def __post_init__(self) -> None:
        w = self.workers
        if w != "auto" and (not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= MAX_WORKERS):
            raise _Invalid("workers", f'must be a whole number in [1, {MAX_WORKERS}] or "auto", got {_kind(w)}')
        salt = self.prompt_salt
        if salt is not None and not (len(salt) == 16 and all(c in "0123456789abcdef" for c in salt) and int(salt, 16)):
            raise _Invalid("prompt_salt", f"must be 16 hex digits, not all zero, got {salt!r}")
        if self.trials < 1:
            raise _Invalid("trials", f"must be a whole number >= 1, got {self.trials}")
        for name in ("read_timeout_s", "request_timeout_s"):
            if not getattr(self, name) > 0:
                raise _Invalid(name, f"must be a number > 0, got {getattr(self, name)}")


@dataclass(frozen=True, slots=True)
class Calibration(_Record):
    """The prompt-length fit: ``samples`` are ``(words, prompt tokens)`` pairs; ``method``
    ``"stream"`` or ``"non-stream"`` (None: not calibrated, ``reason`` says why)."""

    calibrated: bool = False
    method: str | None = None
    reason: str | None = field(default=None, metadata=_OMIT)
    samples: list[tuple[int, int]] | None = field(default=None, metadata=_OMIT)
    tokens_per_word: float | None = field(default=None, metadata=_OMIT)
    overhead_tokens: float | None = field(default=None, metadata=_OMIT)
    api: str | None = field(default=None, metadata=_OMIT)


@dataclass(frozen=True, slots=True)
class Machine(_Record):
    """The machine the client ran on, and the versions of loadgen and its main libraries."""

    hostname: str = ""
    platform: str = ""
    python: str = ""
    cpus: int | None = None
    versions: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClockEstimate(_Record):
    """One estimate of a Ray worker's clock offset, taken before ``level`` (None: at the start)."""

    offset_ns: int
    uncertainty_ns: int
    level: int | None = None


@dataclass(frozen=True, slots=True)
class WorkerClock(_Record):
    """A Ray worker: its node, its latest clock offset and uncertainty, every estimate taken."""

    worker: int
    node: str = ""
    address: str = ""
    offset_ns: int = 0
    uncertainty_ns: int = 0
    lost: str | None = None
    estimates: list[ClockEstimate] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TraceInfo(_Record):
    """A trace replay: the file, the rows kept of it and the spans and rate replayed. An
    agent trace (``format`` agent or aiperf) also names its ``tasks`` (its rows are its
    calls; spans are of the tasks' starts, None in a closed loop without them) and ``speed``."""

    path: str
    format: str
    rows: int = 0
    file_rows: int = 0
    recorded_span_s: float | None = None
    replay_span_s: float | None = None
    mean_rate: float | None = None
    tasks: int | None = field(default=None, metadata=_OMIT)
    speed: float | None = field(default=None, metadata=_OMIT)


@dataclass(frozen=True, slots=True)
class Resumed(_Record):
    """One ``--resume``: when, at which level (0-based), with which command line."""

    at: str
    level: int
    command: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Finished(_Record):
    """How the run ended (absent while it runs, or after a crash); ``level_stops``: why each
    level stopped, in order, where any level says (the level summaries' ``stopped``)."""

    interrupted: bool
    levels: int
    stopped: str | None = None
    level_stops: list[str | None] | None = field(
        default=None, metadata=_OMIT
    )  # each level's ``stopped`` (--precision, a trace's end...)


@dataclass(frozen=True, slots=True)
class RunInfo(_Record):
    """A run's record: ``run.json`` (see the module docstring). ``tool`` and ``profile`` are
    required in a file; the rest take their defaults when absent."""

    tool: str = field(default="loadgen", metadata=_REQUIRED)
    label: str = ""
    command: list[str] = field(default_factory=list)
    started_at: str | None = None
    clock_anchor: ClockAnchor | None = field(default=None, metadata=_OMIT)
    target: Target | None = field(default=None, metadata=_OMIT)
    workload: WorkloadInfo | None = field(default=None, metadata=_OMIT)
    profile: Profile = field(default_factory=Profile, metadata=_REQUIRED)
    slos: list[str] = field(default_factory=list)
    config: ClientConfig = field(default_factory=ClientConfig)
    calibration: Calibration | None = field(default=None, metadata=_OMIT)
    machine: Machine | None = field(default=None, metadata=_OMIT)
    tokenizer: str | None = field(default=None, metadata=_OMIT)
    trace: TraceInfo | None = field(default=None, metadata=_OMIT)
    workers: list[WorkerClock] | None = field(default=None, metadata=_OMIT)  # Ray workers' clocks
    resumed: list[Resumed] | None = field(default=None, metadata=_OMIT)
    finished: Finished | None = field(default=None, metadata=_OMIT)
    schema_version: int = RUN_SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.tool != "loadgen":
            raise _Invalid("tool", f'not a run.json written by loadgen (expected "loadgen", got {_kind(self.tool)})')

    @property
    def anchor_ns(self) -> int | None:
        """The run's time zero on the monotonic clock (None: the record has no anchor)."""
        return None if self.clock_anchor is None else self.clock_anchor.perf_counter_ns

    @property
    def complete(self) -> bool:
        """Whether the run ended on its own (``finished`` and not interrupted)."""
        return self.finished is not None and not self.finished.interrupted


def run_schema() -> dict[str, Any]:
    """The JSON Schema of ``run.json`` (this version's ``schema_version``)."""
    schema = json_schema(RunInfo, title=f"loadgen run.json, schema_version {RUN_SCHEMA_VERSION}")
    schema["properties"]["schema_version"] = {"const": RUN_SCHEMA_VERSION}
    schema["properties"]["tool"] = {"const": "loadgen"}
    schema["$defs"]["ClientConfig"]["properties"]["workers"] = {
        "anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_WORKERS}, {"const": "auto"}]
    }
    return schema
