"""A real model's tokenizer behind the API's :class:`~loadgen.server.tokenizer.Tokenizer`
protocol: byte-level BPE from ``tokenizers``, the ChatML chat template, streamed
detokenisation and ``stop`` strings matched on text.

The chat template is SmolLM2-Instruct's (the GGUF file's ``tokenizer.chat_template``,
a Jinja template, rendered here in Python): when the first message is not a system
message a default system message comes first; each message is
``<|im_start|>{role}\\n{content}<|im_end|>\\n``; the generation prompt
``<|im_start|>assistant\\n`` ends the prompt. Control tokens (``<|im_start|>``...) in the
text are encoded as themselves, as in vLLM.

Streaming: ids are turned into text with ``tokenizers.decoders.DecodeStream`` (which
holds back bytes of an incomplete UTF-8 character); special tokens produce no text.
A ``stop`` string matches anywhere in the generated text (the API hands the stop's
words, re-joined with single spaces); text that could begin a match is held back until
it is decided, and the match and everything after it are not returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from loadgen.errors import ConfigError

__all__ = ["DEFAULT_SYSTEM", "TextStream", "TextTokenizer"]

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


class TextTokenizer:
    """A ``tokenizers`` BPE tokenizer with the ChatML template (see the module docstring)."""

    def __init__(self, tokenizer_file: Path, *, chat_template: str = "", eos_token_id: int | None = None) -> None:
        from tokenizers import Tokenizer

        self.backend = Tokenizer.from_file(str(tokenizer_file))  # tokenizers.Tokenizer
        self.vocab_size: int = self.backend.get_vocab_size(with_added_tokens=True)
        self.eos_token_id = eos_token_id
        self.chat_template = chat_template
        if chat_template and ("<|im_start|>" not in chat_template or DEFAULT_SYSTEM not in chat_template):
            raise ConfigError(
                "the model's chat template is not SmolLM2's ChatML template; only that one is implemented"
            )

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` (no BOS is added: SmolLM2 adds none)."""
        ids: list[int] = self.backend.encode(text, add_special_tokens=False).ids
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (special tokens skipped)."""
        text: str = self.backend.decode(list(ids), skip_special_tokens=True)
        return text

    def render_chat(self, messages: Iterable[tuple[str, str]]) -> str:
        """The prompt text of ``(role, content)`` pairs, generation prompt included."""
        parts: list[str] = []
        for i, (role, content) in enumerate(messages):
            if i == 0 and role != "system":
                parts.append(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n")
            parts.append(f"<|im_start|>{role}\n{content}<|im_end|>\n")
        parts.append("<|im_start|>assistant\n")
        return "".join(parts)

    def apply_chat_template(self, messages: Iterable[tuple[str, str]]) -> list[int]:
        """Ids of a chat prompt (:meth:`render_chat` encoded)."""
        return self.encode(self.render_chat(messages))

    def output_stream(self, stop: Sequence[Sequence[str]]) -> TextStream:
        """A :class:`TextStream` for one generation; ``stop`` holds each stop's words."""
        return TextStream(self, [" ".join(words) for words in stop if words])


class TextStream:
    """Streamed detokenisation of one generation with text ``stop`` strings."""

    __slots__ = ("_decoder", "_held", "_stops", "_tok", "matched")

    def __init__(self, tok: TextTokenizer, stops: Sequence[str] = ()) -> None:
        from tokenizers.decoders import DecodeStream

        self._tok = tok
        self._decoder = DecodeStream(skip_special_tokens=True)
        self._stops = [s for s in stops if s]
        self._held = ""
        self.matched: str | None = None

    def push(self, token_id: int, *, may_stop: bool = True) -> tuple[str, bool]:
        """Add one generated id; return ``(text to release now, stopped)``."""
        piece = self._decoder.step(self._tok.backend, token_id) or ""
        if not self._stops:
            return piece, False
        held = self._held + piece
        if may_stop:
            hits = [(held.find(s), s) for s in self._stops if s in held]
            if hits:
                at, stop = min(hits)
                self._held = ""
                self.matched = stop
                return held[:at], True
        keep = self._partial(held)
        self._held = held[len(held) - keep :] if keep else ""
        return held[: len(held) - keep], False

    def flush(self) -> str:
        """The text still held back."""
        held, self._held = self._held, ""
        return held

    def _partial(self, text: str) -> int:
        """Length of the longest end of ``text`` that begins some stop string."""
        best = 0
        for stop in self._stops:
            for k in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:k]):
                    best = k
                    break
        return best
