"""Typed results: what :mod:`loadgen.metrics` returns and ``summary.json`` serialises.

A level's numbers are a :class:`LevelSummary`; a run's are a :class:`RunSummary` (its
levels, the capacity at the SLO target, the saturation knee, why it stopped). Each is a
tree of small frozen dataclasses with ``to_json()`` (a JSON-ready dict with the keys of
the ``summary.json`` contract) and ``from_json()`` (the inverse, for reading a run folder
back). Readers use attributes — ``level.ttft_ms.p99``, ``run.capacity.value`` — never
string paths into dicts; :meth:`LevelSummary.metric` resolves the one path a user
writes as text (a profile's ``knee_metric``, e.g. ``"ttft_ms.p99"``).

Field names equal the JSON keys except where a key is not an identifier (``p99_9`` is
``"p99.9"``, ``passed`` is ``"pass"``); fields marked ``omit_none`` are left out of the
JSON when ``None`` (``schedule`` of a closed-loop level, ``windows`` outside soak/ramp).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from loadgen.metrics._json import JSONRecord, encode_json, key
from loadgen.metrics.energy import LevelEnergy
from loadgen.metrics.rate_windows import RateWindow, StatInterval, WholeRates
from loadgen.metrics.verdicts import MlperfCheck, SteadyState
from loadgen.numfmt import fmt

__all__ = [
    "LOAD_MODES",
    "SCHEMA_VERSION",
    "Capacity",
    "Check",
    "ClassSummary",
    "ClientHealth",
    "Connections",
    "Distribution",
    "Events",
    "Goodput",
    "Images",
    "LagSeries",
    "Lengths",
    "LevelEnergy",
    "LevelSummary",
    "Load",
    "LoadMode",
    "NonStreamed",
    "RateWindow",
    "Reasoning",
    "Requests",
    "RunSummary",
    "Saturation",
    "Schedule",
    "Sessions",
    "StatInterval",
    "Steady",
    "TaskStep",
    "Tasks",
    "Throughput",
    "TrialStat",
    "Trials",
    "TurnSummary",
    "WholeRates",
    "Window",
    "WorkerHealth",
    "encode_json",
    "load_mode",
    "unit_label",
]

SCHEMA_VERSION = 3
"""2 added ``intervals`` (a :class:`StatInterval` per statistic) to the level's latency
distributions, throughput and goodput; a version 1 file reads as before (no intervals).
3 measures throughput's and goodput's rates over the window in which the load was held
(``throughput.window``) and keeps the whole window's beside them (``throughput.whole``,
``goodput.whole_requests_per_s``); a file before 3 reads with neither, its rates being
the whole window's (:meth:`Throughput.whole_rates` says so). 3 also adds a level's ``energy``
(mean power, energy per output token) when the server's power was scraped."""


@dataclass(frozen=True, slots=True)
class Distribution(JSONRecord):
    """Count, mean, std, min, percentiles and max of some samples (``None``s when empty).

    ``intervals`` (a level's TTFT, ITL, TPOT and E2E only) maps ``"mean"``, ``"p50"`` …
    ``"p99.9"`` to the interval of that statistic; ``None`` (absent from the JSON) elsewhere."""

    count: int = 0
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p99_9: float | None = field(default=None, metadata=key("p99_9", "p99.9"))
    max: float | None = None
    intervals: dict[str, StatInterval] | None = field(default=None, metadata=key("intervals", omit_none=True))

    def stat(self, name: str) -> float | None:
        """One statistic by its JSON name: ``"p50"``, ``"p99.9"``, ``"mean"``, ``"max"``…"""
        if name == "count":
            return float(self.count)
        attr = name.replace(".", "_")
        if attr not in _DIST_STATS:
            raise KeyError(f"unknown statistic {name!r} (allowed: {', '.join(sorted(_DIST_NAMES))})")
        value: float | None = getattr(self, attr)
        return value


_DIST_STATS = frozenset(f.name for f in dataclasses.fields(Distribution)) - {"count", "intervals"}
_DIST_NAMES = frozenset(f.metadata.get("json", f.name) for f in dataclasses.fields(Distribution)) - {"intervals"}


LoadMode = Literal["concurrency", "rate"]
"""How a level offers load: a closed loop of users (``"concurrency"``) or an open loop of
requests per second (``"rate"``). The strings are the JSON values of ``summary.json`` and
``run.json``; a misspelt mode is a type error."""
LOAD_MODES: tuple[LoadMode, ...] = get_args(LoadMode)


