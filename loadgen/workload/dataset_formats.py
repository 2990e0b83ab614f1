"""The entry formats of a dataset file: one parsed object (a JSON entry, a CSV record, a
Parquet row) made into ``(prompt, recorded answer, recorded output_tokens)``, or None for
a ShareGPT entry without a human turn (see :mod:`loadgen.workload.datasets`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from loadgen.errors import WorkloadError
from loadgen.records import ChatMessage, Prompt
from loadgen.workload.distributions import MAX_LENGTH

__all__ = ["ENTRY", "Entry", "csv_entry", "entry_error", "kind_of", "prompt_entry"]

Entry = tuple[Prompt, str | None, int | None]  # prompt, recorded answer, recorded output_tokens
_HUMAN = ("human", "user")
_GPT = ("gpt", "assistant", "chatgpt", "bard", "model")


def entry_error(path: str, where: str, field_: str | None, message: str) -> WorkloadError:
    return WorkloadError(message, source=f"{path}: {where}", key=field_)


def _type(v: Any) -> str:
    return {
        str: "a string",
        int: "a number",
        float: "a number",
        list: "an array",
        dict: "an object",
        bool: "a boolean",
        type(None): "null",
    }.get(type(v), type(v).__name__)


def _text(v: Any, path: str, where: str, fld: str) -> str:
    """A message's content: a string, or OpenAI content parts whose text parts are joined."""
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple, np.ndarray)):
        parts = []
        for i, part in enumerate(v):
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif not (isinstance(part, dict) and part.get("type") not in (None, "text")):
                raise entry_error(
                    path,
                    where,
                    f"{fld}[{i}]",
                    f'expected a text part {{"type": "text", "text": ...}}, got {_type(part)}',
                )
        return "\n".join(parts)
    raise entry_error(path, where, fld, f"expected a string, got {_type(v)}")


def _output(v: Any, path: str, where: str) -> int | None:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            raise entry_error(path, where, "output_tokens", f"expected a whole number >= 1, got {v!r}") from None
    if (
        isinstance(v, (bool, np.bool_))
        or not isinstance(v, (int, np.integer, float))
        or not math.isfinite(v)
        or int(v) != v
        or v < 1
    ):
        raise entry_error(path, where, "output_tokens", f"expected a whole number >= 1, got {v!r}")
    if v > MAX_LENGTH:
        raise entry_error(path, where, "output_tokens", f"at most {MAX_LENGTH:,} tokens, got {v:,}")
    return int(v)


def _sharegpt(path: str, obj: Any, where: str) -> Entry | None:
    if not isinstance(obj, dict) or "conversations" not in obj:
        raise entry_error(
            path,
            where,
            "conversations",
            f"missing (a ShareGPT entry is an object with conversations), got {_type(obj)}",
        )
    conv = obj["conversations"]
    if not isinstance(conv, (list, tuple, np.ndarray)):
        raise entry_error(path, where, "conversations", f"expected an array of turns, got {_type(conv)}")
    turns = list(conv)
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or not isinstance(t.get("from"), str):
            raise entry_error(path, where, f"conversations[{i}].from", "missing or not a string")
        if "value" not in t:
            raise entry_error(path, where, f"conversations[{i}].value", "missing")
    first = next((i for i, t in enumerate(turns) if t["from"].lower() in _HUMAN), None)
    if first is None:
        return None
    prompt = _text(turns[first]["value"], path, where, f"conversations[{first}].value")
    answer = None
    if first + 1 < len(turns) and turns[first + 1]["from"].lower() in _GPT:
        answer = _text(turns[first + 1]["value"], path, where, f"conversations[{first + 1}].value")
    return prompt, answer, None


def _chat(path: str, obj: Any, where: str) -> Entry | None:
    msgs = obj.get("messages") if isinstance(obj, dict) else None
    if not isinstance(msgs, (list, tuple, np.ndarray)) or len(msgs) == 0:
        raise entry_error(path, where, "messages", f"expected a non-empty array of messages, got {_type(msgs)}")
    out: list[ChatMessage] = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise entry_error(path, where, f"messages[{i}].role", "missing or not a string")
        if "content" not in m:
            raise entry_error(path, where, f"messages[{i}].content", "missing")
        out.append({"role": m["role"], "content": _text(m["content"], path, where, f"messages[{i}].content")})
    last = max((i for i, m in enumerate(out) if m["role"] == "user"), default=None)
    if last is None:
        raise entry_error(path, where, "messages", "has no message with role 'user'")
    answer = out[last + 1]["content"] if last + 1 < len(out) and out[last + 1]["role"] == "assistant" else None
    return out[: last + 1], answer, None


def prompt_entry(path: str, obj: Any, where: str) -> Entry | None:
    if not isinstance(obj, dict) or "prompt" not in obj:
        raise entry_error(path, where, "prompt", "missing (each entry needs a prompt)")
    p = obj["prompt"]
    if not isinstance(p, str) or not p.strip():
        raise entry_error(path, where, "prompt", f"expected a non-empty string, got {_type(p)}")
    return p, None, _output(obj.get("output_tokens"), path, where)


ENTRY = {"sharegpt": _sharegpt, "chat": _chat, "prompts": prompt_entry}


def kind_of(obj: Any) -> str | None:
    if isinstance(obj, dict):
        for key, kind in (("conversations", "sharegpt"), ("messages", "chat"), ("prompt", "prompts")):
            if key in obj:
                return kind
    return None


def csv_entry(path: str, rec: Any, where: str) -> Entry:
    p = rec.get("prompt")
    if not p or not p.strip():
        raise entry_error(path, where, "prompt", "empty")
    return p, None, _output(rec.get("output_tokens") or None, path, where)
