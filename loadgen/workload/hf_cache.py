"""``--tokenizer`` by Hugging Face model id, read from the local Hugging Face cache.

``ORG/NAME`` resolves to ``<hub cache>/models--ORG--NAME/snapshots/<revision>/tokenizer.json``
as ``huggingface_hub`` lays it out; the hub cache is ``$HF_HUB_CACHE`` (or its older name
``$HUGGINGFACE_HUB_CACHE``), else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``,
else ``~/.cache/huggingface/hub``. The revision is the one ``refs/main`` names when it holds a
``tokenizer.json``, else the most recently written snapshot that does. Nothing is ever
downloaded: a model that is not in the cache is a one-line error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from loadgen.errors import ConfigError
from loadgen.inputs import input_problem

__all__ = ["hub_cache", "resolve_tokenizer"]

# a repo id as the hub spells them: ORG/NAME, letters, digits, '-', '_', '.'
_MODEL_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def hub_cache(env: Mapping[str, str] | None = None) -> Path:
    """The folder ``huggingface_hub`` caches models in, from the environment as it reads it."""
    env = os.environ if env is None else env
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):  # the second: its older name
        if env.get(name):
            return Path(env[name]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    base = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _snapshot(repo: Path) -> Path | None:
    """The cached ``tokenizer.json`` of one model folder of the cache (None: none there)."""
    snapshots = repo / "snapshots"
    try:
        main = (repo / "refs" / "main").read_text().strip()
    except OSError:
        main = ""
    if main and (snapshots / main / "tokenizer.json").is_file():
        return snapshots / main / "tokenizer.json"
    found = [p for p in snapshots.glob("*/tokenizer.json") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def resolve_tokenizer(text: str, env: Mapping[str, str] | None = None) -> Path:
    """``--tokenizer TEXT`` as a ``tokenizer.json`` path: the file itself, the
    ``tokenizer.json`` in a model folder, or a model id's from the local cache."""
    given = Path(text).expanduser()
    if given.is_dir() and (given / "tokenizer.json").is_file():
        return given / "tokenizer.json"
    if given.exists():
        why = input_problem(given)  # (a FIFO would block the tokenizer's read, out of a signal's reach)
        if why is not None:
            raise ConfigError(f"{text}: {why} (a tokenizer.json, or a folder holding one)", field="tokenizer")
        return given
    if given.suffix == ".json" or not _MODEL_ID.fullmatch(text):
        raise ConfigError(
            f"no such file: {text!r} (a tokenizer.json, a folder holding one, or a Hugging Face "
            "model id ORG/NAME in the local cache)",
            field="tokenizer",
        )
    cache = hub_cache(env)
    org, name = text.split("/")
    repo = cache / f"models--{org}--{name}"
    path = _snapshot(repo)
    if path is None:
        raise ConfigError(
            f"{text} has no tokenizer.json in the local Hugging Face cache ({repo}/snapshots/*/); "
            f"loadgen never downloads: fetch it first (huggingface-cli download {text} tokenizer.json) "
            "or give the file's path",
            field="tokenizer",
        )
    return path