def load_mode(value: object) -> LoadMode:
    """``value`` as a :data:`LoadMode`; ValueError naming the allowed modes otherwise."""
    for mode in LOAD_MODES:
        if value == mode:
            return mode
    raise ValueError(f"unknown mode {value!r}; allowed: {', '.join(LOAD_MODES)}")


def unit_label(mode: LoadMode | None, value: float | None = None) -> str:
    """The unit of an offered load: ``"users"`` (``"user"`` for one) or ``"req/s"``."""
    if mode == "concurrency":
        return "user" if value == 1 else "users"
    return "req/s"


@dataclass(frozen=True, slots=True)
class Load(JSONRecord):
    """The offered load of a level: ``mode`` ``"concurrency"`` (users) or ``"rate"`` (req/s)."""

    mode: LoadMode
    value: int | float

    @property
    def unit(self) -> str:
        return unit_label(self.mode)

    def label(self) -> str:
        """``"16 users"``, ``"1 user"``, ``"12.5 req/s"``, ``"3.63 req/s"`` (by the one rule of
        :mod:`loadgen.numfmt`: 3 significant digits, so a rate sweep's ``3.6336`` stays short)."""
        return f"{fmt(self.value)} {unit_label(self.mode, self.value)}"


@dataclass(frozen=True, slots=True)
class Requests(JSONRecord):
    """Measured requests (warm-up excluded), the failed ones by error kind, and how many
    were sent again after the server closed their kept-alive connection unanswered
    (``retried``; see :mod:`loadgen.client.keepalive`), and the first message of each error kind."""

    total: int
    ok: int
    failed: int
    by_error: dict[str, int] = field(default_factory=dict)
    retried: int = 0
    # the first failed request's message of each error kind (the server's own words for an HTTP error)
    first_error: dict[str, str] | None = field(default=None, metadata=key("first_error", omit_none=True))

    @property
    def error_rate(self) -> float:
        return self.failed / self.total if self.total else 0.0


@dataclass(frozen=True, slots=True)
class Steady(JSONRecord):
    """Throughput over the steady-state window (warm-up and drain trimmed by time)."""

    window_s: float = 0.0
    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    total_tokens_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class Throughput(JSONRecord):
    """Successful requests and their tokens per second over the window in which the load
    was held (``window``; the headline), and over the whole window (``whole``).

    ``output_tokens_per_s_se``: the noise of ``output_tokens_per_s``, the standard error of
    the mean of its rate over ten equal time blocks of the steady window (None with no
    window).

    ``intervals``: ``"requests_per_s"`` and ``"output_tokens_per_s"`` with their
    intervals by batch means over equal time blocks of ``window``
    (:mod:`loadgen.metrics.level_intervals`). ``window`` and ``whole`` are ``None`` in
    files before schema version 3, whose rates are over the whole window."""

    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    total_tokens_per_s: float | None = None
    steady: Steady = field(default_factory=Steady)
    output_tokens_per_s_se: float | None = None
    intervals: dict[str, StatInterval] | None = field(default=None, metadata=key("intervals", omit_none=True))
    window: RateWindow | None = field(default=None, metadata=key("window", omit_none=True))
    whole: WholeRates | None = field(default=None, metadata=key("whole", omit_none=True))

    def whole_rates(self, duration_s: float) -> WholeRates:
        """The whole window's rates: ``whole``, or in a file before schema version 3 (no
        ``whole``) the headline itself, which was measured over the whole window
        (``duration_s``, the level's)."""
        if self.whole is not None:
            return self.whole
        return WholeRates(
            window_s=duration_s,
            requests_per_s=self.requests_per_s,
            output_tokens_per_s=self.output_tokens_per_s,
            total_tokens_per_s=self.total_tokens_per_s,
            intervals=self.intervals,
        )


@dataclass(frozen=True, slots=True)
class Check(JSONRecord):
    """A level-wide SLO (``ttft:p90=300ms``): the statistic's value and whether it passed."""

    slo: str
    value_ms: float | None
    passed: bool = field(metadata=key("passed", "pass"))


@dataclass(frozen=True, slots=True)
class Goodput(JSONRecord):
    """Requests meeting every per-request SLO per second (over throughput's ``window``),
    their share, and the checks; ``whole_requests_per_s`` is the rate over the whole window.

    ``intervals``: ``"slo_attainment"`` (Wilson's interval on ``n_eff`` of the per-request
    success series in send order) and ``"requests_per_s"`` (batch means, as throughput's)."""

    requests_per_s: float | None = None
    slo_attainment: float | None = None
    slos: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    intervals: dict[str, StatInterval] | None = field(default=None, metadata=key("intervals", omit_none=True))
    whole_requests_per_s: float | None = field(default=None, metadata=key("whole_requests_per_s", omit_none=True))


