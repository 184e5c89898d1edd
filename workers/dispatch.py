"""Every job kind a worker can run, mapped to its handler (one per module of ``workers.jobs``)."""

from __future__ import annotations

import pkgutil
from importlib import import_module

import workers.jobs as package
from app.services.jobs.kinds import all_kinds
from workers.runner import Handler, registered_handlers

for _module in pkgutil.iter_modules(package.__path__):
    import_module(f"{package.__name__}.{_module.name}")


def all_handlers() -> dict[str, Handler]:
    """Kind name -> handler, for every kind declared in :mod:`app.services.jobs`.

    Raises
    ------
    RuntimeError
        If a declared kind has no handler, or a handler has no declared kind.

    """
    handlers, kinds = registered_handlers(), all_kinds()
    if set(handlers) != set(kinds):
        raise RuntimeError(
            f"job kinds without a handler: {sorted(set(kinds) - set(handlers))}; "
            f"handlers without a kind: {sorted(set(handlers) - set(kinds))}"
        )
    return handlers


HANDLERS = all_handlers()
