"""The ``rerank`` and ``score`` dialects: a query against documents, one JSON answer.

``rerank``: ``POST /v1/rerank`` with ``{"model", "query", "documents": [...], "top_n"}``
(vLLM's, Cohere's and Jina's shape); the answer's ``results`` list holds one
``{index, relevance_score}`` per document (``top_n`` is the documents sent, so a shorter
list is ``invalid_response``). ``score``: vLLM's ``POST /v1/score`` with
``{"model", "text_1": query, "text_2": [...documents]}``; its ``data`` list holds one
score per document. Documents per request: ``--documents``. The prompt is cut into the
query (its first share) and the documents (:func:`~.nonstream.split_text`). Usage: vLLM
writes ``usage.prompt_tokens`` and ``total_tokens`` (rerank: ``total_tokens`` only, some
versions); the prompt count is ``prompt_tokens``, else ``total_tokens`` (no output tokens).
"""

from __future__ import annotations

from typing import Any

from loadgen.client.dialects.base import AnswerInfo, DialectOptions
from loadgen.client.dialects.nonstream import NonStreamed, error_text, prompt_text, split_text
from loadgen.records import RequestSpec

__all__ = ["Rerank", "Score"]


def _query_and_documents(spec: RequestSpec, options: DialectOptions) -> tuple[str, list[str]]:
    n = options.inputs_for(spec.index)
    pieces = split_text(prompt_text(spec), n + 1)
    return pieces[0], pieces[1:]


class _QueryDocuments(NonStreamed):
    docs_key = ""

    def inputs_sent(self, body: dict[str, Any]) -> int:
        docs = body.get(self.docs_key)
        return len(docs) if isinstance(docs, list) else 1

    def parse_answer(self, obj: dict[str, Any]) -> AnswerInfo:
        results = obj.get(self.results_key)
        vendor = obj.get("loadgen")
        return AnswerInfo(
            self._prompt_count(obj),
            len(results) if isinstance(results, list) else None,
            error_text(obj.get("error")),
            vendor if isinstance(vendor, dict) else None,
        )


class Rerank(_QueryDocuments):
    name = "rerank"
    path = "/v1/rerank"
    description = "rerank (POST /v1/rerank, a query and --documents documents, not streamed)"
    results_key = "results"
    docs_key = "documents"

    def build_body(self, spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
        query, docs = _query_and_documents(spec, options)
        body: dict[str, Any] = {"model": options.model, "query": query, "documents": docs, "top_n": len(docs)}
        if options.extra_body:
            body.update(options.extra_body)
        return body


class Score(_QueryDocuments):
    name = "score"
    path = "/v1/score"
    description = "vLLM score (POST /v1/score, text_1 against --documents texts, not streamed)"
    results_key = "data"
    docs_key = "text_2"

    def build_body(self, spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
        query, docs = _query_and_documents(spec, options)
        body: dict[str, Any] = {"model": options.model, "text_1": query, "text_2": docs}
        if options.extra_body:
            body.update(options.extra_body)
        return body