@dataclass(frozen=True, slots=True)
class Lengths(JSONRecord):
    """Mean prompt and output lengths asked for and received (ok requests)."""

    prompt_target_mean: float | None = None
    prompt_achieved_mean: float | None = None
    output_target_mean: float | None = None
    output_achieved_mean: float | None = None


@dataclass(frozen=True, slots=True)
class Events(JSONRecord):
    """Tokens per SSE event, events coalesced into one read, how tokens were counted."""

    tokens_per_event: Distribution = field(default_factory=Distribution)
    coalesced_events: int = 0
    token_source: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClassSummary(JSONRecord):
    """One request class of a level (``requests`` counts all, the statistics the ok ones)."""

    requests: int
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution


@dataclass(frozen=True, slots=True)
class LagSeries(JSONRecord):
    """The worst event-loop lag per one-second bin, seconds from the run's clock anchor."""

    t_s: list[float] = field(default_factory=list)
    max_ms: list[float] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WorkerHealth(JSONRecord):
    """One worker process of a level: its loop lag and send lateness, the share of a CPU
    it used, how long it waited for one, and its own verdict."""

    worker: int
    loop_lag_ms: Distribution
    send_lateness_ms: Distribution
    cpu_percent: float | None = None
    runqueue_wait_percent: float | None = None
    verdict: str = "ok"
    reasons: list[str] = field(default_factory=list)
    loop_lag_over_time: LagSeries | None = field(default=None, metadata=key("loop_lag_over_time", omit_none=True))


@dataclass(frozen=True, slots=True)
class ClientHealth(JSONRecord):
    """Did the load generator keep up? ``verdict`` is ``"ok"`` or ``"client-bound"``."""

    loop_lag_ms: Distribution
    send_lateness_ms: Distribution
    verdict: str = "ok"
    reasons: list[str] = field(default_factory=list)
    loop_lag_over_time: LagSeries | None = field(default=None, metadata=key("loop_lag_over_time", omit_none=True))
    workers: list[WorkerHealth] | None = field(default=None, metadata=key("workers", omit_none=True))
    lost_workers: list[int] | None = field(default=None, metadata=key("lost_workers", omit_none=True))
    # workers on other machines: the worst uncertainty of their clock offsets (run.json has each)
    clock_uncertainty_ms: float | None = field(default=None, metadata=key("clock_uncertainty_ms", omit_none=True))
    notes: list[str] | None = field(
        default=None, metadata=key("notes", omit_none=True)
    )  # not client-bound, but worth knowing

    @property
    def client_bound(self) -> bool:
        return self.verdict == "client-bound"


@dataclass(frozen=True, slots=True)
class Schedule(JSONRecord):
    """Open loop: requests scheduled, sent late (past ``late_threshold_ms``), dropped; with
    ``--max-in-flight``, how long requests waited for an in-flight credit (that wait is
    the cap's, not the client's, so it is not send lateness)."""

    scheduled: int
    late: int
    late_threshold_ms: float
    dropped: int
    credit_wait_ms: Distribution | None = field(default=None, metadata=key("credit_wait_ms", omit_none=True))


@dataclass(frozen=True, slots=True)
class Window(JSONRecord):
    """Metrics over one time window of a long level (soak, ramp)."""

    t_start_s: float
    t_end_s: float
    requests: int
    ok: int
    output_tokens_per_s: float | None
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    itl_ms_p50: float | None
    itl_ms_p99: float | None
    in_flight_mean: float | None


@dataclass(frozen=True, slots=True)
class TrialStat(JSONRecord):
    """One headline metric over repeated trials of a level: each trial's value, their
    mean and the 95% t-interval of the mean (``None`` with fewer than two values)."""

    values: list[float | None]
    mean: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None


@dataclass(frozen=True, slots=True)
class Trials(JSONRecord):
    """``--trials N``: the level ran ``n`` times (seeds ``seed + i``, fresh connections);
    ``metrics`` maps a dotted path (``"ttft_ms.p99"``) to its between-trial statistics."""

    n: int
    metrics: dict[str, TrialStat] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TurnSummary(JSONRecord):
    """One turn index of a multi-turn level (``requests`` counts all, the rest the ok ones)."""

    requests: int
    ttft_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution
    prompt_tokens: Distribution


