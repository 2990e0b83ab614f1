"""End to end, per API: `loadgen run --api X` against `loadgen serve --engine sim` in its own
process, for the streamed APIs beside chat (the Responses API, Anthropic Messages) and for
images in prompts (chat's ``image_url`` parts, the Responses API's ``input_image``).

The reference server speaks each API's real event format and counts tokens with the word
tokenizer, so calibrated prompt lengths are exact and every count can be checked exactly:
the records must agree with the server's own request log (/loadgen/requests)."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from loadgen.load.profiles import Profile
from loadgen.orchestrate import RunConfig, execute
from loadgen.report.files import read_records
from loadgen.server.process import ServerProcess
from loadgen.workload.spec import load_workload, workload_from_flags

SIM = ["--engine", "sim", "--gpu", "h100", "--model", "llama-3.1-8b"]
IMAGE_TOKENS_512 = 324  # a 512x512 image as Qwen2-VL counts it: 504x504 after resizing, (504/28)**2 tokens


@pytest.fixture(scope="module")
def server() -> str:
    with ServerProcess(SIM) as url:
        yield url


def _run(url: str, api: str, out: Path, workload: object, requests: int = 6) -> list:
    cfg = RunConfig(
        url=url,
        api=api,
        workload=workload,  # type: ignore[arg-type]
        profile=Profile(levels=[2], requests=requests),
        out=out,
        live=False,
    )
    outcome = execute(cfg, Console(file=io.StringIO()))
    assert outcome.summary.levels[0].requests.ok == requests
    return [r for r in read_records(out) if not r.warmup]


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_each_streamed_api_counts_exactly(server: str, tmp_path: Path, api: str) -> None:
    recs = _run(server, api, tmp_path / api, workload_from_flags("128", "16"))
    assert len(recs) == 6 and all(r.ok for r in recs), [r.error for r in recs]
    for r in recs:
        assert r.prompt_tokens == r.target_prompt_tokens == 128
        assert r.completion_tokens == 16 and r.output_tokens == 16
        assert len(r.events) == 16  # one event per token: the server writes a delta per step
        assert r.server is not None and r.server["decode_steps"] == 15  # the vendor timings came through
        assert r.events[0][0] > r.sent_ns and r.done_ns >= r.events[-1][0]
    log = httpx.get(server + "/loadgen/requests").json()["data"]
    assert sum(1 for e in log if e["prompt_tokens"] == 128 and e["output_tokens"] == 16) >= 6


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_images_reach_the_server_as_image_tokens(server: str, tmp_path: Path, api: str) -> None:
    spec = tmp_path / "one-image.toml"
    spec.write_text(
        'name = "one-image"\nprompt_tokens = 64\noutput_tokens = 4\n\n[images]\ncount = 1\nwidth = 512\nheight = 512\n'
    )
    recs = _run(server, api, tmp_path / api, load_workload(str(spec), []))
    assert len(recs) == 6 and all(r.ok for r in recs), [r.error for r in recs]
    for r in recs:
        assert r.images == 1 and r.image_bytes > 0
        # the server counted the text exactly and the image as its patch tokens
        assert r.prompt_tokens == r.target_prompt_tokens + IMAGE_TOKENS_512
