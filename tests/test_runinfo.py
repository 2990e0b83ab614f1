"""run.json as a typed RunInfo: a real run's file round-trips and validates against
run_schema(); older files read; bad values are refused naming their key; --resume,
recover and the report read it."""

from __future__ import annotations

import copy
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rich.console import Console
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.errors import ConfigError
from loadgen.load.profiles import Profile
from loadgen.metrics.sequential import Target
from loadgen.metrics.slo import parse_slo
from loadgen.orchestrate import RunConfig, execute, rebuild_summary, resume_config
from loadgen.orchestrate.recover import recover
from loadgen.report.files import read_run_info
from loadgen.report.html import render_run_report
from loadgen.runinfo import RUN_SCHEMA_VERSION, Calibration, RunInfo, run_schema
from loadgen.server.process import ServerProcess
from loadgen.workload.spec import workload_from_flags
from tests.report.synth import Spec
from tests.report.synth import _run_json as synth_run_json


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runinfo") / "run"
    with ServerProcess(["--engine", "sim", "--time-scale", "0.05"]) as url:
        cfg = RunConfig(
            url=url,
            api="completions",
            workload=workload_from_flags("64", "8"),
            profile=Profile(levels=[1, 2], requests=6, warmup_requests=1),
            slos=[parse_slo("ttft=500ms")],
            out=out,
            live=False,
            seed=3,
            headers={"X-Secret": "never-written"},
        )
        execute(cfg, Console(file=io.StringIO()))
    return out


def raw(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "run.json").read_text())
    return data


def validator() -> jsonschema.Draft202012Validator:
    schema = run_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_a_real_run_json_round_trips_and_validates(run_dir: Path) -> None:
    data = raw(run_dir)
    info = read_run_info(run_dir)
    assert info.to_json() == data  # the same keys and values, nothing lost or added
    assert data["schema_version"] == RUN_SCHEMA_VERSION
    errors = [e.message for e in validator().iter_errors(data)]
    assert not errors, errors[:3]
    # the typed fields say what the run was
    assert (
        info.config.seed == 3 and info.config.header_names == ["X-Secret"] and "never-written" not in json.dumps(data)
    )
    assert info.profile.levels == [1.0, 2.0] and info.profile.trim == (0.1, 0.1)
    assert (
        info.target is not None and info.target.api == "completions" and info.target.url.startswith("http://127.0.0.1")
    )
    assert info.workload is not None and [c.prompt_tokens for c in info.workload.classes] == ["64"]
    assert info.calibration is not None and info.calibration.calibrated and info.calibration.samples
    assert info.finished is not None and info.finished.levels == 2 and info.complete
    assert info.anchor_ns == data["clock_anchor"]["perf_counter_ns"] and info.slos == [str(parse_slo("ttft=500ms"))]


def test_the_schema_refuses_what_the_record_does_not_allow(run_dir: Path) -> None:
    v = validator()
    good = raw(run_dir)
    for mutate in (
        lambda d: d["config"].update(workers=0),
        lambda d: d["config"].update(workers="many"),
        lambda d: d["profile"].update(levels="x"),
        lambda d: d["target"].pop("url"),
        lambda d: d.update(schema_version=99),
        lambda d: d.update(tool="other"),
        lambda d: d.pop("profile"),
        lambda d: d["finished"].update(levls=2),  # a misspelt key
        lambda d: d["profile"].update(trim=[0.1]),
    ):
        bad = copy.deepcopy(good)
        mutate(bad)
        assert not v.is_valid(bad), bad
    assert v.is_valid({**good, "config": {**good["config"], "workers": "auto"}})


def test_an_older_run_json_reads(run_dir: Path) -> None:
    """Files of earlier versions: no schema_version, no config.workers/ray/trials, a profile
    without the newer fields, no calibration: each takes its default."""
    old = raw(run_dir)
    del old["schema_version"], old["calibration"], old["finished"]
    for key in ("workers", "ray", "trials"):
        del old["config"][key]
    for key in ("max_lateness_s", "slo_latency", "stop"):
        del old["profile"][key]
    old["profile"]["retired_key"] = 1  # a key no loadgen writes any more
    info = RunInfo.from_json(old)
    assert (info.config.workers, info.config.ray, info.config.trials) == (1, None, 1)
    assert info.profile.max_lateness_s == Profile().max_lateness_s and info.profile.stop == Profile().stop
    assert info.calibration is None and info.finished is None and not info.complete
    assert info.schema_version == RUN_SCHEMA_VERSION  # written back as this version's
    # the report's synthetic fixture: a minimal record, as tests write it
    synth = RunInfo.from_json(synth_run_json(Spec()))
    assert synth.machine is not None and synth.machine.versions == {} and synth.config.seed == Spec().seed