@dataclass(frozen=True, slots=True)
class Sessions(JSONRecord):
    """Multi-turn sessions of a level: how many had a measured turn, how many ended with
    their last turn ok (``completed``), and ok turns per session."""

    sessions: int
    completed: int
    turns_per_session: Distribution


@dataclass(frozen=True, slots=True)
class Reasoning(JSONRecord):
    """A level whose answers streamed reasoning: time to the first *answer* token (after
    the reasoning; TTFT counts the first token of any kind) and the split of output tokens."""

    requests: int  # ok requests that streamed reasoning
    time_to_first_answer_ms: Distribution
    reasoning_tokens: Distribution
    answer_tokens: Distribution


@dataclass(frozen=True, slots=True)
class Images(JSONRecord):
    """A level whose requests sent images (ok requests with images): images and bytes per
    request, and prompt tokens as the server counted them (``usage``, image tokens
    included) beside the text tokens loadgen aimed at (the synthesiser's target)."""

    requests: int
    images_per_request: float
    bytes_per_request: float
    prompt_tokens_reported: float | None  # mean usage.prompt_tokens (None: the server reported none)
    prompt_tokens_text: float  # mean target text tokens


@dataclass(frozen=True, slots=True)
class Connections(JSONRecord):
    """Of the measured requests whose connection is known (``known``), those that waited
    for one to be opened (``new``: the connect is inside their TTFT) and its time."""

    new: int
    known: int
    connect_ms: Distribution


@dataclass(frozen=True, slots=True)
class NonStreamed(JSONRecord):
    """A level of a non-streamed API (embeddings, rerank, score): no TTFT or ITL, its ok
    requests' inputs (texts, documents) and input tokens per second over the level's
    headline window (as its requests/s), and the inputs per request."""

    inputs_per_s: float | None
    input_tokens_per_s: float | None
    inputs: Distribution


@dataclass(frozen=True, slots=True)
class TaskStep(JSONRecord):
    """The agent calls of one step index or context bucket (``calls`` counts all, the rest the ok ones)."""

    calls: int
    ttft_ms: Distribution
    itl_ms: Distribution


