"""Comparisons of residual-stream vectors that allow float rounding at each layer's own scale."""

from __future__ import annotations

import numpy as np


def assert_close_to_scale(
    got: np.ndarray,
    want: np.ndarray,
    *,
    atol: float = 1e-4,
    rtol: float = 1e-5,
    rel_to_max: float = 1e-6,
) -> None:
    """``|got - want| <= atol + rtol |want| + rel_to_max max|want|``, the max per vector.

    Different kernels (padded vs unpadded attention, cached vs full forward) round differently;
    through 30 blocks the difference grows with the layer's scale, and SmolLM2 has coordinates
    of a few hundred next to ones of size 1, so an element-wise relative bound is too strict for
    the small coordinates of a large vector and an absolute one too loose for small layers.
    """
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    bound = atol + rtol * np.abs(want) + rel_to_max * np.abs(want).max(axis=-1, keepdims=True)
    excess = np.abs(got - want) - bound
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    limit = np.broadcast_to(bound, excess.shape)[worst]
    assert (excess <= 0).all(), f"at {worst}: got {got[worst]}, want {want[worst]}, bound {limit}"
