"""Subcommands declared by where they live, imported only when one of them runs.

Importing every command module at start-up would load everything those modules import (the
web stack, the importers, the workers with torch and scikit-learn) just to print the help. A
:class:`LazyGroup` lists each declared command under its name and one-line summary, and
imports the module that defines it when that command is invoked (or its own ``--help`` is
asked for). As in cyclopts' and aws-sam-cli's lazy commands, the summary the listing shows is
given where the command is declared; ``tests/cli/test_cli.py`` checks that it is the loaded
command's own.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption
from typer.main import get_group

if TYPE_CHECKING:
    # The click that typer builds on (vendored since typer 0.2x): the types of its signatures.
    from typer import _click


_typed_display = TyperOption.display_type_rich


def _flag_display_type(self: TyperOption, ctx: _click.Context) -> str | None:
    """No type column for a flag: it takes no value, so ``<bool>`` beside it reads as one."""
    if self.is_flag:
        return None
    return _typed_display(self, ctx)


# Typer 0.29's rich help gives every option a type, flags included (``--json <bool>``, even
# ``--help <bool>``); its plain help already leaves flags out. Every command of ``appellate``
# is a TyperOption user, so the one override covers the root, the groups and the lazy ones.
TyperOption.display_type_rich = _flag_display_type  # type: ignore[method-assign]


@dataclass(frozen=True)
class Lazy:
    """A subcommand: its name, where it is defined and what the listing says about it.

    ``target`` is ``"module:attribute"``; the attribute is a :class:`typer.Typer` (a command
    group, as ``add_typer`` would mount it) or a command function (as ``command`` would).
    """

    name: str
    target: str
    summary: str


class LazyCommand(TyperCommand):
    """A placeholder that lists a :class:`Lazy` command without importing it."""

    def __init__(self, entry: Lazy) -> None:
        super().__init__(name=entry.name, help=entry.summary)
        self.entry = entry

    @cached_property
    def loaded(self) -> _click.Command:
        """The real command, built the way the parent app would build it (imported once)."""
        module, _, attribute = self.entry.target.partition(":")
        obj = getattr(importlib.import_module(module), attribute)
        holder = typer.Typer()
        if isinstance(obj, typer.Typer):
            holder.add_typer(obj, name=self.entry.name)
        else:
            holder.command(self.entry.name)(obj)
        return get_group(holder).commands[self.entry.name]


class LazyGroup(TyperGroup):
    """A command group whose subclasses declare their subcommands in ``lazy``, in listing order.

    Listing (``--help``, completion of names) uses the placeholders; resolving a command to
    run it, or to show its own help, imports and builds the real one.
    """

    lazy: ClassVar[tuple[Lazy, ...]] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for entry in self.lazy:
            self.add_command(LazyCommand(entry))

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        """The named command, imported and built if it is a placeholder."""
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, LazyCommand):
            command = command.loaded
        return name, command, rest
