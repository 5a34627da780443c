"""Commands imported only when they run, so that every `pai` call pays for its own command alone.

Each `pai` call is a new interpreter. A group that imported every command's module would make
`pai --help` and `pai job list` import what `pai up` runs (the services, SQLAlchemy, the bus
client) and what `pai deploy` needs (the Kubernetes client): over a second on a small machine.
A ``DeferredGroup`` knows its commands by name and by the first paragraph of their help, which
is all a group's help shows; a command's module is imported when the command is resolved to be
run (or to show its own help), and the loaded command replaces the placeholder.

The help a group shows for a command is written twice, in the command and in its ``Deferred``
entry; tests/unit/test_cli_imports.py holds them equal.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import typer
import typer.main
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    # typer carries its own copy of click: its Command and Context are these.
    from typer import _click as click


@dataclass(frozen=True)
class Deferred:
    """A command of a group, known by its name and its help until it is run.

    ``target`` is "module:attribute": a ``typer.Typer`` (a group of commands), a command
    function as typer takes it, or a click command already built (a ``DeferredGroup``).
    """

    name: str
    target: str
    help: str

    def load(self) -> click.Command:
        module, _, attribute = self.target.partition(":")
        found = getattr(importlib.import_module(module), attribute)
        command: click.Command
        if isinstance(found, typer.Typer):
            # A group even when it holds one command, as `add_typer` makes it.
            command = typer.main.get_group(found)
        elif isinstance(found, TyperCommand | TyperGroup):
            command = found
        else:
            single = typer.Typer(add_completion=False)
            single.command(name=self.name)(found)
            command = typer.main.get_command(single)
        command.name = self.name
        return command


class Placeholder(TyperCommand):
    """What a group holds for a command not loaded yet: enough for the group's help."""

    def __init__(self, entry: Deferred) -> None:
        super().__init__(name=entry.name, help=entry.help)
        self.entry = entry


def first_paragraph(help_text: str | None) -> str:
    """The part of a command's help its group shows (as typer's help formatter takes it)."""
    return inspect.cleandoc(help_text or "").split("\n\n")[0]


class DeferredGroup(TyperGroup):
    """A group whose commands are imported when one is run.

    The entries come from ``deferred=`` or, where typer builds the group (``typer.Typer(cls=...)``),
    from the subclass's ``entries``. Commands typer registered the usual way stay as they are.
    """

    entries: ClassVar[Sequence[Deferred]] = ()

    def __init__(self, *, deferred: Sequence[Deferred] | None = None, **attrs: Any) -> None:
        super().__init__(**attrs)
        for entry in self.entries if deferred is None else deferred:
            self.commands.setdefault(entry.name, Placeholder(entry))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, Placeholder) and name is not None:
            command = self.commands[name] = command.entry.load()
        return name, command, rest

    def load_all(self) -> dict[str, click.Command]:
        """Every command loaded (what tests compare with the placeholders' help)."""
        for name, command in list(self.commands.items()):
            if isinstance(command, Placeholder):
                self.commands[name] = command.entry.load()
        return dict(self.commands)
