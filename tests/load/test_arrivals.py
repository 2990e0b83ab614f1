"""Open-loop arrival schedules: their statistics, their bounds, their seeds.

Statistical checks use a fixed seed and a bound of five standard errors of the
estimate, computed from the distribution: a wrong rate or shape misses it by far, a
right one misses it with a chance far below one in a million.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from pathlib import Path

import numpy as np
import pytest

from loadgen.errors import ConfigError, ProfileError
from loadgen.load import arrivals
from loadgen.load.arrivals import ARRIVALS, arrival_help, schedule
from loadgen.load.profiles import Profile, load_profile
from loadgen.load.runner import LevelPlan

N = 40_001  # offsets, so 40,000 gaps


def gaps(kind: str, rate: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    offsets = schedule(kind, rate, n=N, seed=seed, burstiness=burstiness)
    assert offsets[0] == 0.0 and len(offsets) == N
    return np.diff(offsets)


def mean_bound(cv: float, n: int) -> float:
    """Five standard errors of a sample mean, relative to the mean."""
    return 5 * cv / math.sqrt(n)


def cv_bound(shape: float, n: int) -> float:
    """Five standard errors of the sample CV of gamma(shape) gaps, relative to the CV
    (delta method: Var(s)/sigma^2 ~ (excess kurtosis + 2) / 4n; for gamma it is 6/shape)."""
    return 5 * math.sqrt((6 / shape + 2) / (4 * n))


@pytest.mark.parametrize("rate", [0.5, 20.0, 3000.0])
def test_poisson_gaps_have_mean_one_over_rate_and_cv_one(rate: float) -> None:
    g = gaps("poisson", rate)
    assert abs(g.mean() * rate - 1) < mean_bound(1.0, g.size)
    assert abs(g.std() / g.mean() - 1) < cv_bound(1.0, g.size)
    assert (g > 0).all()


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_mean_one_over_rate_and_cv_from_burstiness(burstiness: float) -> None:
    """Burstiness is the gamma shape: CV = 1/sqrt(burstiness), < 1 burstier than Poisson."""
    rate = 8.0
    g = gaps("gamma", rate, burstiness)
    cv = 1 / math.sqrt(burstiness)
    assert abs(g.mean() * rate - 1) < mean_bound(cv, g.size)
    assert abs((g.std() / g.mean()) / cv - 1) < cv_bound(burstiness, g.size)


def test_burstier_gamma_bunches_arrivals() -> None:
    """With the same mean, a lower shape puts more arrivals within a tenth of a mean gap."""
    close = [float(np.mean(gaps("gamma", 1.0, b) < 0.1)) for b in (0.25, 1.0, 4.0)]
    assert close[0] > close[1] > close[2]


def test_constant_gaps_are_exact() -> None:
    offsets = schedule("constant", 4.0, n=101)
    np.testing.assert_allclose(offsets, np.arange(101) * 0.25, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", sorted(ARRIVALS))
def test_a_duration_cuts_the_same_schedule(kind: str) -> None:
    """With a duration only, the offsets are the unbounded schedule's that fall inside it."""
    rate, duration = 50.0, 30.0
    cut = schedule(kind, rate, duration_s=duration, seed=4, burstiness=0.5)
    full = schedule(kind, rate, n=5 * int(rate * duration), seed=4, burstiness=0.5)
    assert cut[0] == 0.0 and cut[-1] < duration <= full[len(cut)]
    np.testing.assert_allclose(cut, full[: len(cut)], rtol=0, atol=1e-9)
    if kind != "constant":  # about rate * duration arrivals: Poisson-like count, five sigma
        assert abs(len(cut) - rate * duration) < 5 * math.sqrt(rate * duration / 0.5)


@pytest.mark.parametrize(("n", "duration", "want"), [(10, 100.0, 10), (1000, 2.05, 21), (5, 0.0, 0), (0, 9.0, 0)])
def test_with_a_count_and_a_duration_the_first_bound_wins(n: int, duration: float, want: int) -> None:
    offsets = schedule("constant", 10.0, n=n, duration_s=duration)
    assert len(offsets) == want
    np.testing.assert_array_equal(offsets, schedule("constant", 10.0, n=1000)[:want])


def test_the_same_seed_gives_the_same_schedule() -> None:
    for kind in ("poisson", "gamma"):
        a = schedule(kind, 5.0, n=500, seed=42, burstiness=0.5)
        np.testing.assert_array_equal(a, schedule(kind, 5.0, n=500, seed=42, burstiness=0.5))
        b = schedule(kind, 5.0, n=500, seed=43, burstiness=0.5)
        assert not np.array_equal(a, b)
        assert (np.diff(a) >= 0).all() and (np.diff(b) >= 0).all()


