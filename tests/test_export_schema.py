"""`loadgen schema summary` and `loadgen export` on a real run against the reference server."""

from __future__ import annotations

import copy
import importlib.util
import io
import json
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.load.profiles import Profile
from loadgen.metrics.schema import summary_schema
from loadgen.metrics.slo import parse_slo
from loadgen.orchestrate import RunConfig, execute
from loadgen.report.files import read_records
from loadgen.server.process import ServerProcess
from loadgen.workload.spec import workload_from_flags

GOLDEN = Path(__file__).parent / "metrics" / "golden"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "run"
    with ServerProcess(["--engine", "sim", "--time-scale", "0.05"]) as url:
        cfg = RunConfig(
            url=url,
            api="completions",
            workload=workload_from_flags("64", "8"),
            profile=Profile(levels=[1, 4], requests=12, warmup_requests=2),
            slos=[parse_slo("ttft=500ms")],
            out=out,
            live=False,
        )
        execute(cfg, Console(file=io.StringIO()))
    return out


def validator() -> jsonschema.Draft202012Validator:
    schema = summary_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_real_and_golden_summaries_validate(run_dir: Path) -> None:
    v = validator()
    for path in [run_dir / "summary.json", *sorted(GOLDEN.glob("*.json"))]:
        errors = [e.message for e in v.iter_errors(json.loads(path.read_text()))]
        assert not errors, (path, errors[:3])


def test_schema_rejects_what_the_contract_does_not_allow(run_dir: Path) -> None:
    v = validator()
    good = json.loads((run_dir / "summary.json").read_text())
    for mutate in (
        lambda d: d["levels"][0]["requests"].update(ok="12"),  # a count as text
        lambda d: d["levels"][0]["ttft_ms"].update(p99_9=1.0),  # a misspelt key
        lambda d: d.update(schema_version=99),
        lambda d: d["levels"][0].pop("throughput"),  # a required entry missing
    ):
        bad = copy.deepcopy(good)
        mutate(bad)
        assert not v.is_valid(bad)


def test_cli_prints_the_schema() -> None:
    result = CliRunner().invoke(app, ["schema", "summary"])
    assert result.exit_code == 0
    assert json.loads(result.output) == summary_schema()
    bad = CliRunner().invoke(app, ["schema", "records"])
    assert bad.exit_code == 2 and "unknown schema" in bad.output
    from loadgen.runinfo import run_schema

    run = CliRunner().invoke(app, ["schema", "run"])
    assert run.exit_code == 0 and json.loads(run.output) == run_schema()
    assert {"config", "target", "profile", "schema_version"} <= set(run_schema()["properties"])


def test_export_csv_tables_match_the_run(run_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["export", str(run_dir), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    requests = pd.read_csv(tmp_path / "requests.csv")
    levels = pd.read_csv(tmp_path / "levels.csv")
    measured = [r for r in read_records(run_dir) if not r.warmup]
    assert len(requests) == len(measured) == 24
    assert sorted(requests["index"]) == sorted(r.index for r in measured)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert list(levels["level"]) == [0, 1]
    for i, level in enumerate(summary["levels"]):
        assert levels.loc[i, "ttft_ms.p99"] == pytest.approx(level["ttft_ms"]["p99"])
        assert levels.loc[i, "requests.ok"] == level["requests"]["ok"]
        assert levels.loc[i, "load.value"] == level["load"]["value"]
        rows = requests[requests["level"] == i]
        assert rows["ttft_ms"].max() == pytest.approx(level["ttft_ms"]["max"])


def test_export_parquet_or_a_one_line_error(run_dir: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "parquet", "-o", str(tmp_path)])
    if importlib.util.find_spec("pyarrow") is None:
        assert result.exit_code == 2 and "pip install pyarrow" in result.output
        assert "Traceback" not in result.output
    else:
        assert result.exit_code == 0, result.output
        assert len(pd.read_parquet(tmp_path / "requests.parquet")) == 24
    bad = CliRunner().invoke(app, ["export", str(run_dir), "--format", "xlsx"])
    assert bad.exit_code == 2 and "--format" in bad.output
