"""An object's named attributes as a dict: rows and results into keyword arguments or JSON."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def attributes(obj: object, names: Iterable[str]) -> dict[str, Any]:
    """``{name: getattr(obj, name)}`` for each of ``names``, in their order."""
    return {name: getattr(obj, name) for name in names}
