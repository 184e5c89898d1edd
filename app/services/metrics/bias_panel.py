"""The position-bias panel of pairwise judges: rates with group-bootstrap intervals, side by side.

Every figure is a rate, a ratio of two counts summed over a judge's retained pairs (valid in both
orders), so one group bootstrap (:func:`app.stats.bootstrap.bootstrap_ratios`) gives all of them
their intervals on the same resamples. Choices are identities (``A`` is the response stored as
A, whichever slot it was shown in): in the AB order A is shown first, in the BA order B is.

Each judge's figures are measured on its own retained pairs. Two or more judges are also compared
on the pairs all of them retained (the analysis set of :mod:`app.services.metrics.judge_analysis`),
every judge's figures on the same resamples, so each difference between two judges is paired.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.metrics.judge_analysis import (
    CHOICES,
    JudgeVerdicts,
    PairFacts,
    build_analysis_set,
    judge_verdicts,
    shared_folds,
)
from app.services.metrics.judge_strengths import model_strengths
from app.stats.bootstrap import Estimate, bootstrap_ratios

__all__ = ["FIGURES", "PanelFigure", "judge_panel"]

# One pair's (numerator, denominator) of a figure, from its AB and BA choices and the identity
# of the longer response (None when both are as long).
Count = Callable[[str, str, str | None], tuple[int, int]]


@dataclass(frozen=True)
class PanelFigure:
    """One figure of the panel: its JSON name, its title, what it counts, and how.

    ``count(ab, ba, longer)`` gives one retained pair's numerator and denominator.
    """

    name: str
    title: str
    help: str
    count: Count


def _decided(ab: str, ba: str) -> int:
    """Verdicts of the pair that chose a response (not a tie)."""
    return (ab != "tie") + (ba != "tie")


def _flip_given(choice: str) -> Count:
    return lambda ab, ba, _: (int(ab == choice and ab != ba), int(ab == choice))


FIGURES: tuple[PanelFigure, ...] = (
    PanelFigure(
        "first_slot_preference",
        "First-slot preference",
        "Verdicts choosing the response shown first (A in AB, B in BA), of the verdicts that "
        "chose a response (ties left out); 0.5 is no preference.",
        lambda ab, ba, _: ((ab == "A") + (ba == "B"), _decided(ab, ba)),
    ),
    PanelFigure(
        "flip_rate",
        "Flip rate",
        "Pairs whose AB and BA verdicts name different responses (a tie against a response "
        "counts).",
        lambda ab, ba, _: (int(ab != ba), 1),
    ),
    *(
        PanelFigure(
            f"flip_rate_ab_{c}",
            f"Flip rate when AB chose {c}",
            f"Flip rate of the pairs whose AB verdict was {c}"
            + (" (the slot shown first)" if c == "A" else "")
            + ".",
            _flip_given(c),
        )
        for c in CHOICES
    ),
    PanelFigure(
        "tie_rate_ab",
        "Tie rate, AB",
        "Pairs whose AB verdict is a tie.",
        lambda ab, ba, _: (int(ab == "tie"), 1),
    ),
    PanelFigure(
        "tie_rate_ba",
        "Tie rate, BA",
        "Pairs whose BA verdict is a tie.",
        lambda ab, ba, _: (int(ba == "tie"), 1),
    ),
    PanelFigure(
        "consistency",
        "Position consistency",
        "Pairs whose two verdicts name the same response (tie and tie agree): 1 - flip rate.",
        lambda ab, ba, _: (int(ab == ba), 1),
    ),
    PanelFigure(
        "length_association",
        "Chooses the longer response",
        "Verdicts choosing the longer response (in characters), of the verdicts that chose a "
        "response on pairs of unequal lengths; 0.5 is no association.",
        lambda ab, ba, longer: (
            ((ab == longer) + (ba == longer), _decided(ab, ba)) if longer else (0, 0)
        ),
    ),
)


def _longer(facts: PairFacts) -> str | None:
    if facts.length_a == facts.length_b:
        return None
    return "A" if facts.length_a > facts.length_b else "B"


def _counts(
    verdicts: JudgeVerdicts, ids: Sequence[int], facts: dict[int, PairFacts]
) -> tuple[np.ndarray, np.ndarray]:
    """Numerators and denominators of every figure, shape (len(ids), len(FIGURES)) each."""
    num = np.zeros((len(ids), len(FIGURES)))
    den = np.zeros((len(ids), len(FIGURES)))
    for row, i in enumerate(ids):
        ab, ba = verdicts.choices[i]
        longer = _longer(facts[i])
        for col, figure in enumerate(FIGURES):
            num[row, col], den[row, col] = figure.count(ab, ba, longer)
    return num, den


def _estimate_json(name: str, estimate: Estimate) -> dict[str, Any]:
    out: dict[str, Any] = {name: estimate.value, f"{name}_ci": estimate.ci}
    if estimate.reason:
        out[f"{name}_ci_reason"] = estimate.reason
    return out


def _judge_row(
    verdicts: JudgeVerdicts, facts: dict[int, PairFacts], resamples: int, seed: int
) -> dict[str, Any]:
    """One judge's panel on its own retained pairs."""
    ids = sorted(verdicts.choices)
    row: dict[str, Any] = {
        "judge": verdicts.judge,
        "n": verdicts.judged,
        "retained": verdicts.retained,
        "retention": verdicts.retained / verdicts.judged if verdicts.judged else None,
        "ab_choices": {c: sum(verdicts.choices[i][0] == c for i in ids) for c in CHOICES},
    }
    if not ids:
        return row | {f.name: None for f in FIGURES} | {f"{f.name}_ci": None for f in FIGURES}
    num, den = _counts(verdicts, ids, facts)
    result = bootstrap_ratios(
        num, den, [facts[i].group for i in ids], resamples=resamples, seed=seed
    )
    row["groups"] = result.n_groups
    for col, figure in enumerate(FIGURES):
        row |= _estimate_json(figure.name, result.estimate(col))
    row["length_verdicts"] = int(den[:, _index("length_association")].sum())
    return row


