"""Disagreement modes: one registered class per module of this package, found at import.

Adding a mode is adding a module here with one class decorated with :func:`register_mode`;
importing this package imports every module, so each mode registers itself.
"""

from __future__ import annotations

import pkgutil
from importlib import import_module

from app.services.disagreements.modes.base import (
    DEFAULT_MIN_CONFIDENCE,
    DisagreementMode,
    all_modes,
    get_mode,
    modes_declaring,
    register_mode,
)

__all__ = [
    "DEFAULT_MIN_CONFIDENCE",
    "DisagreementMode",
    "all_modes",
    "get_mode",
    "modes_declaring",
    "register_mode",
]

for _module in pkgutil.iter_modules(__path__):
    import_module(f"{__name__}.{_module.name}")
