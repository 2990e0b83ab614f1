"""Load profiles: named TOML files in ``profiles/`` parsed into a strict :class:`Profile`.

A profile says how load rises (``kind``), how long each level lasts, which SLOs and
attainment target apply, and when to stop early. Unknown keys are rejected with a
message that names the file, the key and the allowed keys. CLI flags override fields.

Kinds (see :mod:`loadgen.load.sweeps` for how each one runs):

- ``levels``: an explicit list (``levels = [1, 2, 4]``) or a generator
  (``[generate] kind = "doubling" | "linear", start, stop, step``) in ``mode``
  ``concurrency`` or ``rate``.
- ``sweep-rate``: a synchronous level (1 user) and a max-throughput level (``max_concurrency``
  users), then ``rate_levels`` rates evenly spaced between the two measured throughputs.
- ``capacity``: request-rate bisection between a passing and a failing rate.
- ``soak``: one level for a long time, reported over time windows.
- ``ramp``: users joining linearly over the level's duration, reported over time windows.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, get_args

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from loadgen.errors import ConfigError, ProfileError
from loadgen.inputs import input_problem, open_input
from loadgen.load.arrivals import ARRIVALS, MAX_RATE, check_rate
from loadgen.load.precision import Spec, parse_target
from loadgen.metrics.results import LOAD_MODES, LoadMode
from loadgen.records import MAX_LEVEL_S

__all__ = [
    "KINDS",
    "MAX_LEVELS",
    "MAX_LEVEL_REQUESTS",
    "MAX_USERS",
    "Profile",
    "ProfileKind",
    "StopRules",
    "check_limits",
    "list_profiles",
    "load_profile",
    "precision_targets",
    "with_budget",
]

ProfileKind = Literal["levels", "sweep-rate", "capacity", "soak", "ramp"]
"""How a profile's load rises (see the module docstring); the strings of ``kind`` in a
profile file and run.json."""
KINDS: tuple[ProfileKind, ...] = get_args(ProfileKind)
MAX_LEVELS = 1000  # a generator giving more is refused (inf or 1e300 would never end)
MAX_USERS = 100_000  # concurrent users (and requests in flight): past any one client's ports and sockets
MAX_LEVEL_REQUESTS = 10_000_000  # requests in one level, warm-up included
MODES = LOAD_MODES


@dataclass(slots=True)
class StopRules:
    max_error_rate: float | None = None  # stop after a level whose failed fraction is above this
    min_attainment: float | None = None  # stop after two consecutive levels below this
    on_saturation: bool = False  # stop at the knee (throughput flat, latency climbing)


@dataclass(slots=True)
class Profile:
    name: str = "cli"
    description: str = ""
    kind: ProfileKind = "levels"
    mode: LoadMode = "concurrency"
    levels: list[float] = field(default_factory=list)
    requests: int | None = 100  # per level, warm-up excluded
    duration_s: float | None = None  # per level
    warmup_requests: int = 0
    trim: tuple[float, float] = (0.1, 0.1)
    arrival: str = "poisson"
    burstiness: float = 1.0
    max_in_flight: int | None = None
    max_lateness_s: float = 10.0  # open loop: a request still waiting for the cap this late is dropped
    slos: list[str] = field(default_factory=list)
    attainment_target: float = 0.9
    confidence: float = 0.95  # of every interval in summary.json
    slo_latency: str = "queued"  # SLOs of rate levels use queue-inclusive TTFT/E2E ("queued"|"sent")
    stop: StopRules = field(default_factory=StopRules)
    knee_throughput_gain: float = 0.05
    knee_latency_growth: float = 0.20
    knee_metric: str = "ttft_ms.p99"
    auto_warmup: bool = False  # drop MSER-5's warm-up cut from each level's statistics
    mlperf_percentile: float = 0.99  # MLPerf early stopping: the percentile of each latency SLO
    mlperf_confidence: float = 0.99  # ... and the confidence it is shown at
    # sweep-rate
    max_concurrency: int = 256
    rate_levels: int = 6
    # capacity
    rate_low: float = 1.0
    rate_high: float | None = None  # None: double from rate_low until a level fails
    max_levels: int = 10
    rel_width: float = 0.1
    # soak / ramp
    window_s: float = 10.0
    # run until precise (loadgen.load.precision): each level ends when every target is met
    precision: list[Spec] = field(default_factory=list)  # parsed "ttft.p99=5%" (at ``confidence``, above)
    min_duration_s: float = 0.0
    max_duration_s: float | None = 600.0  # None: the request budget bounds the level (a trace's rows)
    source: str = "--flags"

    @property
    def level_duration_s(self) -> float | None:
        """How long a level may last: ``max_duration_s`` when it runs until precise."""
        return self.max_duration_s if self.precision else self.duration_s

    def validate(self, keys: Mapping[str, str] | None = None) -> None:
        """Raise for the first field a run cannot use: a :class:`ConfigError` naming the
        flag when ``keys`` maps the field to one (``{"levels": "--concurrency"}``), else a
        :class:`ProfileError` naming the profile's file and key. Profile files are
        checked as they are read too; this is the rule every builder of a run shares."""
        keys = keys or {}

        def err(name: str, msg: str) -> ConfigError:
            return ConfigError(msg, key=keys[name]) if name in keys else ProfileError(msg, source=self.source, key=name)

        if self.kind not in KINDS:
            raise err("kind", f"unknown kind {self.kind!r}; allowed: {', '.join(KINDS)}")
        if self.mode not in MODES:
            raise err("mode", f"unknown mode {self.mode!r}; allowed: {', '.join(MODES)}")
        if self.kind == "levels" and not self.levels:
            raise err("levels", "a 'levels' profile needs at least one level")
        low = 1.0 if self.mode == "concurrency" else 0.0
        for value in self.levels:
            if _bad_number(value) or not (value >= low if low else value > 0):
                raise err("levels", f"must be {'>= 1' if low else '> 0'}, got {value!r}")
        if self.requests is not None and (_bad_int(self.requests) or self.requests < 1):
            raise err("requests", f"must be >= 1, got {self.requests!r}")
        if self.duration_s is not None and (_bad_number(self.duration_s) or not 0 < self.duration_s < math.inf):
            raise err("duration_s", f"must be a number of seconds > 0, got {self.duration_s!r}")
        if self.precision:
            _check_precision(self, err)
        elif self.requests is None and self.duration_s is None:
            raise err("requests", "each level needs requests and/or duration_s")
        if _bad_int(self.warmup_requests) or self.warmup_requests < 0:
            raise err("warmup_requests", f"must be >= 0, got {self.warmup_requests!r}")
        if self.max_in_flight is not None:
            if _bad_int(self.max_in_flight) or self.max_in_flight < 1:
                raise err("max_in_flight", f"must be >= 1 (leave it out for no cap), got {self.max_in_flight!r}")
            if self.mode == "concurrency" and self.kind not in ("sweep-rate", "capacity"):
                raise err(
                    "max_in_flight",
                    "caps the requests in flight of an open loop (mode rate); a closed "
                    "loop's users are its requests in flight",
                )
        if self.slo_latency not in ("queued", "sent"):
            raise err("slo_latency", f"choose queued or sent, got {self.slo_latency!r}")
        if self.arrival != "trace" and (problem := arrival_problem(self)) is not None:  # a trace: its own times
            raise err(*problem)
        if _bad_number(self.attainment_target) or not 0 < self.attainment_target <= 1:
            raise err("attainment_target", f"must be in (0, 1], got {self.attainment_target!r}")
        if _bad_number(self.confidence) or not 0.5 < self.confidence < 1:
            raise err("confidence", f"must be between 0.5 and 1 (0.95 for 95%), got {self.confidence!r}")
        for name in ("mlperf_percentile", "mlperf_confidence"):
            value = getattr(self, name)
            if _bad_number(value) or not 0 < value < 1:
                raise err(name, f"must be between 0 and 1 (0.99 for p99 or 99%), got {value!r}")
        if self.mode == "rate" and self.kind == "levels":  # sweeps pick their rates from measurements
            n = None if self.requests is None else self.requests + self.warmup_requests
            for value in self.levels:
                try:
                    check_rate(value, n, self.duration_s)
                except ConfigError as exc:
                    raise err("levels", exc.message) from None
        check_limits(self, dict(keys))


def _check_precision(prof: Profile, err: Callable[[str, str], ConfigError]) -> None:
    """The run-until-precise fields: parsed targets (:func:`precision_targets`), a
    confidence, and a bound."""
    if not isinstance(prof.precision, list) or not all(isinstance(t, Spec) for t in prof.precision):
        raise err("precision", "must be a list of parsed targets (loadgen.load.precision.parse_target)")
    if _bad_number(prof.min_duration_s) or not 0 <= prof.min_duration_s < math.inf:
        raise err("min_duration_s", f"must be a number of seconds >= 0, got {prof.min_duration_s!r}")
    most = prof.max_duration_s
    if most is not None and (_bad_number(most) or not 0 < most < math.inf):
        raise err("max_duration_s", f"must be a number of seconds > 0, got {most!r}")
    if most is None and prof.requests is None:
        raise err("max_duration_s", "a level run until precise needs a maximum duration (or requests)")
    if most is not None and prof.min_duration_s > most:
        raise err("min_duration_s", f"must not exceed the maximum duration ({most:g} s), got {prof.min_duration_s:g}")
    if prof.duration_s is not None:
        raise err("duration_s", "a level run until precise lasts until its targets are met or its maximum duration")
    if prof.kind in ("soak", "ramp"):
        raise err("precision", f"a {prof.kind} level runs for its duration; precision targets go with levels")


def _bad_number(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, (int, float)) or value != value


def _bad_int(value: Any) -> bool:
    return isinstance(value, bool) or not isinstance(value, int)


def with_budget(
    prof: Profile, requests: int | None = None, duration_s: float | None = None, warmup_requests: int | None = None
) -> Profile:
    """``prof`` with a level budget laid over it: the one rule for ``loadgen run``'s
    ``--requests``/``--duration``/``--warmup``, for a profile file's keys and for a matrix.

    Giving ``requests`` or ``duration_s`` replaces both: a duration alone runs each level
    for that long with no request cap, requests alone run to that count with no time
    limit, both end a level at whichever comes first. ``None`` leaves the profile's value
    (a profile that names neither keeps the default, 100 requests per level).
    """
    if requests is not None or duration_s is not None:
        prof = replace(prof, requests=requests, duration_s=duration_s)
    if warmup_requests is not None:
        prof = replace(prof, warmup_requests=warmup_requests)
    return prof


def _limits(prof: Profile) -> list[tuple[str, float, float, str]]:
    """``(field, value, most, unit)`` for every bounded number of ``prof``."""
    per_level = (MAX_USERS, "users") if prof.mode == "concurrency" else (MAX_RATE, "requests/s")
    out: list[tuple[str, float, float, str]] = [("levels", v, *per_level) for v in prof.levels]
    out.append(("levels", len(prof.levels), MAX_LEVELS, "levels"))
    for name, most, unit in (
        ("requests", MAX_LEVEL_REQUESTS, "requests"),
        ("warmup_requests", MAX_LEVEL_REQUESTS, "requests"),
        ("duration_s", MAX_LEVEL_S, "s"),
        ("max_in_flight", MAX_USERS, "requests"),
        ("max_concurrency", MAX_USERS, "users"),
        ("rate_levels", MAX_LEVELS, "levels"),
        ("max_levels", MAX_LEVELS, "levels"),
        ("rate_low", MAX_RATE, "requests/s"),
        ("rate_high", MAX_RATE, "requests/s"),
        ("window_s", MAX_LEVEL_S, "s"),
        ("min_duration_s", MAX_LEVEL_S, "s"),
        ("max_duration_s", MAX_LEVEL_S, "s"),
        ("max_lateness_s", MAX_LEVEL_S, "s"),
    ):
        value = getattr(prof, name)
        if value is not None:
            out.append((name, value, most, unit))
    return out


def check_limits(prof: Profile, flags: dict[str, str] | None = None) -> None:
    """Refuse a count, level, rate or duration beyond what one run can hold (``1e9``
    users or a ``1e30`` level would exhaust memory before the first request). The error
    names the flag when ``flags`` maps the field to one (ConfigError), else the profile's
    key (ProfileError)."""
    for name, value, most, unit in _limits(prof):
        if not value <= most:  # NaN fails too
            text = f"{value:,.0f}" if isinstance(value, (int, float)) and abs(value) < 1e15 else f"{value:g}"
            msg = f"at most {most:,.0f} {unit}, got {text}"
            if flags and name in flags:
                raise ConfigError(msg, key=flags[name])
            raise ProfileError(msg, source=prof.source, key=name)


_OPTIONAL_NUMBERS = ("requests", "duration_s", "max_in_flight", "rate_high", "max_duration_s")
_TOP = {f.name for f in fields(Profile)} - {"stop", "source", "levels"} | {"stop", "levels", "generate"}
_STOP = {f.name for f in fields(StopRules)}
_GEN = {"kind", "start", "stop", "step"}


def _err(source: str, key: str, msg: str) -> ProfileError:
    return ProfileError(msg, source=source, key=key)


def _check_keys(table: dict[str, Any], allowed: set[str], source: str, prefix: str = "") -> None:
    for k in table:
        if k not in allowed:
            raise _err(source, prefix + k, f"unknown key; allowed keys: {', '.join(sorted(allowed))}")


def _generate(spec: Any, source: str) -> list[float]:
    if not isinstance(spec, dict):
        raise _err(source, "generate", 'must be a table: {kind = "doubling"|"linear", start, stop, step}')
    _check_keys(spec, _GEN, source, "generate.")
    kind = spec.get("kind", "doubling")
    try:
        start, stop = _finite(spec["start"]), _finite(spec["stop"])
    except KeyError as exc:
        raise _err(source, f"generate.{exc.args[0]}", "missing; a generator needs start and stop") from None
    except (TypeError, ValueError, OverflowError):
        raise _err(source, "generate", "start and stop must be finite numbers") from None
    if not 0 < start <= stop:
        raise _err(source, "generate", f"need 0 < start <= stop, got start={start:g}, stop={stop:g}")
    if kind == "doubling":
        n = int(math.log2(stop) - math.log2(start) + 1e-9) + 1  # not stop / start: 1e300 / 1e-300 is inf
    elif kind == "linear":
        try:
            step = _finite(spec.get("step", 0) or 0)
        except (TypeError, ValueError, OverflowError):
            step = 0.0
        if not step > 0:
            raise _err(source, "generate.step", "a linear generator needs a finite step > 0")
        n = int(min((stop - start) / step, MAX_LEVELS) + 1e-9) + 1
    else:
        raise _err(source, "generate.kind", f"unknown generator {kind!r}; allowed: doubling, linear")
    if n > MAX_LEVELS:
        raise _err(source, "generate", f"gives {n:,} levels or more; at most {MAX_LEVELS:,} are allowed")
    if kind == "doubling":
        return [start * 2**i for i in range(n)]
    return [start + i * step for i in range(n)]


def _finite(value: Any) -> float:
    """``float(value)`` if it is a finite number, else TypeError (a bool) or ValueError."""
    if isinstance(value, bool):
        raise TypeError(value)
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(value)
    return out


def _typed(name: str, value: Any, default: Any, source: str) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise _err(source, name, f"must be true or false, got {value!r}")
        return value
    if isinstance(default, (int, float)) or name in _OPTIONAL_NUMBERS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _err(source, name, f"must be a number, got {value!r}")
        if not 0 <= value < math.inf:  # NaN fails too
            raise _err(source, name, f"must be a finite number >= 0, got {value!r}")
        return value
    return value


def profile_from_dict(data: dict[str, Any], source: str, name: str = "") -> Profile:
    """Validate a parsed TOML table into a :class:`Profile` (every error names the key)."""
    _check_keys(data, _TOP, source)
    prof = Profile(name=str(data.get("name", name or "profile")), source=source)
    defaults = Profile()
    for key, value in data.items():
        if key in ("name", "stop", "levels", "generate", "requests", "duration_s", "warmup_requests"):
            continue
        default = getattr(defaults, key)
        if key == "trim":
            if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value)):
                raise _err(source, key, "must be [warm-up fraction, cool-down fraction], e.g. [0.1, 0.1]")
            if not (value[0] >= 0 and value[1] >= 0 and value[0] + value[1] < 1):
                raise _err(source, key, "fractions must be >= 0 and sum to < 1")
            value = (float(value[0]), float(value[1]))
        elif key == "slos":
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise _err(source, key, 'must be a list of strings like ["ttft=500ms", "tpot=50ms"]')
        elif key == "precision":
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise _err(source, key, 'must be a list of strings like ["ttft.p99=5%"]')
            try:
                value = precision_targets(value)
            except ValueError as exc:
                raise _err(source, key, str(exc)) from None
        elif key in ("description", "arrival", "knee_metric"):
            if not isinstance(value, str):
                raise _err(source, key, "must be a string")
        elif key == "kind":
            if value not in KINDS:
                raise _err(source, key, f"unknown kind {value!r}; allowed: {', '.join(KINDS)}")
        elif key == "mode":
            if value not in MODES:
                raise _err(source, key, f"unknown mode {value!r}; allowed: {', '.join(MODES)}")
        elif key == "slo_latency":
            if value not in ("queued", "sent"):
                raise _err(source, key, "allowed: queued (from the scheduled time), sent")
        else:
            value = _typed(key, value, default, source)
            if key in ("mlperf_percentile", "mlperf_confidence") and not 0 < value < 1:
                raise _err(source, key, f"must be between 0 and 1 (0.99 for p99 or 99%), got {value!r}")
        setattr(prof, key, value)
    budget = {
        k: _typed(k, data[k], getattr(defaults, k), source)
        for k in ("requests", "duration_s", "warmup_requests")
        if k in data
    }
    prof = with_budget(prof, **budget)
    if prof.precision and "requests" not in data:
        prof.requests = None  # until precise or max_duration_s, not the default 100 requests
    if "stop" in data:
        st = data["stop"]
        if not isinstance(st, dict):
            raise _err(source, "stop", f"must be a table with keys: {', '.join(sorted(_STOP))}")
        _check_keys(st, _STOP, source, "stop.")
        rules = StopRules()
        for k, v in st.items():
            setattr(
                rules, k, _typed(f"stop.{k}", v, getattr(rules, k) if getattr(rules, k) is not None else 0.0, source)
            )
        prof.stop = rules
    if "levels" in data and "generate" in data:
        raise _err(source, "levels", "give either levels or [generate], not both")
    if "levels" in data:
        lv = data["levels"]
        if not (isinstance(lv, list) and lv and all(isinstance(v, (int, float)) and 0 < v < math.inf for v in lv)):
            raise _err(source, "levels", "must be a non-empty list of positive, finite numbers")
        prof.levels = [float(v) for v in lv]
    elif "generate" in data:
        prof.levels = _generate(data["generate"], source)
    if prof.kind == "levels" and not prof.levels:
        raise _err(source, "levels", "a 'levels' profile needs levels = [...] or a [generate] table")
    if prof.precision:
        prof.validate()
    elif prof.requests is None and prof.duration_s is None:
        raise _err(source, "requests", "each level needs requests and/or duration_s")
    if not 0 < prof.attainment_target <= 1:
        raise _err(source, "attainment_target", "must be in (0, 1]")
    if (problem := arrival_problem(prof)) is not None:
        raise _err(source, *problem)
    check_limits(prof)
    return prof


def precision_targets(texts: Sequence[str]) -> list[Spec]:
    """``precision`` as given (``["ttft.p99=5%"]``), parsed once where a profile is read:
    a profile file, the ``--precision`` flags or a run.json. ValueError with a one-line
    reason for the first that does not parse."""
    return [parse_target(text) for text in texts]


def arrival_problem(prof: Profile) -> tuple[str, str] | None:
    """``(key, why)`` when ``arrival`` names no registered process or a parameter it
    declares (a field of :class:`Profile` of the same name) is outside its bound; else None.
    The one arrival check of profile files and of :meth:`Profile.validate`."""
    proc = ARRIVALS.get(prof.arrival)
    if proc is None:
        return "arrival", f"unknown arrival process {prof.arrival!r}; allowed: {', '.join(ARRIVALS)}"
    for param in proc.params:
        why = param.problem(getattr(prof, param.name))
        if why is not None:
            return param.name, f"{why} (a parameter of {proc.name} arrivals)"
    return None


def _dirs_text(dirs: Sequence[Path]) -> str:
    return ", ".join(str(d) for d in dirs) or "(none)"


def load_profile(name_or_path: str, search_dirs: Sequence[Path]) -> Profile:
    """Load ``profiles/NAME.toml`` from the first search dir that has it, or a .toml path."""
    if name_or_path.endswith(".toml") or "/" in name_or_path:
        path = Path(name_or_path)
        why = input_problem(path)
        if why is not None:
            raise ProfileError(
                f"profile file {path} not found" if why == "no such file" else f"profile file {path} {why}"
            )
    else:
        found = [d / f"{name_or_path}.toml" for d in search_dirs if (d / f"{name_or_path}.toml").is_file()]
        if not found:
            names = ", ".join(n for n, _ in list_profiles(search_dirs)) or "(none)"
            raise ProfileError(
                f"unknown profile {name_or_path!r}; available: {names} (searched {_dirs_text(search_dirs)})"
            )
        path = found[0]
    try:
        with open_input(path) as fh:
            text = fh.read().decode("utf-8")
    except OSError as exc:
        raise ProfileError(f"cannot read: {exc.strerror or exc}", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"not UTF-8 text: {exc}", source=str(path)) from None
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer of over 4,300 digits
        raise ProfileError(f"invalid TOML: {exc}", source=str(path)) from None
    return profile_from_dict(data, str(path), path.stem)


def list_profiles(search_dirs: Sequence[Path]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for d in search_dirs:
        for p in sorted(d.glob("*.toml")):
            if p.stem in seen:
                continue
            try:
                with open_input(p) as fh:
                    desc = str(tomllib.loads(fh.read().decode("utf-8")).get("description", ""))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                desc = "(unreadable)"
            seen[p.stem] = desc.strip().splitlines()[0] if desc.strip() else ""
    return sorted(seen.items())
