"""Table-cell snippets (choice, flip and label badges) and the instance table's rows in Python.

They run for every cell of a 50-row table, so they are plain Python rather than template
loops and macros (several times faster); data is always escaped (``escape`` or ``Markup``'s ``%``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from markupsafe import Markup, escape

from app.services.evidence.flips import FLIP_PREFIX
from app.services.table.browse import InstanceRow
from app.services.table.facets import BenchmarkFacets
from app.services.table.instance_sort import SortField, TableSort
from app.web.urls import path_segment

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


class TableColumns(NamedTuple):
    """Which slice fields, label sets, judges and scored detectors the table shows, in order."""

    slices: tuple[str, ...]
    labels: tuple[str, ...]
    judges: tuple[str, ...]
    detectors: tuple[str, ...]

    @property
    def instance_keys(self) -> list[str]:
        """Keys of the optional columns under the "Instance" heading (the id always shows)."""
        return ["group", *(f"slice:{s}" for s in self.slices), "text"]

    @property
    def label_keys(self) -> list[str]:
        """Keys of the label columns."""
        return [f"label:{s}" for s in self.labels]

    @property
    def score_keys(self) -> list[str]:
        """Keys of the score columns."""
        return [f"score:{d}" for d in self.detectors]


def table_columns(facets: BenchmarkFacets) -> TableColumns:
    """The columns of a benchmark's table (flip label sets sit under their judge)."""
    return TableColumns(
        slices=tuple(s.field for s in facets.slices),
        labels=tuple(s.name for s in facets.plain_label_sets),
        judges=tuple(j.name for j in facets.judges),
        detectors=tuple(d.name for d in facets.scored_detectors),
    )


ID_COLUMN = "external_id"
"""The key of the id column, which every view shows (each row's link)."""


class ColumnChoice(NamedTuple):
    """Which of the table's columns show: the reader's choice, and the column sorted by.

    Column keys are the chooser's (``group``, ``slice:F``, ``text``, ``label:S``, ``judge:J``,
    ``score:D``; the external id always shows). ``chosen`` is ``None`` when the reader chose
    nothing (every column shows); the ``cols`` query parameter carries it
    (:func:`app.web.filters.column_choice`).
    """

    chosen: frozenset[str] | None = None
    sorted_col: str | None = None

    def hidden(self, key: str) -> bool:
        """Whether column ``key`` is hidden; the id and the column sorted by never are."""
        if self.chosen is None or key in (ID_COLUMN, self.sorted_col):
            return False
        return key not in self.chosen

    def count_shown(self, keys: list[str]) -> int:
        """How many of the columns ``keys`` show."""
        return sum(not self.hidden(k) for k in keys)

    def param(self, cols: TableColumns) -> list[str] | None:
        """The ``cols`` values that reproduce the choice (known columns, in table order).

        ``None`` when nothing was chosen; ``[""]`` when every optional column is hidden (an
        absent parameter would mean "all").
        """
        if self.chosen is None:
            return None
        shown = [k for k in column_keys(cols) if k in self.chosen]
        return shown or [""]


def column_keys(cols: TableColumns) -> list[str]:
    """Every optional column's key, in table order."""
    judges = [f"judge:{j}" for j in cols.judges]
    return [*cols.instance_keys, *cols.label_keys, *judges, *cols.score_keys]


def sorted_column(facets: BenchmarkFacets, sort: TableSort) -> str | None:
    """The key of the column that shows what the table is sorted by (``None``: the id)."""
    name = sort.name or ""
    if sort.field is SortField.group:
        return "group"
    if sort.field is SortField.label:
        # A judge's flip label set shows as its flip column, under the judge.
        if name.startswith(FLIP_PREFIX) and facets.judge(name.removeprefix(FLIP_PREFIX)):
            return f"judge:{name.removeprefix(FLIP_PREFIX)}"
        return f"label:{name}"
    if sort.field is SortField.score:
        return f"score:{name}"
    if sort.field is SortField.confidence:
        # A judge's confidence sits with its AB/BA/flip columns; a scored detector's with its score.
        return f"judge:{name}" if facets.judge(name) is not None else f"score:{name}"
    return None


def sort_description(sort: TableSort | str) -> str:
    """The order in words, for the sort chip: ``confidence of arena_hard/o1-mini, descending``.

    ``sort`` may be the ``sort`` parameter as written (``-confidence:arena_hard/o1-mini``).
    """
    if isinstance(sort, str):
        sort = TableSort.parse(sort)
    name = sort.name or ""
    what = {
        SortField.external_id: "external id",
        SortField.group: "group",
        SortField.score: f"score of {name}",
        SortField.label: f"label {name}",
        SortField.confidence: f"confidence of {name}",
    }[sort.field]
    return f"{what}, {'descending' if sort.descending else 'ascending'}"


