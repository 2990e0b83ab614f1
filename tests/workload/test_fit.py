"""Fitting a workload from real traffic: the joint histogram keeps the pairing of prompt
and output lengths, the written file loads and reproduces it, traces give rate and burstiness."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import WorkloadError
from loadgen.workload.fit import fit_workload
from loadgen.workload.generate import generate_specs
from loadgen.workload.joint import fit_joint
from loadgen.workload.prompts import PromptSynthesizer
from loadgen.workload.spec import load_workload
from loadgen.workload.traces import gamma_shape

SAMPLES = Path(__file__).resolve().parents[2] / "workloads" / "samples"


def logcorr(p: np.ndarray, o: np.ndarray) -> float:
    return float(np.corrcoef(np.log(p), np.log(o))[0, 1])


def correlated_trace(
    tmp_path: Path, n: int = 4000, shape: float = 0.4, rate: float = 20.0
) -> tuple[str, np.ndarray, np.ndarray]:
    """A Mooncake trace with log-correlated lengths (r = 0.8) and gamma(shape) gaps."""
    rng = np.random.default_rng(1)
    z = rng.standard_normal((n, 2))
    z[:, 1] = 0.8 * z[:, 0] + 0.6 * z[:, 1]
    p = np.clip(np.exp(6.5 + 0.9 * z[:, 0]), 1, 30000).astype(int)
    o = np.clip(np.exp(4.5 + 0.7 * z[:, 1]), 1, 4000).astype(int)
    t = np.concatenate(([0.0], np.cumsum(rng.gamma(shape, 1 / (rate * shape), n - 1))))
    path = tmp_path / "trace.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"timestamp": round(ti * 1000, 3), "input_length": int(a), "output_length": int(b), "hash_ids": []}
            )
            + "\n"
            for ti, a, b in zip(t, p, o)
        )
    )
    return str(path), p, o


def sampled(workload_file: Path, n: int = 20_000) -> tuple[np.ndarray, np.ndarray]:
    wl = load_workload(str(workload_file), [])
    specs = generate_specs(wl, n, seed=3, synth=PromptSynthesizer(seed=3))
    return np.array([s.prompt_tokens for s in specs]), np.array([s.max_tokens for s in specs])


def test_fitted_file_loads_and_reproduces_the_joint_distribution(tmp_path: Path) -> None:
    path, p, o = correlated_trace(tmp_path)
    fit = fit_workload(path, "fitted")
    out = tmp_path / "fitted.toml"
    out.write_text(fit.to_toml())
    sp, so = sampled(out)
    assert logcorr(p, o) == pytest.approx(0.8, abs=0.03)
    assert logcorr(sp, so) == pytest.approx(logcorr(p, o), abs=0.05)  # the pairing survives
    for a, b in ((sp, p), (so, o)):  # and each side's quantiles
        q = [0.1, 0.5, 0.9]
        np.testing.assert_allclose(np.quantile(a, q), np.quantile(b, q), rtol=0.1)
    assert sp.min() >= p.min() and sp.max() <= p.max() and so.min() >= o.min() and so.max() <= o.max()
    # two independent marginals would lose it: the control
    rng = np.random.default_rng(0)
    assert abs(logcorr(rng.permutation(sp), so)) < 0.05


def test_trace_rate_and_burstiness(tmp_path: Path) -> None:
    path, _, _ = correlated_trace(tmp_path, shape=0.4, rate=20.0)
    fit = fit_workload(path, "t")
    assert fit.rate == pytest.approx(20.0, rel=0.08) and fit.burstiness == pytest.approx(0.4, rel=0.12)
    wl = load_workload(str(_write(tmp_path / "t.toml", fit.to_toml())), [])
    assert wl.arrivals is not None and wl.arrivals.rate == pytest.approx(fit.rate, rel=1e-5)
    assert wl.arrivals.burstiness == pytest.approx(fit.burstiness, rel=1e-3)
    even = np.arange(100) * 0.5
    assert gamma_shape(even) == 1e3 and gamma_shape(np.array([0.0])) is None


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_fit_from_a_dataset_sample(tmp_path: Path) -> None:
    fit = fit_workload(str(SAMPLES / "sharegpt.json"), "chatty", bins=8)
    doc = json.loads((SAMPLES / "sharegpt.json").read_text())
    p = np.array([len(e["conversations"][0]["value"].split()) for e in doc])
    o = np.array([len(e["conversations"][1]["value"].split()) for e in doc])
    assert (
        fit.kind == "dataset"
        and fit.rate is None
        and fit.prompt.tolist() == p.tolist()
        and fit.output.tolist() == o.tolist()
    )
    assert sum(w for _, _, w in fit.joint.cells) == 48 and "[arrivals]" not in fit.to_toml()


def test_joint_histogram_cells_count_the_pairs() -> None:
    j = fit_joint([1, 1, 5, 5, 5, 9], [2, 2, 7, 7, 7, 3], bins=3)
    assert j.prompt_edges[0] == 1 and j.prompt_edges[-1] == 10
    assert sorted(w for _, _, w in j.cells) == [1.0, 2.0, 3.0]
    p, o = j.sample_pairs(np.random.default_rng(0), 3000)
    pairs = set(zip(p.tolist(), o.tolist()))
    # each draw lies in one observed cell: (1, 2), (5, 7) and (9, 3) never mix sides
    assert all(
        any(
            j.prompt_edges[i] <= a < j.prompt_edges[i + 1] and j.output_edges[k] <= b < j.output_edges[k + 1]
            for i, k, _ in j.cells
        )
        for a, b in pairs
    )


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ("prompt_edges = [1, 5]\noutput_edges = [1, 5]\ncells = [[0, 1, 3]]\n", "joint_tokens.cells[0]"),
        ("prompt_edges = [5, 1]\noutput_edges = [1, 5]\ncells = [[0, 0, 3]]\n", "joint_tokens.prompt_edges"),
        ("prompt_edges = [1, 5]\noutput_edges = [1, 5]\ncells = [[0, 0, 0]]\n", "joint_tokens.cells[0]"),
        ("prompt_edges = [1, 5]\noutput_edges = [1, 5]\n", "joint_tokens.cells"),
        ("prompt_edges = [1, 5]\noutput_edges = [1, 5]\ncells = [[0, 0, 1]]\nbins = 3\n", "joint_tokens.bins"),
    ],
)
def test_bad_joint_tables_name_the_key(tmp_path: Path, body: str, key: str) -> None:
    path = _write(tmp_path / "j.toml", "[joint_tokens]\n" + body)
    with pytest.raises(WorkloadError, match=re.escape(f"j.toml: {key}: ")):
        load_workload(str(path), [])
    both = _write(tmp_path / "b.toml", "prompt_tokens = 5\n[joint_tokens]\n" + body)
    with pytest.raises(WorkloadError, match=r"b.toml: prompt_tokens: give either joint_tokens or"):
        load_workload(str(both), [])


def test_cli_fit_writes_a_workload(tmp_path: Path) -> None:
    out = tmp_path / "w" / "bursty.toml"
    res = CliRunner().invoke(app, ["workload", "fit", str(SAMPLES / "burstgpt.csv"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "240 requests" in res.output and "req/s" in res.output
    wl = load_workload(str(out), [])
    assert wl.name == "bursty" and wl.arrivals is not None and wl.arrivals.burstiness < 1  # the sample is bursty
    bad = CliRunner().invoke(app, ["workload", "fit", str(tmp_path / "none.jsonl"), "-o", str(tmp_path / "x.toml")])
    assert bad.exit_code == 2 and "no such dataset file" in bad.output and "Traceback" not in bad.output


def test_the_readme_fit_example_writes_the_shipped_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_readme import readme_commands

    (cmd,) = readme_commands("loadgen workload fit")
    args = shlex.split(cmd)[1:]
    out = args.index("-o") + 1
    shipped = Path(args[out])
    args[out] = str(tmp_path / shipped.name)
    monkeypatch.chdir(SAMPLES.parents[1])
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert (tmp_path / shipped.name).read_text() == shipped.read_text(), "run python workloads/samples/make_samples.py"