@dataclass(frozen=True, slots=True)
class Tasks(JSONRecord):
    """An agentic level's tasks (see :mod:`loadgen.metrics.tasks` for the rules): how many
    completed, failed (``failed_by_error``: the failing step's error kinds) or were cut short
    by the load loop (``incomplete``: a budget, the level's end), completed tasks' completion times and rate, task SLO
    attainment and goodput, the mean shares of a completed task's time spent in LLM calls,
    in tools and waiting, and TTFT/ITL by step index and by context length."""

    tasks: int
    completed: int
    failed: int
    incomplete: int
    completion_ms: Distribution
    tasks_per_s: float | None
    slo_attainment: float | None
    goodput_tasks_per_s: float | None
    llm_share: float | None
    tool_share: float | None
    wait_share: float | None
    slos: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    failed_by_error: dict[str, int] = field(default_factory=dict)
    by_step: dict[str, TaskStep] = field(default_factory=dict)
    by_context: dict[str, TaskStep] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LevelSummary(JSONRecord):
    """One load level (see :mod:`loadgen.metrics.summary` for how each number is made)."""

    load: Load
    requests: Requests
    duration_s: float
    throughput: Throughput
    goodput: Goodput
    ttft_ms: Distribution
    ttft_queued_ms: Distribution
    itl_ms: Distribution
    inter_chunk_ms: Distribution
    tpot_ms: Distribution
    e2e_ms: Distribution
    e2e_queued_ms: Distribution
    prompt_tokens: Distribution
    output_tokens: Distribution
    lengths: Lengths
    events: Events
    by_class: dict[str, ClassSummary]
    client: ClientHealth
    schedule: Schedule | None = field(default=None, metadata=key("schedule", omit_none=True))
    interrupted: bool = False
    windows: list[Window] | None = field(default=None, metadata=key("windows", omit_none=True))
    trials: Trials | None = field(default=None, metadata=key("trials", omit_none=True))
    sessions: Sessions | None = field(default=None, metadata=key("sessions", omit_none=True))
    by_turn: dict[str, TurnSummary] | None = field(default=None, metadata=key("by_turn", omit_none=True))
    reasoning: Reasoning | None = field(default=None, metadata=key("reasoning", omit_none=True))
    # run until precise: why the level stopped ("precision met: ...", "precision not reachable: ...", "max-duration: ...")
    stopped: str | None = field(default=None, metadata=key("stopped", omit_none=True))
    steady_state: SteadyState | None = field(default=None, metadata=key("steady_state", omit_none=True))
    mlperf: list[MlperfCheck] | None = field(default=None, metadata=key("mlperf", omit_none=True))
    connect: Connections | None = field(default=None, metadata=key("connect", omit_none=True))
    images: Images | None = field(default=None, metadata=key("images", omit_none=True))
    non_streamed: NonStreamed | None = field(default=None, metadata=key("non_streamed", omit_none=True))
    tasks: Tasks | None = field(default=None, metadata=key("tasks", omit_none=True))
    # metrics registered beyond the built-in ones (loadgen.metrics.catalog), by name
    extra: dict[str, Distribution] | None = field(default=None, metadata=key("extra", omit_none=True))
    energy: LevelEnergy | None = field(default=None, metadata=key("energy", omit_none=True))

    @property
    def attainment_interval(self) -> StatInterval | None:
        """SLO attainment's interval (``goodput.intervals["slo_attainment"]``; per-request
        SLOs only): what the capacity search decides on."""
        ivs = self.goodput.intervals
        return None if ivs is None else ivs.get("slo_attainment")

    @property
    def stationary(self) -> bool:
        """False when the level's latencies trend (overloaded or still warming up: see
        :mod:`loadgen.metrics.verdicts`); a level without the test counts as stationary."""
        return self.steady_state is None or self.steady_state.stationary

    def dist(self, name: str) -> Distribution:
        """A latency or length distribution by field name (``"ttft_ms"``, ``"itl_ms"``…) or
        an ``extra`` metric's name."""
        value = getattr(self, name, None) if name in _LEVEL_DISTS else (self.extra or {}).get(name)
        if not isinstance(value, Distribution):
            allowed = (*_LEVEL_DISTS, *(self.extra or {}))
            raise KeyError(f"{name!r} is not a distribution of a level (allowed: {', '.join(allowed)})")
        return value

    def metric(self, path: str) -> float | None:
        """A number by its dotted JSON path, e.g. ``"ttft_ms.p99"`` or
        ``"throughput.output_tokens_per_s"`` (an ``extra`` metric's too); ``None`` when the
        path names nothing."""
        cur: Any = self
        head, _, rest = path.partition(".")
        if self.extra and head in self.extra and head not in _LEVEL_DISTS:
            cur, path = self.extra[head], rest
        for part in path.split("."):
            if isinstance(cur, Distribution):
                try:
                    cur = cur.stat(part)
                except KeyError:
                    return None
                continue
            name = "passed" if part == "pass" else part
            if not dataclasses.is_dataclass(cur) or name not in {f.name for f in dataclasses.fields(cur)}:
                return None
            cur = getattr(cur, name)
        if isinstance(cur, bool) or not isinstance(cur, (int, float)):
            return None
        return float(cur)


_LEVEL_DISTS = tuple(f.name for f in dataclasses.fields(LevelSummary) if f.type in ("Distribution", Distribution))


@dataclass(frozen=True, slots=True)
class Capacity(JSONRecord):
    """The highest offered load whose SLO attainment stays >= ``target``.

    ``status``: ``"ok"`` (``value`` interpolated ``between`` a passing and a failing
    level), ``"not_reached"`` (every level passed; ``value`` is the highest) or
    ``"never_met"`` (no level passed). ``interval`` is ``[highest load shown to pass,
    lowest load shown to fail]`` by the levels' attainment intervals (a non-stationary level
    fails; ``None`` on a side no level decided), when the levels carry them."""

    status: str
    value: float | None
    between: list[float] | None
    target: float
    mode: LoadMode | None = None
    slos: list[str] = field(default_factory=list)
    interval: list[float | None] | None = field(default=None, metadata=key("interval", omit_none=True))


@dataclass(frozen=True, slots=True)
class Saturation(JSONRecord):
    """The knee: the first level where throughput stops growing while latency climbs."""

    found: bool
    index: int | None
    load: float | None
    throughput_gain: float | None
    latency_growth: float | None
    mode: LoadMode | None = None
    metric: str | None = None


@dataclass(frozen=True, slots=True)
class RunSummary(JSONRecord):
    """A whole run: ``summary.json``."""

    levels: list[LevelSummary] = field(default_factory=list)
    capacity: Capacity | None = None
    saturation: Saturation | None = None
    stopped: str | None = None
    interrupted: bool = False
    schema_version: int = SCHEMA_VERSION
