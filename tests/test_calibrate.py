"""Prompt calibration (loadgen.orchestrate.calibration): streamed usage, the non-streamed fallback, neither."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.probe import ProbeResult, probe_prompt_tokens
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.errors import TargetError
from loadgen.orchestrate.calibration import calibrate
from loadgen.records import RequestSpec
from loadgen.workload.prompts import PromptSynthesizer, default_corpus
from tests.scripted_server import Script, ScriptedServer, ScriptedServerProcess

# llama.cpp's server as seen by a client: no usage in streams (whatever stream_options
# says), usage in every non-streamed answer, a role-only first chunk, one token per event
LLAMA_CPP = Script(
    ttft_s=0.002,
    itl_s=0.001,
    include_usage=False,
    role_event=True,
    tokens_per_event=1,
    tokens_per_word=1.1,
    template_tokens=8,
)


class Calibration:
    def __init__(self, srv: ScriptedServer, api: str = "chat") -> None:
        self.srv, self.api = srv, api
        self.dialect, self.opts = get_dialect(api), DialectOptions(model="scripted-model")
        self.transport: Any = make_transport(
            "aiohttp", TransportConfig(base_url=srv.url, dialect=self.dialect, options=self.opts)
        )
        self.probes = 0

    async def probe(self, spec: RequestSpec) -> ProbeResult:
        self.probes += 1
        return await probe_prompt_tokens(self.srv.url, self.dialect, self.opts, spec)

    async def run(self, synth: PromptSynthesizer, with_probe: bool = True) -> dict[str, Any]:
        return await calibrate(self.transport, synth, self.api, self.probe if with_probe else None)


@pytest.fixture
async def llama_cpp() -> AsyncIterator[Calibration]:
    async with ScriptedServer(LLAMA_CPP) as srv:
        cal = Calibration(srv)
        yield cal
        await cal.transport.aclose()


async def test_streamed_usage_calibrates_without_the_fallback() -> None:
    async with ScriptedServer(Script(ttft_s=0.002, itl_s=0.001, template_tokens=8)) as srv:
        cal = Calibration(srv)
        synth = PromptSynthesizer(seed=0)
        res = await cal.run(synth)
        await cal.transport.aclose()
    assert res["calibrated"] and res["method"] == "stream" and cal.probes == 0
    assert res["samples"] == [(32, 40), (256, 264)]
    assert synth.tokens_per_word == pytest.approx(1.0) and synth.overhead_tokens == pytest.approx(8.0)
    assert all(b["stream"] is True for b in srv.requests)


async def test_a_stream_without_usage_falls_back_to_non_streamed_answers(llama_cpp: Calibration) -> None:
    synth = PromptSynthesizer(seed=0)
    res = await llama_cpp.run(synth)
    assert res["calibrated"] and res["method"] == "non-stream" and llama_cpp.probes == 2
    # the first stream showed no usage: the second text goes straight to the fallback
    assert [b["stream"] for b in llama_cpp.srv.requests] == [True, False, False]
    assert res["samples"] == [(32, round(32 * 1.1) + 8), (256, round(256 * 1.1) + 8)]
    for target in (64, 128, 512, 2000):  # what the server will count for the run's prompts
        words = synth.words_for(target)
        assert abs(round(words * 1.1) + 8 - target) <= max(1, 0.01 * target)


async def test_neither_stream_nor_answer_has_usage(llama_cpp: Calibration) -> None:
    llama_cpp.opts.extra_body = {"script": {"answer_usage": False}}
    synth = PromptSynthesizer(seed=0)
    res = await llama_cpp.run(synth)
    assert res == {
        "calibrated": False,
        "method": None,
        "reason": "the server streams no usage.prompt_tokens and "
        "the non-streamed answer has no usage.prompt_tokens either",
    }
    assert (synth.tokens_per_word, synth.overhead_tokens) == (1.0, 0.0)
    res = await llama_cpp.run(synth, with_probe=False)
    assert res == {"calibrated": False, "method": None, "reason": "the server streams no usage.prompt_tokens"}


async def test_a_failed_stream_still_stops_the_run(llama_cpp: Calibration) -> None:
    llama_cpp.opts.extra_body = {"script": {"status": 503}}
    with pytest.raises(TargetError, match="calibration request failed"):
        await llama_cpp.run(PromptSynthesizer(seed=0))
    assert llama_cpp.probes == 0


def _bpe(path: Path) -> Any:
    """A BPE tokenizer trained here on the prompt words: most words one token, some two."""
    tokenizers = pytest.importorskip("tokenizers", reason="optional extra loadgen[tokenizer] is not installed")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=3000, special_tokens=["[UNK]"], show_progress=False)
    tok.train_from_iterator([" ".join(default_corpus())] * 4, trainer)
    tok.save(str(path))
    return tok


def test_with_the_servers_tokenizer_the_template_overhead_is_counted_not_fitted(tmp_path: Path) -> None:
    # issue 39, defect 5: words of one or two tokens bend the two-point fit (its intercept
    # was 7 here for a 3-token template), so every prompt came out 4 tokens short
    tok = _bpe(tmp_path / "tokenizer.json")
    per_word = max(len(tok.encode(w, add_special_tokens=False).ids) for w in default_corpus())
    assert per_word <= 3  # a word boundary misses a target by less than a word's tokens
    out = tmp_path / "r"
    with ScriptedServerProcess(
        Script(ttft_s=0.002, itl_s=0.001, tokenizer=str(tmp_path / "tokenizer.json"), template_tokens=3)
    ) as srv:
        flags = [
            "--api",
            "chat",
            "--prompt-tokens",
            "200",
            "--output-tokens",
            "2",
            "--concurrency",
            "4",
            "--requests",
            "16",
            "--quiet",
        ]
        tokenizer = ["--tokenizer", str(tmp_path / "tokenizer.json")]
        res = CliRunner().invoke(app, ["run", "--url", srv.url, *flags, *tokenizer, "--out", str(out)])
    assert res.exit_code == 0 and "the tokenizer counts" not in res.output, res.output
    assert json.loads((out / "run.json").read_text())["calibration"]["overhead_tokens"] == 3.0
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    short = [r["target_prompt_tokens"] - r["prompt_tokens"] for r in records]
    assert len(records) == 16 and all(0 <= d < per_word for d in short), short


def test_a_tokenizer_that_is_not_the_servers_is_one_warning_line(tmp_path: Path) -> None:
    _bpe(tmp_path / "tokenizer.json")  # the server counts 1.3 tokens per word, not with this
    out = tmp_path / "r"
    with ScriptedServerProcess(Script(ttft_s=0.002, itl_s=0.001, tokens_per_word=1.3)) as srv:
        flags = ["--api", "chat", "--prompt-tokens", "64", "--output-tokens", "2", "--requests", "2", "--quiet"]
        tokenizer = ["--tokenizer", str(tmp_path / "tokenizer.json")]
        res = CliRunner().invoke(app, ["run", "--url", srv.url, *flags, *tokenizer, "--out", str(out)])
    assert res.exit_code == 0, res.output
    warnings = [line for line in res.output.splitlines() if "the tokenizer counts the calibration prompts" in line]
    assert len(warnings) == 1 and "is not the served model's?" in warnings[0], res.output
