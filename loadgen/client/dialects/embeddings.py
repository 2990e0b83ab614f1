"""The ``embeddings`` dialect: OpenAI's (and vLLM's, TEI's, SGLang's) ``POST /v1/embeddings``.

The body is ``{"model", "input", "encoding_format": "float"}``: ``input`` one text, or a
list of texts when the request sends several (``--batch-size``). The answer is one JSON
object whose ``data`` list holds an embedding per input (a count that differs is
``invalid_response``); ``usage.prompt_tokens`` is the request's input tokens.
"""

from __future__ import annotations

from typing import Any

from loadgen.client.dialects.base import AnswerInfo, DialectOptions
from loadgen.client.dialects.nonstream import NonStreamed, error_text, prompt_text, split_text
from loadgen.records import RequestSpec

__all__ = ["Embeddings"]


class Embeddings(NonStreamed):
    name = "embeddings"
    path = "/v1/embeddings"
    description = "OpenAI embeddings (POST /v1/embeddings, --batch-size inputs, not streamed)"
    results_key = "data"

    def build_body(self, spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
        n = options.inputs_for(spec.index)
        text = prompt_text(spec)
        body: dict[str, Any] = {
            "model": options.model,
            "input": text if n == 1 else split_text(text, n),
            "encoding_format": "float",
        }
        if options.extra_body:
            body.update(options.extra_body)
        return body

    def inputs_sent(self, body: dict[str, Any]) -> int:
        given = body.get("input")
        return len(given) if isinstance(given, list) else 1

    def parse_answer(self, obj: dict[str, Any]) -> AnswerInfo:
        data = obj.get("data")
        vendor = obj.get("loadgen")
        return AnswerInfo(
            self._prompt_count(obj),
            len(data) if isinstance(data, list) else None,
            error_text(obj.get("error")),
            vendor if isinstance(vendor, dict) else None,
        )
