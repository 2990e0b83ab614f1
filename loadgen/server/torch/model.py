"""A Llama-style decoder in plain torch: RMSNorm, RoPE, grouped-query attention, SwiGLU.

The model works on a *flattened* batch: ``T`` tokens of any number of sequences, each
with its own position. Attention is the caller's: :meth:`LlamaModel.forward` takes an
``attention(layer, q, k, v)`` callable, so the engine's runner plugs in paged attention
over the KV cache and :meth:`LlamaModel.reference_logits` a plain causal attention over
one whole sequence (the ground truth the tests compare the paged path with).

Layout of the weights (per layer): ``qkv`` is Q, K and V stacked (``[q_size + 2 kv_size,
hidden]``), ``gate_up`` the SwiGLU gate and up projections stacked; all matrices are
``[out, in]`` as in ``torch.nn.Linear``. Query head ``h`` uses KV head ``h // group``
(``group = num_heads // num_kv_heads``), as in Hugging Face's ``repeat_kv``. RoPE rotates
the two halves of each head (Hugging Face's ``rotate_half`` convention).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from loadgen.server.engine.models import ModelShape

__all__ = ["Attention", "LlamaLayer", "LlamaModel", "apply_rope", "rms_norm", "rope_cos_sin", "rope_inv_freq"]

# attention(layer_index, q [T, H, D], k [T, Hkv, D], v [T, Hkv, D]) -> [T, H * D]
Attention = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm computed in float32, as Hugging Face's ``LlamaRMSNorm``."""
    dtype = x.dtype
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(dtype)


def rope_inv_freq(
    head_dim: int,
    theta: float,
    scaling: tuple[float, float, float, int] | None = None,
    device: torch.device | None = None,
) -> torch.Tensor:
    """The rotary frequencies (radians per position), ``[head_dim // 2]``.

    With Llama 3's ``scaling = (factor, low, high, original_len)``: a dimension whose
    wavelength ``2 pi / f`` is shorter than ``original_len / high`` keeps ``f``; one longer
    than ``original_len / low`` turns ``factor`` times slower; in between the two are mixed
    linearly in ``original_len / wavelength``. Since the angle at position ``p`` is
    ``p * f``, this changes every position's rotation in the slow dimensions.
    """
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float()
    inv_freq = 1.0 / (theta ** (exponents / head_dim))
    if scaling is None:
        return inv_freq
    factor, low, high, original = scaling
    wavelength = 2 * math.pi / inv_freq
    mix = ((original / wavelength - low) / (high - low)).clamp(0.0, 1.0)
    # mix 1: short wavelengths (< original / high), unchanged; 0: long ones, slowed down
    return mix * inv_freq + (1.0 - mix) * inv_freq / factor