def score_text(value: float) -> str:
    """A score as shown: 3 decimals (3 significant digits when that would read 0.000)."""
    if math.isnan(value):
        return "NaN"
    if value != 0 and abs(value) < 0.0005:
        return f"{value:.3g}"
    return f"{value:,.3f}"


def score_markup(value: float | None) -> Markup:
    """A score for any page: :func:`score_text`, with the full value on hover (its title)."""
    if value is None:
        return _NONE
    return Markup('<span class="score" title="%s">%s</span>') % (repr(value), score_text(value))


def _score_cell(value: float | None, first: bool, hidden: bool) -> str:
    cls = ("num judge-start" if first else "num") + (_HIDDEN if hidden else "")
    if value is None:
        return f'<td class="{cls}"></td>'
    return f'<td class="{cls}" title="{value!r}">{score_text(value)}</td>'


# Hidden columns stay in the page (the chooser shows them again without a request).
_HIDDEN = " col-hidden"


def _verdict_cells(
    row: InstanceRow, cols: TableColumns, choice: ColumnChoice, out: list[str]
) -> None:
    """Append the row's labels, each judge's AB/BA/flip and the detector scores to ``out``."""
    labels, judges, scores = row["labels"], row["judges"], row["scores"]
    for k, name in enumerate(cols.labels):
        cls = ("center judge-start" if k == 0 else "center") + _hide(choice, f"label:{name}")
        out.append(f'<td class="{cls}">{label_badge(labels.get(name))}</td>')
    for name in cols.judges:
        cells = judges.get(name)
        ab, ba, flip = (cells["ab"], cells["ba"], cells["flip"]) if cells else (None, None, None)
        hide = _hide(choice, f"judge:{name}")
        out.append(
            f'<td class="center judge-start{hide}">{choice_badge(ab)}</td>'
            f'<td class="center{hide}">{choice_badge(ba)}</td>'
            f'<td class="center{hide}">{flip_badge(flip)}</td>'
        )
    for k, name in enumerate(cols.detectors):
        out.append(_score_cell(scores.get(name), k == 0, choice.hidden(f"score:{name}")))


def _hide(choice: ColumnChoice, key: str) -> str:
    """The class suffix of a cell in column ``key``: hidden or not."""
    return _HIDDEN if choice.hidden(key) else ""


def table_rows(
    rows: Sequence[InstanceRow],
    cols: TableColumns,
    href_prefix: str,
    href_suffix: str,
    choice: ColumnChoice | None = None,
) -> Markup:
    """The ``<tr>`` rows of the instance table, each linking to its instance page.

    Parameters
    ----------
    rows : sequence of InstanceRow
        One page of the table.
    cols : TableColumns
        The benchmark's columns.
    href_prefix, href_suffix : str
        What comes before and after the encoded external id in each row's link.
    choice : ColumnChoice, optional
        Which columns show; the cells of the others are rendered hidden. Default: all show.

    Returns
    -------
    Markup
        The rows; every value from the data is escaped.

    """
    choice = choice or ColumnChoice()
    prefix, suffix = escape(href_prefix), escape(href_suffix)
    group_cls = "id muted" + _hide(choice, "group")
    slice_cls = {f: "small nowrap" + _hide(choice, f"slice:{f}") for f in cols.slices}
    text_cls = "preview" + _hide(choice, "text")
    out: list[str] = []
    for row in rows:
        # An encoded path segment holds only unreserved characters and `%`: nothing to escape.
        href = f"{prefix}{path_segment(row['external_id'])}{suffix}"
        out.append(
            f'<tr><td class="id"><a href="{href}">{escape(row["external_id"])}</a></td>'
            f'<td class="{group_cls}">{escape(row["group_key"])}</td>'
        )
        slices = row["slices"]
        for field in cols.slices:
            out.append(f'<td class="{slice_cls[field]}">{escape(slices.get(field) or "")}</td>')
        out.append(
            f'<td class="{text_cls}"><a class="quiet" href="{href}" tabindex="-1">'
            f"{escape(row['preview'])}</a></td>"
        )
        _verdict_cells(row, cols, choice, out)
        out.append("</tr>\n")
    # Every interpolated value above is escaped, a badge (escaped Markup) or a float.
    return Markup("".join(out))


FILTERS = {
    "choice": choice_badge,
    "flip": flip_badge,
    "label": label_badge,
    "short": short_name,
}

GLOBALS = {
    "table_columns": table_columns,
    "table_rows": table_rows,
    "sort_description": sort_description,
}
