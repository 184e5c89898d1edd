"""The response models as a judge ranks them: win rates and Bradley-Terry strengths.

Only the judge's both-order debiased verdicts count: a pair judged validly in both orders gives
the common choice when the orders agree and a tie when they disagree (so a judge's position
bias cannot make a model win). Pairs whose importer named no response models (JudgeBench's
pairs share one) are left out; intervals resample whole question groups.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.services.evidence.judge_verdicts import common_or_tie
from app.services.metrics.judge_analysis import JudgeVerdicts, PairFacts
from app.stats.bootstrap import Estimate, group_multiplicities, percentile_interval
from app.stats.bradley_terry import bradley_terry, game_matrix, win_rates
from app.tables import Choice

__all__ = ["debiased_choice", "model_strengths"]

_TIE = Choice.tie.value


def debiased_choice(ab: str, ba: str) -> str:
    """The pair's verdict from its two orders' identities: the common one, else a tie."""
    return common_or_tie((ab, ba))


def model_strengths(
    verdicts: JudgeVerdicts, facts: dict[int, PairFacts], *, resamples: int, seed: int
) -> dict[str, Any] | None:
    """Each response model's win rate and Bradley-Terry strength under one judge.

    Parameters
    ----------
    verdicts
        The judge's retained pairs with their ``(AB, BA)`` identities.
    facts
        Each pair's facts (group and the two response models).
    resamples, seed
        Group-bootstrap resamples of the intervals and their root seed.

    Returns
    -------
    dict or None
        None when fewer than two models play a game. Otherwise ``games`` (pairs counted),
        ``ties``, and ``models``: one row per model, strongest first, with ``model``,
        ``games``, ``win_rate`` and ``strength`` (centred log-strength), each with ``_ci``
        and ``_ci_reason`` (too few groups for an interval).

    """
    ids = [
        i
        for i in sorted(verdicts.choices)
        if facts[i].model_a and facts[i].model_b and facts[i].model_a != facts[i].model_b
    ]
    names = sorted({m for i in ids for m in (facts[i].model_a, facts[i].model_b) if m})
    if len(names) < 2:
        return None
    index = {name: k for k, name in enumerate(names)}
    first = np.array([index[str(facts[i].model_a)] for i in ids], dtype=np.intp)
    second = np.array([index[str(facts[i].model_b)] for i in ids], dtype=np.intp)
    choice = [debiased_choice(*verdicts.choices[i]) for i in ids]
    outcome = np.array([1.0 if c == "A" else 0.0 if c == "B" else 0.5 for c in choice])
    groups = np.unique([facts[i].group for i in ids], return_inverse=True)[1].reshape(-1)
    m = len(names)

    def figures(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = game_matrix(first, second, outcome, m, weights)
        return win_rates(w), bradley_terry(w)

    rates, strengths = figures(np.ones(len(ids)))
    n_groups = int(groups.max()) + 1
    draws = group_multiplicities(n_groups, resamples, seed=seed)
    boot = [figures(draws[b][groups].astype(np.float64)) for b in range(resamples)]
    boot_rates = np.array([r for r, _ in boot]).reshape(resamples, m)
    boot_strengths = np.array([s for _, s in boot]).reshape(resamples, m)
    played = np.bincount(first, minlength=m) + np.bincount(second, minlength=m)

    def estimate(value: float, replicates: np.ndarray, name: str) -> dict[str, Any]:
        est = Estimate.of(value, percentile_interval(replicates), resamples, n_groups)
        return {name: value, f"{name}_ci": est.ci, f"{name}_ci_reason": est.reason}

    rows = [
        {
            "model": names[k],
            "games": int(played[k]),
            **estimate(float(rates[k]), boot_rates[:, k], "win_rate"),
            **estimate(float(strengths[k]), boot_strengths[:, k], "strength"),
        }
        for k in np.argsort(-strengths, kind="stable")
    ]
    return {"games": len(ids), "ties": choice.count(_TIE), "models": rows}