BAD: list[tuple[Callable[[dict[str, Any]], Any], str]] = [
    (lambda d: d["config"].update(workers=-3), 'config.workers: must be a whole number in [1, 1024] or "auto", got -3'),
    (lambda d: d["config"].update(workers=2000), "config.workers: must be a whole number in [1, 1024]"),
    (
        lambda d: d["config"].update(workers="many"),
        "config.workers: must be a whole number in [1, 1024] or \"auto\", got 'many'",
    ),
    (lambda d: d["config"].update(seed="7"), "config.seed: expected a whole number, got '7'"),
    (lambda d: d["config"].update(trials=0), "config.trials: must be a whole number >= 1, got 0"),
    (lambda d: d["profile"].update(levels="x"), "profile.levels: expected a list, got 'x'"),
    (lambda d: d["profile"].update(levels=[1, "x"]), "profile.levels[1]: expected a number, got 'x'"),
    (lambda d: d["profile"].update(kind="zigzag"), "profile.kind: unknown kind 'zigzag'"),
    (lambda d: d["profile"].update(mode="closed"), "profile.mode: unknown mode 'closed'"),
    (lambda d: d["profile"].update(precision=["ttft.p100=5%"]), "profile.precision[0]: unknown statistic 'p100'"),
    (lambda d: d["profile"]["stop"].update(on_saturation="yes"), "profile.stop.on_saturation: expected true or false"),
    (lambda d: d["target"].pop("url"), "target.url: missing"),
    (lambda d: d.pop("profile"), "profile: missing"),
    (lambda d: d.update(tool="other"), "tool: not a run.json written by loadgen (expected \"loadgen\", got 'other')"),
    (
        lambda d: d["workload"]["classes"][0].update(weight=None),
        "workload.classes[0].weight: expected a number, got null",
    ),
    (lambda d: d["calibration"].update(samples=[[32]]), "calibration.samples[0]: expected a list of 2, got 1 items"),
    (lambda d: d.update(resumed=[{"at": "x", "level": "one"}]), "resumed[0].level: expected a whole number, got 'one'"),
    (lambda d: d.update(finished=[]), "finished: expected an object, got list"),
]


@pytest.mark.parametrize("mutate,says", BAD, ids=[s.split(":")[0] for _, s in BAD])
def test_a_bad_value_is_refused_naming_its_key(
    run_dir: Path, tmp_path: Path, mutate: Callable[[dict[str, Any]], Any], says: str
) -> None:
    data = raw(run_dir)
    mutate(data)
    with pytest.raises(ConfigError) as err:
        RunInfo.from_json(data)
    assert str(err.value).startswith("run.json: " + says), str(err.value)
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError) as err:
        read_run_info(folder)
    assert str(err.value).startswith(f"{folder / 'run.json'}: {says}")


def test_precision_targets_are_read_as_values_and_written_back_as_given(run_dir: Path) -> None:
    data = raw(run_dir)
    data["profile"].update(precision=["ttft.p99 = 5%", "e2e.mean=2.5%"], requests=None, duration_s=None)
    info = RunInfo.from_json(data)
    assert [s.target for s in info.profile.precision] == [Target("ttft", 0.99, 0.05), Target("e2e", None, 0.025)]
    assert info.to_json()["profile"]["precision"] == ["ttft.p99 = 5%", "e2e.mean=2.5%"]


def _unfinished(run_dir: Path, folder: Path, **config: Any) -> Path:
    """The real run folder as a kill -9 after its first level leaves it, ``config`` laid over run.json's."""
    shutil.copytree(run_dir, folder)
    data = raw(folder)
    del data["finished"]
    data["config"].update(config)
    (folder / "run.json").write_text(json.dumps(data))
    lines = (folder / "records.jsonl").read_text().splitlines(keepends=True)
    (folder / "records.jsonl").write_text("".join(line for line in lines if json.loads(line)["level"] == 0))
    (folder / "summary.json").unlink()
    return folder


def test_resume_refuses_a_bad_workers_value_in_one_line(run_dir: Path, tmp_path: Path) -> None:
    folder = _unfinished(run_dir, tmp_path / "bad-workers", workers=-3)
    res = CliRunner().invoke(app, ["run", "--resume", str(folder), "--header", "X-Secret: again"])
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert f'{folder / "run.json"}: config.workers: must be a whole number in [1, 1024] or "auto", got -3' in out
    assert len(res.output.strip().splitlines()) <= 2 and "Traceback" not in res.output  # one line (wrapped at most)


def test_recover_resume_and_report_read_the_typed_record(run_dir: Path, tmp_path: Path) -> None:
    folder = _unfinished(run_dir, tmp_path / "killed", workers="auto")
    rec = recover(folder)
    # level 0's records are the last ones and the run did not finish: level 0 is partial, to run again
    assert isinstance(rec.run, RunInfo) and not rec.complete and rec.finished == 0
    assert rec.plan is not None and rec.plan.index == 0 and len(rec.levels) == 1
    cfg, _ = resume_config(folder, None, {"X-Secret": "again"}, command=["loadgen"], live=False)
    assert cfg.workers == "auto" and cfg.seed == 3 and cfg.resume is not None and cfg.resume.run == rec.run
    assert rec.run.target is not None and cfg.url == rec.run.target.url
    _, summary = rebuild_summary(folder)
    assert summary.interrupted and len(summary.levels) == 1
    html = render_run_report(folder).read_text(encoding="utf-8")
    assert "<dt>SLOs</dt><dd>" in html and "calibrated from" in html
    (folder / "run.json").write_text(
        '{"tool": "loadgen", "profile": {"levels": "x"}}'
    )  # unreadable: the report still renders
    html = render_run_report(folder).read_text(encoding="utf-8")
    assert "<dt>SLOs</dt><dd>none</dd>" in html and "<dt>profile</dt>" not in html


def test_calibration_record_of_the_calibrate_step() -> None:
    """calibrate()'s answer becomes the record's calibration as it is (tuples become lists in the file)."""
    answer = {
        "calibrated": True,
        "method": "stream",
        "samples": [(32, 35), (256, 259)],
        "tokens_per_word": 1.0,
        "overhead_tokens": 3.0,
        "api": "chat",
    }
    calib = Calibration.from_json(answer)
    assert calib.samples == [(32, 35), (256, 259)]
    assert calib.to_json() == {**answer, "samples": [[32, 35], [256, 259]]}
    off = Calibration(reason="--no-calibrate")
    assert off.to_json() == {"calibrated": False, "method": None, "reason": "--no-calibrate"}
