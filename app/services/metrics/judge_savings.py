"""Savings of selective re-judging on a benchmark judged in both orders (the ``savings`` report).

For a judge with flip labels (``flip:<judge>``), each ranker (by default the judge's flip probe
``probe:<judge>`` and baseline ``baseline:<judge>``, whose scores are out-of-fold predictions of
the same grouped folds) orders the pairs; re-judging the first ``k`` in the other order finds the
flips among them. The report gives, per ranker and for the random order, the share of flips
recovered against ``k`` with group-bootstrap intervals, the ``k`` that recovers 50% / 80% of
them, the area under the curve and the paired area differences. All rankers are compared on the
same pairs: those with a flip label and a score from every ranker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from markupsafe import Markup
from sqlalchemy.orm import Session

from app.errors import InvalidInput, NotFound
from app.services.evidence.flips import flip_label_name
from app.services.evidence.labelled_items import detector_scores, get_detector, load_labelled
from app.services.metrics.svg_plots import Series, curve_plot
from app.stats.bootstrap import percentile_interval
from app.stats.savings import RANDOM, TARGETS, SavingsCurve, savings_curves

__all__ = ["default_rankers", "judge_savings", "savings_plot"]

# Curve points reported (every k when there are fewer pairs).
MAX_POINTS = 101


def default_rankers(judge: str) -> list[str]:
    """The flip probe and the six-feature baseline that ``appellate probe fit`` writes."""
    return [f"probe:{judge}", f"baseline:{judge}"]


def _grid(n: int) -> list[int]:
    if n + 1 <= MAX_POINTS:
        return list(range(n + 1))
    return sorted({round(x) for x in np.linspace(0, n, MAX_POINTS)})


def _ci(bounds: tuple[float | None, float | None]) -> list[float | None]:
    return [None if b is None else round(float(b), 6) for b in bounds]


def _curve_json(c: SavingsCurve, grid: Sequence[int]) -> dict[str, Any]:
    def num(x: float) -> float | None:
        return None if np.isnan(x) else round(float(x), 6)

    return {
        "k_for": {f"{q:g}": c.k_for[q] for q in c.k_for},
        "k_for_ci": {f"{q:g}": _ci(c.k_for_ci[q]) for q in c.k_for_ci},
        "area": round(c.area, 6),
        "area_ci": _ci(c.area_ci),
        "points": [
            {
                "k": k,
                "recovered": num(c.recovered[k] * c.flips),
                "share": num(c.recovered[k]),
                "share_ci": [num(c.low[k]), num(c.high[k])],
            }
            for k in grid
        ],
    }


def judge_savings(
    session: Session,
    benchmark: str,
    judge: str,
    rankers: Sequence[str] | None = None,
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, Any]:
    """The savings curves of re-judging a judge's pairs in the other order, as plain JSON.

    Parameters
    ----------
    session
        The caller's session (read only).
    benchmark
        A benchmark where the judge judged pairs in both orders.
    judge
        The judge detector's name.
    rankers
        Detectors whose scores order the pairs (default :func:`default_rankers`, those that
        exist); ``random`` is always added.
    resamples, seed, level
        Group bootstrap (the question is the unit).

    Returns
    -------
    dict
        ``benchmark``, ``judge``, ``label``, ``labelled`` (pairs with a flip label), ``n``
        (pairs every ranker scored), ``flips``, ``unscored`` per ranker, ``rankers``,
        ``curves`` per ranker (``k_for``, ``k_for_ci``, ``area``, ``area_ci``, ``points`` of
        ``k``, ``recovered``, ``share``, ``share_ci``), ``differences`` of areas (paired),
        ``resamples``, ``seed``, ``level``.

    Raises
    ------
    NotFound
        If the judge has no flip labels on the benchmark, or a named ranker does not exist.
    InvalidInput
        If no ranker exists or scores a labelled pair, or the pairs hold no flip.

    """
    label = flip_label_name(judge)
    items = load_labelled(session, benchmark, label, positive="1")
    if rankers is None:
        names = []
        for name in default_rankers(judge):
            try:
                get_detector(session, name)
            except NotFound:
                continue
            names.append(name)
    else:
        names = [r for r in rankers if r != RANDOM]
    if not names:
        raise InvalidInput(
            f"no flip probe or baseline of {judge!r}: run 'appellate probe fit {benchmark} "
            f"--judge {judge}' first, or name a ranker",
            field="ranker",
        )
    columns = {name: detector_scores(session, get_detector(session, name), items) for name in names}
    scored = np.ones(items.y.size, dtype=bool)
    for v in columns.values():
        scored &= np.isfinite(v)
    unscored = {name: int((~np.isfinite(v)).sum()) for name, v in columns.items()}
    n = int(scored.sum())
    if n == 0:
        raise InvalidInput(f"no pair labelled in {label} has a score of every ranker", "ranker")
    y = items.y[scored].astype(np.int64)
    if not y.any():
        raise InvalidInput(f"the {n} pairs scored hold no flip: nothing to recover", "judge")
    groups = np.asarray(items.groups, dtype=object)[scored].astype(str)
    curves = savings_curves(
        y,
        groups,
        {name: v[scored] for name, v in columns.items()},
        resamples=resamples,
        seed=seed,
        level=level,
    )
    grid = _grid(n)
    differences = []
    order = [*names, RANDOM]
    for i, a in enumerate(order):
        for b in order[i + 1 :]:
            reps = curves[a].area_replicates - curves[b].area_replicates
            differences.append(
                {
                    "a": a,
                    "b": b,
                    "area": round(curves[a].area - curves[b].area, 6),
                    "area_ci": _ci(percentile_interval(reps, level)[:2]),
                }
            )
    return {
        "benchmark": items.benchmark.name,
        "judge": judge,
        "label": label,
        "labelled": int(items.y.size),
        "n": n,
        "flips": int(y.sum()),
        "unscored": unscored,
        "rankers": order,
        "targets": [f"{q:g}" for q in TARGETS],
        "curves": {name: _curve_json(curves[name], grid) for name in order},
        "differences": differences,
        "resamples": resamples,
        "seed": seed,
        "level": level,
    }


def savings_plot(report: dict[str, Any]) -> Markup:
    """The savings curves as an inline SVG: share of flips found against share of pairs redone."""
    n = report["n"]
    series = [
        Series(
            name,
            [p["k"] / n for p in curve["points"]],
            [p["share"] or 0.0 for p in curve["points"]],
        )
        for name, curve in report["curves"].items()
    ]
    return curve_plot(
        "savings",
        f"Flips of {report['judge']} recovered by re-judging",
        series,
        x_label=f"pairs re-judged (share of {n})",
        y_label="flips recovered (share)",
        reference=None,
    )
