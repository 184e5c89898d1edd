"""Intervals of a binomial proportion."""

from __future__ import annotations

from scipy.stats import norm

__all__ = ["wilson_interval"]


def wilson_interval(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of ``successes / trials``.

    Parameters
    ----------
    successes, trials : int
        Counts, ``0 <= successes <= trials``, ``trials >= 1``.
    level : float
        Coverage in (0, 1).

    Returns
    -------
    (float, float)
        ``(centre -/+ half) / (1 + z^2 / n)`` with ``centre = p + z^2 / (2n)`` and
        ``half = z * sqrt(p (1 - p) / n + z^2 / (4 n^2))``; unlike the Wald interval it stays in
        [0, 1] and is not empty at 0 or n successes.

    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, trials >= 1; got {successes}/{trials}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    z = float(norm.ppf(0.5 + level / 2))
    n = float(trials)
    p = successes / n
    denominator = 1 + z * z / n
    centre = p + z * z / (2 * n)
    half = z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    return max(0.0, (centre - half) / denominator), min(1.0, (centre + half) / denominator)