def test_a_longer_schedule_starts_with_the_shorter_one() -> None:
    """Adding requests to a level does not move the ones already planned."""
    short = schedule("poisson", 5.0, n=100, seed=9)
    np.testing.assert_allclose(schedule("poisson", 5.0, n=1000, seed=9)[:100], short, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"kind": "uniform", "rate": 1.0, "n": 5},
            "unknown arrival process 'uniform'; choose one of: poisson, gamma, constant",
        ),
        ({"kind": "poisson", "rate": 0.0, "n": 5}, "^rate: request rate must be > 0"),
        ({"kind": "poisson", "rate": float("nan"), "n": 5}, "^rate: request rate must be > 0"),
        ({"kind": "poisson", "rate": 1.0}, "needs --requests or --duration"),
        ({"kind": "gamma", "rate": 1.0, "n": 5, "burstiness": 0.0}, "^burstiness: burstiness must be > 0"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs: dict[str, object], match: str) -> None:
    kind = kwargs.pop("kind")
    rate = kwargs.pop("rate")
    with pytest.raises(ConfigError, match=match):
        schedule(kind, rate, **kwargs)  # type: ignore[arg-type]


def test_a_schedule_too_large_to_hold_is_refused_not_allocated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrivals, "MAX_SCHEDULED", 1_000)
    with pytest.raises(ConfigError, match=r"^rate: 10,000 arrivals in one level"):
        schedule("poisson", 100.0, duration_s=100.0)
    assert len(schedule("poisson", 100.0, n=50, duration_s=100.0)) == 50  # --requests bounds it
    with pytest.raises(ConfigError, match="at most 1,000,000/s"):
        schedule("constant", 1e9, n=10)


def test_many_requests_with_a_short_duration_are_bounded_by_the_duration() -> None:
    offsets = schedule("constant", 1_000.0, n=1_000_000_000, duration_s=0.01)
    assert len(offsets) == 10


def test_each_process_declares_its_parameters_and_each_declaration_reaches_a_run() -> None:
    """gamma declares burstiness, poisson and constant nothing; a declared parameter is a
    keyword of schedule() and a field of Profile and LevelPlan, with the declared default."""
    assert {name: [p.name for p in proc.params] for name, proc in ARRIVALS.items()} == {
        "poisson": [],
        "gamma": ["burstiness"],
        "constant": [],
    }
    keywords = inspect.signature(schedule).parameters
    for proc in ARRIVALS.values():
        for param in proc.params:
            assert keywords[param.name].default == param.default
            for cls in (Profile, LevelPlan):
                field = {f.name: f for f in dataclasses.fields(cls)}[param.name]
                assert field.default == param.default, (cls, param.name)


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_a_declared_bound_refuses_a_value_naming_its_field(value: float) -> None:
    """The field, not a flag: the CLI names it ``--burstiness`` (tests/test_runconfig.py)."""
    with pytest.raises(ConfigError) as exc:
        schedule("gamma", 5.0, n=10, burstiness=value)
    assert exc.value.field == "burstiness" and str(exc.value).startswith("burstiness: burstiness must be ")
    assert len(schedule("poisson", 5.0, n=10, burstiness=value)) == 10  # poisson declares none: not read


@pytest.mark.parametrize(
    ("body", "key", "text"),
    [
        ('arrival = "uniform"', "arrival", "unknown arrival process 'uniform'; allowed: poisson, gamma, constant"),
        ('arrival = "gamma"\nburstiness = 0', "burstiness", "must be > 0, got 0 (a parameter of gamma arrivals)"),
    ],
)
def test_a_profile_files_arrival_keys_are_checked_against_the_declarations(
    tmp_path: Path, body: str, key: str, text: str
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(f'levels = [2]\nmode = "rate"\n{body}\n')
    with pytest.raises(ProfileError) as exc:
        load_profile(str(path), [])
    assert exc.value.key == key and str(exc.value) == f"{path}: {key}: {text}"


def test_valid_profile_arrivals_load_as_before(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('levels = [2]\nmode = "rate"\narrival = "gamma"\nburstiness = 0.25\n')
    prof = load_profile(str(path), [])
    assert (prof.arrival, prof.burstiness) == ("gamma", 0.25)
    path.write_text('levels = [2]\nmode = "rate"\narrival = "constant"\n')
    assert (load_profile(str(path), []).arrival, load_profile(str(path), []).burstiness) == ("constant", 1.0)


def test_arrival_help_lists_every_process_and_its_declared_parameters() -> None:
    text = arrival_help()
    assert [name for name in ARRIVALS if name in text] == list(ARRIVALS)
    assert "gamma (--burstiness > 0, default 1: the gamma shape" in text
