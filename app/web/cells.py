"""Table-cell snippets (choice, flip and label badges, the verdict cells of a row) in Python.

They run for every cell of a 50-row table, so they are plain Python rather than template
macros (several times faster); data is always escaped by ``Markup``'s ``%``.
"""

from __future__ import annotations

from typing import NamedTuple

from markupsafe import Markup

from app.services.browse import InstanceRow
from app.services.facets import BenchmarkFacets

_NONE = Markup('<span class="muted">·</span>')
_NO_LABEL = Markup('<span class="muted">—</span>')
_FLIPS = {
    "1": Markup(
        '<span class="flip flip-yes" title="the two orders chose different responses">flip</span>'
    ),
    "0": Markup(
        '<span class="flip flip-no" title="both orders chose the same response">same</span>'
    ),
}
_NOT_RETAINED = Markup(
    '<span class="muted" title="not retained: a judgment is missing or invalid">—</span>'
)


_CHOICE_BADGES = {
    c: Markup(f'<span class="choice choice-{c}">{c}</span>') for c in ("A", "B", "tie", "invalid")
}
_LABEL_BADGES = {c: _CHOICE_BADGES[c] for c in ("A", "B")}


def choice_badge(value: str | None) -> Markup:
    """A judge's parsed choice (an identity), coloured by identity and always spelled out."""
    if value is None:
        return _NONE
    # Known values are prebuilt; anything else is data and `%` escapes it.
    return _CHOICE_BADGES.get(value) or Markup('<span class="choice">%s</span>') % value


def flip_badge(value: str | None) -> Markup:
    """A flip label: ``flip`` (1), ``same`` (0) or a dash when the pair is not retained."""
    return _FLIPS.get(value or "", _NOT_RETAINED)


def label_badge(value: str | None) -> Markup:
    """A current label value; A/B share the colours of the choices."""
    if value is None:
        return _NO_LABEL
    return _LABEL_BADGES.get(value) or Markup('<span class="label-value">%s</span>') % value


def short_name(name: str) -> str:
    """The last path segment of a detector name (``arena_hard/o1-mini`` -> ``o1-mini``)."""
    return name.rsplit("/", 1)[-1]


class VerdictColumns(NamedTuple):
    """Which label sets, judges and scored detectors the table shows, in order."""

    labels: tuple[str, ...]
    judges: tuple[str, ...]
    detectors: tuple[str, ...]


def verdict_columns(facets: BenchmarkFacets) -> VerdictColumns:
    """The verdict columns of a benchmark's table (flip label sets sit under their judge)."""
    return VerdictColumns(
        labels=tuple(s.name for s in facets.plain_label_sets),
        judges=tuple(j.name for j in facets.judges),
        detectors=tuple(d.name for d in facets.scored_detectors),
    )


def _score_cell(value: float | None, first: bool) -> str:
    cls = "num judge-start" if first else "num"
    if value is None:
        return f'<td class="{cls}"></td>'
    return f'<td class="{cls}" title="{value!r}">{value:,.3f}</td>'


def verdict_cells(row: InstanceRow, cols: VerdictColumns) -> Markup:
    """The ``<td>`` cells of one row: labels, each judge's AB/BA/flip, detector scores."""
    out: list[str] = []
    labels, judges, scores = row["labels"], row["judges"], row["scores"]
    for k, name in enumerate(cols.labels):
        cls = "center judge-start" if k == 0 else "center"
        out.append(f'<td class="{cls}">{label_badge(labels.get(name))}</td>')
    for name in cols.judges:
        cells = judges.get(name)
        ab, ba, flip = (cells["ab"], cells["ba"], cells["flip"]) if cells else (None, None, None)
        out.append(
            f'<td class="center judge-start">{choice_badge(ab)}</td>'
            f'<td class="center">{choice_badge(ba)}</td>'
            f'<td class="center">{flip_badge(flip)}</td>'
        )
    for k, name in enumerate(cols.detectors):
        out.append(_score_cell(scores.get(name), k == 0))
    # Every interpolated value above is a badge (escaped Markup) or a formatted float.
    return Markup("".join(out))


FILTERS = {
    "choice": choice_badge,
    "flip": flip_badge,
    "label": label_badge,
    "short": short_name,
}

GLOBALS = {"verdict_cells": verdict_cells, "verdict_columns": verdict_columns}