def rope_cos_sin(
    positions: torch.Tensor,
    head_dim: int,
    theta: float,
    dtype: torch.dtype,
    scaling: tuple[float, float, float, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``cos`` and ``sin`` of the rotary angles, ``[T, head_dim // 2]`` each."""
    inv_freq = rope_inv_freq(head_dim, theta, scaling, positions.device)
    freqs = positions.float()[:, None] * inv_freq[None, :]
    return freqs.cos().to(dtype), freqs.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (``[T, heads, D]``) by the angles of its tokens."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


class LlamaLayer(nn.Module):
    """One decoder layer's weights (the computation is in :meth:`LlamaModel.forward`)."""

    def __init__(self, cfg: ModelShape, device: torch.device | str, dtype: torch.dtype) -> None:
        super().__init__()
        d, f = cfg.hidden_size, cfg.intermediate_size

        def param(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(*shape, device=device, dtype=dtype))

        self.attn_norm = param(d)
        self.qkv = param(cfg.q_size + 2 * cfg.kv_size, d)
        self.o = param(d, cfg.q_size)
        self.mlp_norm = param(d)
        self.gate_up = param(2 * f, d)
        self.down = param(d, f)


class LlamaModel(nn.Module):
    """The decoder. Build it on ``device="meta"`` and fill it with :meth:`init_random` or
    ``load_state_dict(..., assign=True)`` to avoid allocating twice."""

    def __init__(
        self, cfg: ModelShape, *, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
    ) -> None:
        super().__init__()
        self.cfg = cfg

        def param(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(*shape, device=device, dtype=dtype))

        self.embed = param(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(LlamaLayer(cfg, device, dtype) for _ in range(cfg.num_layers))
        self.norm = param(cfg.hidden_size)
        self.lm_head: nn.Parameter | None = None
        if not cfg.tie_word_embeddings:
            self.lm_head = param(cfg.vocab_size, cfg.hidden_size)

    # ------------------------------------------------------------------ weights
    @torch.no_grad()
    def init_random(self, seed: int) -> None:
        """Seeded random weights: norms 1, every matrix ``N(0, 1/fan_in)``.

        Each tensor draws from its own generator seeded by ``seed`` and its name, so the
        weights do not depend on the order of initialisation (equal on equal devices).
        """
        for name, param in self.named_parameters():
            if name.endswith("norm"):
                param.fill_(1.0)
                continue
            gen = torch.Generator(device=param.device)
            gen.manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) & 0x7FFF_FFFF_FFFF)
            param.normal_(0.0, 1.0 / math.sqrt(param.shape[-1]), generator=gen)

    @property
    def head_weight(self) -> torch.Tensor:
        """The LM head (the embedding when tied)."""
        return self.embed if self.lm_head is None else self.lm_head

    @property
    def weight_bytes(self) -> int:
        """Bytes of all parameters (the tied head counted once)."""
        return sum(p.numel() * p.element_size() for p in self.parameters())

    # ------------------------------------------------------------------ compute
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attention: Attention) -> torch.Tensor:
        """Final-normed hidden states ``[T, hidden]`` of a flattened batch of tokens."""
        cfg = self.cfg
        T = input_ids.shape[0]
        H, Hkv, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        q_size, kv_size, f = cfg.q_size, cfg.kv_size, cfg.intermediate_size
        eps = cfg.rms_norm_eps
        h = F.embedding(input_ids, self.embed)
        cos, sin = rope_cos_sin(positions, D, cfg.rope_theta, h.dtype, cfg.rope_scaling)
        for i, module in enumerate(self.layers):
            layer = cast(LlamaLayer, module)
            x = rms_norm(h, layer.attn_norm, eps)
            qkv = F.linear(x, layer.qkv)
            q = apply_rope(qkv[:, :q_size].view(T, H, D), cos, sin)
            k = apply_rope(qkv[:, q_size : q_size + kv_size].view(T, Hkv, D), cos, sin)
            v = qkv[:, q_size + kv_size :].view(T, Hkv, D)
            h = h + F.linear(attention(i, q, k, v), layer.o)
            x = rms_norm(h, layer.mlp_norm, eps)
            gate_up = F.linear(x, layer.gate_up)
            h = h + F.linear(F.silu(gate_up[:, :f]) * gate_up[:, f:], layer.down)
        return rms_norm(h, self.norm, eps)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits ``[N, vocab]`` of final hidden states ``[N, hidden]``."""
        return F.linear(hidden, self.head_weight).float()

    @torch.inference_mode()
    def reference_logits(self, token_ids: list[int]) -> torch.Tensor:
        """Logits at every position of one sequence, computed the plain way: the whole
        sequence at once, explicit causal softmax attention, no cache (for tests)."""
        device = self.embed.device
        ids = torch.tensor(token_ids, dtype=torch.long, device=device)
        positions = torch.arange(len(token_ids), device=device)
        group = self.cfg.num_heads // self.cfg.num_kv_heads

        def causal(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            T, H, D = q.shape
            qh = q.transpose(0, 1).float()  # [H, T, D]
            kh = k.repeat_interleave(group, dim=1).transpose(0, 1).float()
            vh = v.repeat_interleave(group, dim=1).transpose(0, 1).float()
            scores = qh @ kh.transpose(1, 2) / math.sqrt(D)
            future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
            out = scores.softmax(-1) @ vh  # [H, T, D]
            return out.transpose(0, 1).reshape(T, H * D).to(q.dtype)

        return self.compute_logits(self.forward(ids, positions, causal))
