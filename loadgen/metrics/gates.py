"""CI gates: which levels of a run fail ``--fail-on``, and the exit code that says why.

A gate looks at each measured level:

- ``errors``: the level's error rate (failed / measured requests) is above
  ``max_error_rate`` (default 0: any failed request fails the gate).
- ``slo``: the level has per-request SLOs and its SLO attainment is below the target
  (the profile's ``attainment_target``, 90% by default), or one of its level-wide checks
  (``ttft:p90=300ms``) failed. A level without SLOs never fails this gate.
- ``client-bound``: the client could not keep up (the level's ``client.verdict``), so its
  latencies include the client's own delay.
- ``non-stationary``: the level's latencies kept rising (``steady_state.stationary`` is
  false: a growing queue), so its numbers depend on how long it ran.

Exit codes, one per reason (the lowest wins when several fail; every failure is listed):
:data:`EXIT_CODES`. They sit apart from 1 (every request failed), 2 (bad input), 130
and 143 (interrupted).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from loadgen.errors import ConfigError
from loadgen.metrics.results import LevelSummary
from loadgen.numfmt import fmt_latency

__all__ = [
    "EXIT_CODES",
    "GATES",
    "GateFailure",
    "Gates",
    "exit_code",
    "level_failures",
    "parse_fail_on",
    "run_failures",
]

GATES = ("errors", "slo", "client-bound", "non-stationary")
EXIT_CODES = {"errors": 3, "slo": 4, "client-bound": 5, "non-stationary": 6}


@dataclass(frozen=True, slots=True)
class Gates:
    """What fails a run: the ``reasons`` to check, the error-rate bound, the SLO target."""

    reasons: frozenset[str] = frozenset()
    max_error_rate: float = 0.0
    attainment_target: float = 0.9

    def __bool__(self) -> bool:
        return bool(self.reasons)


@dataclass(frozen=True, slots=True)
class GateFailure:
    reason: str
    level: int
    message: str

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.reason]


def parse_fail_on(text: str | Iterable[str]) -> frozenset[str]:
    """``"slo,errors"`` (or a list of such) -> the set of reasons; a one-line error otherwise."""
    parts = [text] if isinstance(text, str) else list(text)
    reasons = {p.strip().lower() for chunk in parts for p in chunk.split(",") if p.strip()}
    unknown = sorted(reasons - set(GATES))
    if unknown:
        raise ConfigError(f"unknown gate {unknown[0]!r}; valid: {', '.join(GATES)}", field="fail_on")
    return frozenset(reasons)


def level_failures(level: LevelSummary, index: int, gates: Gates) -> list[GateFailure]:
    """The gates ``level`` (the ``index``-th) fails."""
    out: list[GateFailure] = []
    name = f"level {index + 1} ({level.load.label()})"
    req = level.requests
    if "errors" in gates.reasons and req.total and req.error_rate > gates.max_error_rate:
        out.append(
            GateFailure(
                "errors",
                index,
                f"{name}: error rate {req.error_rate:.1%} ({req.failed} of {req.total}) > {gates.max_error_rate:.1%}",
            )
        )
    if "slo" in gates.reasons:
        att = level.goodput.slo_attainment
        if level.goodput.slos and (att is None or att < gates.attainment_target):
            shown = "no requests" if att is None else f"{att:.1%}"
            out.append(
                GateFailure(
                    "slo",
                    index,
                    f"{name}: SLO attainment {shown} < {gates.attainment_target:.0%} ({', '.join(level.goodput.slos)})",
                )
            )
        for check in level.goodput.checks:
            if not check.passed:
                value = "no samples" if check.value_ms is None else fmt_latency(check.value_ms)
                out.append(GateFailure("slo", index, f"{name}: {check.slo} failed ({value})"))
    if "client-bound" in gates.reasons and level.client.verdict == "client-bound":
        why = "; ".join(level.client.reasons) or "the client did not keep up"
        out.append(GateFailure("client-bound", index, f"{name}: client-bound ({why})"))
    if "non-stationary" in gates.reasons and level.steady_state is not None and not level.steady_state.stationary:
        why = "; ".join(level.steady_state.reasons)
        out.append(GateFailure("non-stationary", index, f"{name}: non-stationary ({why})"))
    return out


def run_failures(levels: Sequence[LevelSummary], gates: Gates) -> list[GateFailure]:
    """Every gate failure of every level, in level order."""
    return [f for i, lv in enumerate(levels) for f in level_failures(lv, i, gates)]


def exit_code(failures: Sequence[GateFailure]) -> int:
    """0 without failures, else the lowest exit code among them."""
    return min((f.exit_code for f in failures), default=0)