def _index(name: str) -> int:
    return next(k for k, f in enumerate(FIGURES) if f.name == name)


def _differences(
    verdicts: Sequence[JudgeVerdicts],
    shared: Sequence[int],
    facts: dict[int, PairFacts],
    resamples: int,
    seed: int,
) -> list[dict[str, Any]]:
    """Every two judges' paired differences (first - second) of every figure on ``shared``."""
    if len(verdicts) < 2 or not shared:
        return []
    blocks = [_counts(v, shared, facts) for v in verdicts]
    result = bootstrap_ratios(
        np.hstack([b[0] for b in blocks]),
        np.hstack([b[1] for b in blocks]),
        [facts[i].group for i in shared],
        resamples=resamples,
        seed=seed,
    )
    width = len(FIGURES)
    out = []
    for a, b in combinations(range(len(verdicts)), 2):
        entry: dict[str, Any] = {
            "first": verdicts[a].judge,
            "second": verdicts[b].judge,
            "n": len(shared),
        }
        for col, figure in enumerate(FIGURES):
            entry[f"{figure.name}_first"] = _value(result.point[a * width + col])
            entry[f"{figure.name}_second"] = _value(result.point[b * width + col])
            entry |= _estimate_json(
                figure.name, result.difference(a * width + col, b * width + col)
            )
        out.append(entry)
    return out


def _value(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


def judge_panel(
    session: Session,
    benchmark: str,
    judges: Sequence[str] | None = None,
    *,
    resamples: int = 2000,
    seed: int = 0,
    slice_field: str | None = None,
    outer: int = 5,
) -> dict[str, Any]:
    """The bias panel of the chosen judges, their paired differences and their analysis set.

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark
        Benchmark name.
    judges
        Judge names (every two-order judge when None or empty).
    resamples, seed
        Group-bootstrap resamples (group = ``Instance.group_key``) and root seed.
    slice_field
        Payload field whose value stratifies the analysis set's folds.
    outer
        Number of the analysis set's outer folds.

    Returns
    -------
    dict
        ``judges``: one row per judge (``n`` pairs judged, ``retained``, each figure of
        :data:`FIGURES` with ``<name>_ci``, and ``strengths``: the response models' win rates
        and Bradley-Terry strengths from its debiased verdicts, see
        :func:`~app.services.metrics.judge_strengths.model_strengths`); ``differences``: per
        two judges, each figure's paired difference with its interval on the shared pairs;
        ``analysis``: the shared pairs, each judge's retention, and the folds with each judge's
        probe refusal.

    Raises
    ------
    NotFound, InvalidInput
        Unknown benchmark, a name that is no two-order judge, bad resamples.

    """
    if resamples < 1:
        raise InvalidInput("must be at least 1", field="resamples")
    if seed < 0:
        raise InvalidInput("must be 0 or more", field="seed")
    verdicts, facts = judge_verdicts(session, benchmark, judges, slice_field)
    rows = [_judge_row(v, facts, resamples, seed) for v in verdicts]
    for row, v in zip(rows, verdicts, strict=True):
        row["strengths"] = model_strengths(v, facts, resamples=resamples, seed=seed)
    analysis: dict[str, Any] = {"n": 0, "groups": 0, "retention": [], "folds": None}
    shared: list[int] = []
    try:
        aset = build_analysis_set(benchmark, verdicts, facts, slice_field)
    except InvalidInput as exc:
        analysis["reason"] = exc.reason
    else:
        shared = aset.instance_ids.tolist()
        analysis.update(
            n=aset.n,
            groups=int(np.unique(aset.groups).size),
            retention=aset.retention(),
            slice_field=slice_field,
            flip_counts={
                str(c): int((aset.flip_counts == c).sum()) for c in range(len(verdicts) + 1)
            },
        )
        try:
            analysis["folds"] = shared_folds(aset, outer, seed).as_dict(aset)
        except InvalidInput as exc:
            analysis["folds_reason"] = exc.reason
    return {
        "benchmark": benchmark,
        "resamples": resamples,
        "seed": seed,
        "figures": [{"name": f.name, "title": f.title, "help": f.help} for f in FIGURES],
        "judges": rows,
        "differences": _differences(verdicts, shared, facts, resamples, seed),
        "analysis": analysis,
    }
