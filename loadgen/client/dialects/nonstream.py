"""What the non-streamed dialects share: :class:`NonStreamed` (one JSON answer, OpenAI's
Bearer key, ``usage`` read from the answer) and :func:`split_text`, which cuts a request's
prompt into its inputs.

A request's prompt (``--prompt-tokens`` long) is cut into as many inputs as the request
sends (``DialectOptions.inputs_for``): its words shared out evenly, each input at least one
word, so the prompt tokens of a request stay what the workload drew however many inputs
carry them.
"""

from __future__ import annotations

from typing import Any

from loadgen.client.dialects.base import Dialect, DialectOptions, EventInfo
from loadgen.records import RequestSpec

__all__ = ["NonStreamed", "error_text", "prompt_text", "split_text"]


def prompt_text(spec: RequestSpec) -> str:
    """The prompt as one text (chat messages' contents joined)."""
    prompt = spec.prompt
    if isinstance(prompt, list):
        return "\n".join(str(m.get("content", "")) for m in prompt)
    return prompt


def split_text(text: str, n: int) -> list[str]:
    """``text`` cut into ``n`` >= 1 pieces of whole words, as even as words allow; a text of
    fewer words than ``n`` repeats its words so that no piece is empty."""
    words = text.split() or ["x"]
    if len(words) < n:
        words = (words * (n // len(words) + 1))[:n]
    m = len(words)
    return [" ".join(words[(i * m) // n : ((i + 1) * m) // n]) for i in range(n)]


def error_text(err: Any) -> str | None:
    """An answer's ``error`` value as a message (None: no error)."""
    if err is None:
        return None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


class NonStreamed(Dialect):
    """A dialect whose answer is one JSON object (embeddings, rerank, score)."""

    streams = False
    skim_answer = True  # parse_answer reads no array of numbers (embeddings' vectors)

    def non_stream_body(self, spec: RequestSpec, options: DialectOptions) -> dict[str, Any]:
        return self.build_body(spec, options)  # the request is not streamed anyway

    def parse_event(self, obj: dict[str, Any]) -> EventInfo:
        return EventInfo(False, None, None, error_text(obj.get("error")))  # never streamed: nothing is output

    def usage_counts(self, usage: dict[str, Any]) -> tuple[Any, Any]:
        prompt = usage.get("prompt_tokens")
        return (usage.get("total_tokens") if prompt is None else prompt), None

    def _prompt_count(self, obj: dict[str, Any]) -> Any:
        """The usage's prompt count as written; a ``usage`` that is not an object is returned
        as it is, so that the caller finds it invalid (None: no usage)."""
        usage = self.answer_usage(obj)
        return obj.get("usage") if usage is None else self.usage_counts(usage)[0]
