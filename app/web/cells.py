"""Table-cell snippets (choice, flip and label badges) as Jinja filters.

They run for every cell of a 50-row table, so they are plain Python rather than template
macros (several times faster); data is always escaped by ``Markup``'s ``%``.
"""

from __future__ import annotations

from markupsafe import Markup

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


FILTERS = {
    "choice": choice_badge,
    "flip": flip_badge,
    "label": label_badge,
    "short": short_name,
}
