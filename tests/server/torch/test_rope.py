"""Llama 3's RoPE scaling: which dimensions it slows, by how much, at every position."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch", reason="the torch engine needs torch: pip install -e '.[server]'")

from loadgen.server.engine.models import get_model  # noqa: E402
from loadgen.server.torch.loader import build_model  # noqa: E402
from loadgen.server.torch.model import rope_cos_sin, rope_inv_freq  # noqa: E402

LLAMA3 = (8.0, 1.0, 4.0, 8192)  # Llama-3.1-8B's config.json rope_scaling


def test_llama3_scaling_keeps_fast_slows_slow_and_mixes_between() -> None:
    plain = rope_inv_freq(128, 500000.0).double()
    scaled = rope_inv_freq(128, 500000.0, LLAMA3).double()
    # dimension 0: wavelength 2 pi < 8192 / 4, unchanged
    assert scaled[0].item() == pytest.approx(1.0)
    # dimension 63: wavelength 2 pi * 500000^(126/128) ~ 2.5M > 8192, eight times slower
    assert scaled[63].item() == pytest.approx(plain[63].item() / 8, rel=1e-6)
    # dimension 32: f = 1/sqrt(500000) = 0.0014142, wavelength 4442.9, between 2048 and
    # 8192: mix = (8192 / 4442.9 - 1) / 3 = 0.28128, f' = f (0.28128 + 0.71872 / 8) = 5.2485e-4
    assert plain[32].item() == pytest.approx(0.0014142136, rel=1e-6)
    assert scaled[32].item() == pytest.approx(5.2485e-4, rel=1e-4)
    assert bool((scaled <= plain + 1e-12).all())


def test_scaling_changes_angles_at_short_positions_too() -> None:
    positions = torch.tensor([100])
    cos_plain, _ = rope_cos_sin(positions, 128, 500000.0, torch.float64)
    cos_scaled, _ = rope_cos_sin(positions, 128, 500000.0, torch.float64, LLAMA3)
    assert torch.equal(cos_plain[0, :20], cos_scaled[0, :20])  # fast dimensions: the same
    assert not torch.allclose(cos_plain[0, 40:], cos_scaled[0, 40:], atol=0, rtol=1e-9)


def test_llama_presets_carry_their_scaling_and_the_model_applies_it() -> None:
    assert get_model("llama-3.1-8b").rope_scaling == LLAMA3
    assert get_model("llama-3.2-1b").rope_scaling == (32.0, 1.0, 4.0, 8192)
    assert get_model("tiny").rope_scaling is None
    shape = get_model("tiny")  # head_dim 32: its slow dimensions have wavelengths > 8192
    plain = build_model(shape, device="cpu", dtype=torch.float32, seed=3)
    scaled = build_model(dataclasses.replace(shape, rope_scaling=LLAMA3), device="cpu", dtype=torch.float32, seed=3)
    ids = list(range(10, 42))
    a, b = plain.reference_logits(ids), scaled.reference_logits(ids)
    assert torch.equal(a[0], b[0])  # position 0: no rotation at all
    assert (a[1:] - b[1:]).abs().max().item() > 1e-3  # later positions rotate differently
