"""The context audit of a judge run: each pair's tokens under the judge's template vs the budget.

A pair fits when every order of it fits: its rendered prompt (the judge's system prompt and
template around the pair's texts, in the model's chat format) plus what the judge may write
(``allowance``: the generation budget, or the reasoning and the verdict prefix in forced mode)
is at most the budget. A pair that does not fit is refused in every order and counted, never
truncated: a cut prompt is a different question. The retention curve is the share of pairs
that fit against the budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from markupsafe import Markup

__all__ = ["ContextAudit", "audit_context", "retention_plot"]

# Points of the stored retention curve (it is a step function of the pairs' needs).
CURVE_POINTS = 64
# Refused pairs listed by id in the job's result (the count is always complete).
LISTED = 20


class HasPair(Protocol):
    """A judging unit: which pair, in which order."""

    @property
    def instance_id(self) -> int:
        """The pair."""

    @property
    def order(self) -> str:
        """The presentation order."""


@dataclass(frozen=True)
class ContextAudit:
    """What the audit found: the budget applied, the need of every pair, the pairs refused.

    ``needs`` maps each pair to its largest unit (prompt tokens + allowance); ``budget`` is
    the smaller of the requested budget and the model's window (either may be None).
    """

    requested: int | None
    window: int | None
    allowance: int
    needs: dict[int, int]
    prompt_tokens: list[int]
    units: int

    @property
    def budget(self) -> int | None:
        """The budget applied: the requested one, never above the model's window."""
        given = [b for b in (self.requested, self.window) if b is not None]
        return min(given) if given else None

    @property
    def refused(self) -> list[int]:
        """Pairs (instance ids) whose need exceeds the budget, by id."""
        budget = self.budget
        if budget is None:
            return []
        return sorted(i for i, need in self.needs.items() if need > budget)

    def curve(self) -> list[list[float]]:
        """``[budget, share of pairs that fit]`` at the pairs' needs (at most ``CURVE_POINTS``)."""
        if not self.needs:
            return []
        needs = np.sort(np.fromiter(self.needs.values(), dtype=np.int64))
        values = np.unique(needs)
        if values.size > CURVE_POINTS:
            at = np.linspace(0, values.size - 1, CURVE_POINTS).round().astype(int)
            values = values[np.unique(at)]
        shares = np.searchsorted(needs, values, side="right") / needs.size
        return [[int(v), round(float(s), 6)] for v, s in zip(values, shares, strict=True)]

    def as_json(self, refused_units: int) -> dict[str, Any]:
        """The job result's ``context_audit`` entry."""
        refused = self.refused
        pairs = len(self.needs)
        tokens = np.asarray(self.prompt_tokens or [0])
        return {
            "budget": self.budget,
            "requested": self.requested,
            "window": self.window,
            "allowance": self.allowance,
            "pairs": pairs,
            "units": self.units,
            "refused_pairs": len(refused),
            "refused_units": refused_units,
            "retained_pairs": pairs - len(refused),
            "retention": round((pairs - len(refused)) / pairs, 6) if pairs else None,
            "prompt_tokens": {
                "min": int(tokens.min()),
                "median": float(np.median(tokens)),
                "max": int(tokens.max()),
            },
            "curve": self.curve(),
            "refused_ids": refused[:LISTED],
        }


def audit_context(
    units: Sequence[HasPair],
    prompt_tokens: Sequence[int],
    *,
    allowance: int,
    requested: int | None,
    window: int | None,
) -> ContextAudit:
    """Audit ``units`` whose rendered prompts are ``prompt_tokens`` long (same order).

    Parameters
    ----------
    units
        Every unit of the run (judged already or not), so that a resumed run audits alike.
    prompt_tokens
        Tokens of each unit's rendered prompt.
    allowance
        Tokens the judge may add after the prompt.
    requested
        The run's context budget (None: the model's window).
    window
        The model's context window (None when unknown).

    """
    if len(units) != len(prompt_tokens):
        raise ValueError("one prompt length per unit")
    needs: dict[int, int] = {}
    for unit, tokens in zip(units, prompt_tokens, strict=True):
        need = int(tokens) + allowance
        needs[unit.instance_id] = max(needs.get(unit.instance_id, 0), need)
    return ContextAudit(
        requested, window, allowance, needs, [int(t) for t in prompt_tokens], len(units)
    )


def retention_plot(audit: dict[str, Any]) -> Markup | None:
    """The retention curve of a job result's ``context_audit`` as an inline SVG (None if empty).

    x is the budget as a share of the largest need (so the curve ends at 1), y the share of
    pairs that fit; the budget applied is the dashed vertical line.
    """
    # Imported here: the plots module is the web side's, and job kinds load without it.
    from app.services.metrics.svg_plots import Series, curve_plot

    curve = audit.get("curve") or []
    if not curve:
        return None
    top = max(float(curve[-1][0]), float(audit.get("budget") or 0), 1.0)
    # A step function: each need raises the share from the previous level.
    xs: list[float] = [0.0]
    ys: list[float] = [0.0]
    for tokens, share in curve:
        xs += [tokens / top, tokens / top]
        ys += [ys[-1], float(share)]
    xs.append(1.0)
    ys.append(ys[-1])
    budget = audit.get("budget")
    line = ((budget / top, 0.0), (budget / top, 1.0)) if budget else None
    return curve_plot(
        "retention",
        "Pairs that fit against the context budget",
        [Series("pairs that fit", xs, ys)],
        x_label=f"context budget (share of {int(top)} tokens)",
        y_label="pairs that fit (share)",
        reference=line,
    )
