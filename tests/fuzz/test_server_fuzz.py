"""Fuzz the reference server's request bodies: random JSON (and bytes that are not JSON)
POSTed to a real server on 127.0.0.1, on every generation route. Every answer is a 200 or a
4xx with the API's own error shape (Anthropic's on /v1/messages, OpenAI's elsewhere), never a
5xx, and the server stays healthy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from loadgen.server.api import create_app
from loadgen.server.app import serve_in_thread
from tests.fuzz.strategies import NUMBERS, SCALARS, budget, json_values
from tests.server.helpers import MODEL, make_engine

KEYS = st.sampled_from(
    [
        "model",
        "prompt",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "min_tokens",
        "temperature",
        "stream",
        "stream_options",
        "include_usage",
        "continuous_usage_stats",
        "stop",
        "n",
        "best_of",
        "echo",
        "logprobs",
        "seed",
        "ignore_eos",
        "role",
        "content",
        "type",
        "text",
        "input",
        "instructions",
        "max_output_tokens",
        "system",
        "stop_sequences",
        "input_text",
        "tools",
        "tool_choice",
        "tool_calls",
        "function",
        "name",
        "arguments",
        "x",
    ]
)
ANY = json_values(KEYS, max_leaves=8)
SMALL = st.one_of(st.integers(1, 24), NUMBERS, st.none(), st.text(max_size=3))
TEXT = st.one_of(st.text(max_size=30), st.sampled_from(["hello there", "a b c d", "", " ", "\u2028"]))
MESSAGE = st.one_of(
    st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(["user", "system", "assistant", "", "a b"]), ANY)},
        optional={
            "content": st.one_of(
                TEXT,
                st.lists(
                    st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"])}, optional={"text": TEXT}),
                    max_size=2,
                ),
                ANY,
            )
        },
    ),
    ANY,
)
PART = st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text", "text"])}, optional={"text": TEXT})
ITEM = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "developer", "tool"])},
    optional={
        "type": st.sampled_from(["message", "function_call"]),
        "content": st.one_of(TEXT, st.lists(PART, max_size=2)),
    },
)
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "model": st.one_of(st.just(MODEL), st.text(max_size=5), ANY),
        "prompt": st.one_of(
            TEXT,
            st.lists(st.integers(-2, 40_000), max_size=6),
            st.lists(TEXT, max_size=2),
            st.lists(st.lists(st.integers(0, 100), max_size=3), max_size=2),
            ANY,
        ),
        "messages": st.one_of(st.lists(MESSAGE, max_size=3), ANY),
        "max_tokens": SMALL,
        "max_completion_tokens": SMALL,
        "min_tokens": SMALL,
        "temperature": st.one_of(st.floats(allow_nan=False, allow_infinity=False), SCALARS),
        "stream": st.one_of(st.booleans(), SCALARS),
        "stream_options": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "include_usage": st.one_of(st.booleans(), SCALARS),
                    "continuous_usage_stats": st.one_of(st.booleans(), SCALARS),
                },
            ),
            ANY,
        ),
        "stop": st.one_of(TEXT, st.lists(TEXT, max_size=3), ANY),
        "n": SMALL,
        "best_of": SMALL,
        "echo": SCALARS,
        "logprobs": SCALARS,
        "seed": NUMBERS,
        "ignore_eos": st.one_of(st.booleans(), SCALARS),
        "x": ANY,
        "input": st.one_of(TEXT, st.lists(st.one_of(ITEM, MESSAGE), max_size=3), ANY),
        "instructions": st.one_of(TEXT, ANY),
        "max_output_tokens": SMALL,
        "system": st.one_of(TEXT, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": TEXT})), ANY),
        "stop_sequences": st.one_of(st.lists(TEXT, max_size=3), ANY),
        "previous_response_id": st.one_of(st.none(), TEXT),
    },
)


@st.composite
def bodies(draw: st.DrawFn, path: str) -> dict[str, Any]:
    """A body that would pass (so later checks are reached) with a few fields fuzzed, or any."""
    if draw(st.integers(0, 4)) == 0:
        return draw(FIELDS)
    body: dict[str, Any] = {"model": MODEL, "max_tokens": draw(st.integers(1, 12))}
    text = draw(TEXT.filter(str.strip))
    if path == "/v1/responses":
        del body["max_tokens"]
        body["max_output_tokens"] = draw(st.integers(1, 12))
        body["input"] = draw(
            st.one_of(st.just(text), st.just([{"role": "user", "content": [{"type": "input_text", "text": text}]}]))
        )
    elif path == "/v1/completions":
        body["prompt"] = draw(st.one_of(st.just(text), st.lists(st.integers(4, 99), min_size=1, max_size=5)))
    else:
        body["messages"] = [{"role": "user", "content": text}]
    if draw(st.booleans()):
        body["stream"] = True
        if path.endswith("completions"):
            options = {"include_usage": draw(st.booleans()), "continuous_usage_stats": draw(st.booleans())}
            body["stream_options"] = options
    fuzzed = draw(FIELDS)
    for key in draw(st.lists(st.sampled_from(sorted(fuzzed)), max_size=3, unique=True) if fuzzed else st.just([])):
        body[key] = fuzzed[key]
    return body


ROUTES = st.sampled_from(["/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages"])
_LAST = {  # the event that ends a complete stream, per route
    "/v1/completions": b"data: [DONE]\n\n",
    "/v1/chat/completions": b"data: [DONE]\n\n",
    "/v1/responses": b"event: response.completed\n",
    "/v1/messages": b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
}


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    # a short context keeps every generation short (the sim at 1/100 of real time)
    def app() -> Any:
        return create_app(make_engine(max_model_len=128), model_name=MODEL)

    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        yield c
        assert c.get("/health").status_code == 200  # still healthy after everything


def _check(resp: httpx.Response, path: str, stream: Any) -> None:
    assert resp.status_code == 200 or 400 <= resp.status_code < 500, (resp.status_code, resp.text[:300])
    if resp.status_code != 200:
        answer = resp.json()
        if path == "/v1/messages":
            assert set(answer) == {"type", "error"} and answer["type"] == "error"
            err = answer["error"]
            assert set(err) == {"type", "message"} and err["message"]
            event(f"{resp.status_code} messages {err['type']}")
            return
        err = answer["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"]
        event(f"{resp.status_code} {err['param'] or err['code'] or ''}")
        return
    event(f"200 {path}")
    if stream is True:
        last = resp.content.rfind(b"\n\nevent: ") + 2 if path == "/v1/responses" else -len(_LAST[path])
        assert resp.content[last:].startswith(_LAST[path]) and resp.content.endswith(b"\n\n")
    elif path == "/v1/responses":
        assert resp.json()["object"] == "response" and resp.json()["usage"]["output_tokens"] >= 1
    elif path == "/v1/messages":
        assert resp.json()["type"] == "message" and resp.json()["usage"]["output_tokens"] >= 1
    else:
        assert resp.json()["choices"]


@budget(120)
@given(st.data(), ROUTES)
def test_any_json_body_is_answered_200_or_4xx(client: httpx.Client, data: st.DataObject, path: str) -> None:
    body = data.draw(bodies(path))
    _check(
        client.post(path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"}),
        path,
        body.get("stream"),
    )


NAME = st.one_of(st.sampled_from(["search", "open", ""]), ANY)
CHAT_TOOL = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["function", "x"]),
            "function": st.one_of(
                st.fixed_dictionaries({"name": NAME}, optional={"parameters": ANY}),
                ANY,
            ),
        }
    ),
    ANY,
)
FLAT_TOOL = st.one_of(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["function", "web_search"]), "name": NAME},
        optional={"parameters": ANY, "input_schema": ANY},
    ),
    ANY,
)
CHOICE = st.one_of(
    st.sampled_from(["none", "auto", "required", "any", "x"]),
    st.fixed_dictionaries({"type": st.sampled_from(["function", "tool", "any", "auto", "none"]), "name": NAME}),
    st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries({"name": NAME})}),
    ANY,
)
CALL = st.one_of(
    st.fixed_dictionaries(
        {"id": TEXT, "type": st.just("function"), "function": st.fixed_dictionaries({"name": NAME, "arguments": TEXT})}
    ),
    ANY,
)
HISTORY = {
    "/v1/chat/completions": st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {"role": st.just("assistant"), "content": st.none(), "tool_calls": st.lists(CALL, max_size=2)}
            ),
            st.fixed_dictionaries({"role": st.just("tool"), "tool_call_id": TEXT, "content": st.one_of(TEXT, ANY)}),
            MESSAGE,
        ),
        max_size=3,
    ),
    "/v1/responses": st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {"type": st.just("function_call"), "call_id": st.one_of(TEXT, ANY), "name": NAME},
                optional={"arguments": st.one_of(TEXT, ANY)},
            ),
            st.fixed_dictionaries(
                {"type": st.just("function_call_output"), "call_id": st.one_of(TEXT, ANY)},
                optional={"output": st.one_of(TEXT, st.lists(PART, max_size=2), ANY)},
            ),
            st.fixed_dictionaries(
                {"type": st.just("reasoning")}, optional={"summary": ANY, "content": st.lists(PART, max_size=2)}
            ),
            ITEM,
        ),
        max_size=3,
    ),
    "/v1/messages": st.lists(
        st.fixed_dictionaries(
            {
                "role": st.sampled_from(["user", "assistant"]),
                "content": st.lists(
                    st.one_of(
                        st.fixed_dictionaries(
                            {"type": st.just("tool_use"), "id": st.one_of(TEXT, ANY), "name": NAME},
                            optional={"input": ANY},
                        ),
                        st.fixed_dictionaries(
                            {"type": st.just("tool_result"), "tool_use_id": st.one_of(TEXT, ANY)},
                            optional={"content": st.one_of(TEXT, st.lists(PART, max_size=2), ANY)},
                        ),
                        st.fixed_dictionaries({"type": st.just("thinking"), "thinking": st.one_of(TEXT, ANY)}),
                        PART,
                    ),
                    max_size=3,
                ),
            }
        ),
        max_size=3,
    ),
}


@st.composite
def tool_bodies(draw: st.DrawFn, path: str) -> dict[str, Any]:
    """A passing body with tools, a tool_choice and a tool history, some of them fuzzed."""
    body = draw(bodies(path))
    tools = CHAT_TOOL if path == "/v1/chat/completions" else FLAT_TOOL
    body["tools"] = draw(st.one_of(st.lists(tools, max_size=3), ANY))
    if draw(st.booleans()):
        body["tool_choice"] = draw(CHOICE)
    history = draw(HISTORY[path])
    key = "input" if path == "/v1/responses" else "messages"
    if isinstance(body.get(key), list):
        body[key] = history + body[key]
    return body


TOOL_ROUTES = st.sampled_from(["/v1/chat/completions", "/v1/responses", "/v1/messages"])


@budget(120)
@given(st.data(), TOOL_ROUTES)
def test_bodies_with_tools_are_answered_200_or_4xx(client: httpx.Client, data: st.DataObject, path: str) -> None:
    body = data.draw(tool_bodies(path))
    _check(
        client.post(path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"}),
        path,
        body.get("stream"),
    )


@budget(100)
@given(
    ROUTES,
    st.one_of(
        st.binary(max_size=60),
        ANY.map(lambda v: json.dumps(v).encode()),
        st.integers(1, 200_000).map(lambda n: b"[" * n),
        st.text(max_size=40).map(str.encode),
    ),
)
def test_any_bytes_are_answered_200_or_4xx(client: httpx.Client, path: str, raw: bytes) -> None:
    try:
        stream = json.loads(raw).get("stream")
    except (ValueError, RecursionError, AttributeError):
        stream = None
    _check(client.post(path, content=raw, headers={"Content-Type": "application/json"}), path, stream)


POOLING = st.sampled_from(["/v1/embeddings", "/v1/rerank", "/v1/score"])
POOL_FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "model": st.one_of(st.just(MODEL), st.text(max_size=5), ANY),
        "input": st.one_of(
            TEXT,
            st.lists(TEXT, max_size=3),
            st.lists(st.integers(-2, 200_000), max_size=6),
            st.lists(st.lists(st.integers(0, 100), max_size=3), max_size=2),
            ANY,
        ),
        "encoding_format": st.one_of(st.sampled_from(["float", "base64", "hex"]), ANY),
        "dimensions": st.one_of(st.integers(-2, 5000), ANY),
        "query": st.one_of(TEXT, ANY),
        "documents": st.one_of(st.lists(st.one_of(TEXT, st.fixed_dictionaries({"text": TEXT})), max_size=3), ANY),
        "top_n": st.one_of(st.integers(-2, 5), ANY),
        "return_documents": ANY,
        "text_1": st.one_of(TEXT, st.lists(TEXT, max_size=3), ANY),
        "text_2": st.one_of(TEXT, st.lists(TEXT, max_size=3), ANY),
        "x": ANY,
    },
)


@budget(100)
@given(POOLING, POOL_FIELDS)
def test_pooling_bodies_are_answered_200_or_4xx(client: httpx.Client, path: str, body: dict[str, Any]) -> None:
    resp = client.post(path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    assert resp.status_code == 200 or 400 <= resp.status_code < 500, (resp.status_code, resp.text[:300])
    got = resp.json()
    if resp.status_code != 200:
        assert set(got["error"]) == {"message", "type", "param", "code"} and got["error"]["message"]
        event(f"{resp.status_code} {got['error']['param'] or got['error']['code'] or ''}")
        return
    event(f"200 {path}")
    assert got["usage"]["total_tokens"] >= 1
    assert got.get("data") or got.get("results") is not None
