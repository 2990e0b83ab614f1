"""Binned quantiles a few bins at a time equal those of all samples at once."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.report import plotdata
from loadgen.report.plotdata import NO_BIN, bin_edges, bin_ids, quantiles_by_bin


def naive(ids: np.ndarray, values: np.ndarray, n_bins: int) -> tuple[dict[int, np.ndarray], np.ndarray]:
    out = {q: np.full(n_bins, np.nan) for q in (50, 99)}
    top = np.full(n_bins, np.nan)
    for b in range(n_bins):
        mine = values[ids == b]
        if mine.size:
            out[50][b], out[99][b] = np.percentile(mine, [50, 99])
            top[b] = mine.max()
    return out, top


@pytest.mark.parametrize("group", [1, 50, 1 << 21])
def test_weighted_items_in_groups_equal_repeated_samples(monkeypatch: pytest.MonkeyPatch, group: int) -> None:
    rng = np.random.default_rng(2)
    n = 5000
    t = np.sort(rng.uniform(0, 100, n)) + rng.normal(0, 3, n)  # roughly in time order, as chunks are
    values = rng.lognormal(0, 1, n)
    counts = rng.choice([1, 1, 1, 2, 5], n)
    edges = bin_edges(float(t.min()), float(t.max()), max_bins=40)
    n_bins = edges.size - 1
    want, want_top = naive(np.repeat(bin_ids(t, edges), counts), np.repeat(values, counts), n_bins)
    ids = bin_ids(t, edges)
    ids[::7] = NO_BIN  # items left out
    keep = ids != NO_BIN
    want_kept, _ = naive(np.repeat(ids[keep], counts[keep]), np.repeat(values[keep], counts[keep]), n_bins)
    monkeypatch.setattr(plotdata, "_GROUP", group)
    got, top = quantiles_by_bin(bin_ids(t, edges), n_bins, lambda at: values[at], (50, 99), counts=counts)
    for q in (50, 99):
        np.testing.assert_array_equal(got[q], want[q])
    np.testing.assert_array_equal(top, want_top)
    got_kept, _ = quantiles_by_bin(ids, n_bins, lambda at: values[at], (50, 99), counts=counts)
    np.testing.assert_array_equal(got_kept[50], want_kept[50])
    assert np.isnan(want[50]).sum() < n_bins // 2  # bins with samples are compared, not only NaNs


@pytest.mark.parametrize("group", [1, 300, 1 << 21])
def test_unweighted_items_with_nan_and_ties_equal_numpy(monkeypatch: pytest.MonkeyPatch, group: int) -> None:
    rng = np.random.default_rng(5)
    n = 3000
    t = np.sort(rng.uniform(0, 50, n))
    values = np.round(rng.lognormal(0, 1, n), 1)  # many ties
    edges = bin_edges(float(t.min()), float(t.max()), max_bins=25)
    n_bins = edges.size - 1
    ids = bin_ids(t, edges)
    values[ids == 3] = np.where(rng.random(int((ids == 3).sum())) < 0.5, np.nan, values[ids == 3])
    want, want_top = naive(ids, values, n_bins)
    monkeypatch.setattr(plotdata, "_GROUP", group)
    got, top = quantiles_by_bin(ids, n_bins, lambda at: values[at], (50, 99))
    for q in (50, 99):
        np.testing.assert_array_equal(got[q], want[q])
    np.testing.assert_array_equal(top, want_top)
    assert np.isnan(want[50][3]) and np.isfinite(want[50]).sum() > n_bins // 2
