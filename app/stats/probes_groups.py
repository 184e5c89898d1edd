"""Probe groups that keep duplicate statements together: text normalisation and group merging.

True/false statement sets repeat statements (the same sentence, or one differing in case,
spacing or final punctuation). A grouped split only keeps duplicates on one side when they
share a group, so items whose normalised statement text is equal are merged into one group,
together with every item their stored groups already tie them to.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

_SPACE = re.compile(r"\s+")
# ASCII punctuation plus the typographic quotes and dashes the statement sets contain.
_EDGE_PUNCTUATION = string.punctuation + "\u2018\u2019\u201c\u201d\u2013\u2014\u2026"


def normalise_statement(text: str) -> str:
    """Lowercase, whitespace runs collapsed to one space, punctuation stripped at both ends.

    >>> normalise_statement("  The city of Oslo is in  Norway. ")
    'the city of oslo is in norway'
    """
    return _SPACE.sub(" ", text.lower()).strip().strip(_EDGE_PUNCTUATION).strip()


def merge_groups_by_text(
    groups: Sequence[object] | NDArray[np.object_], texts: Sequence[str | None]
) -> NDArray[np.object_]:
    """Groups joined wherever two items share a normalised text (transitively).

    Parameters
    ----------
    groups : sequence, shape (n,)
        Stored group key per item.
    texts : sequence of str or None, shape (n,)
        The item's statement text; ``None`` (or empty) leaves the item to its stored group.

    Returns
    -------
    ndarray of object, shape (n,)
        One key per item: the smallest (as text) stored group of its merged component, so the
        result is deterministic and unchanged where no text links two groups.

    """
    if len(groups) != len(texts):
        raise ValueError(f"{len(groups)} groups but {len(texts)} texts")
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        root = key
        while parent[root] != root:
            root = parent[root]
        while parent[key] != root:  # path compression
            parent[key], key = root, parent[key]
        return root

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    keys = [f"g:{g}" for g in groups]
    for key in keys:
        parent.setdefault(key, key)
    for key, text in zip(keys, texts, strict=True):
        if text:
            node = "t:" + normalise_statement(text)
            parent.setdefault(node, node)
            union(key, node)
    # Roots are the minimum of their component; a stored group ("g:") sorts before any text.
    return np.asarray([find(k)[2:] for k in keys], dtype=object)
