"""gkr's command group (typer), whose commands load by module name, and the group class `gkr registry` uses too."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, ClassVar

import click
import typer
from typer.core import TyperGroup

from contract.problem import Invalid, report
from gkr.commands import COMMANDS, HELP
from gkr.registry import refuse_fleet


class Group(TyperGroup):
    """Help without `[default: None]`: an option left unset means "resolved from the fleet", as its help says."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        return self.plain_defaults(command) if command is not None else None

    @staticmethod
    def plain_defaults(command: click.Command) -> click.Command:
        for param in command.params:
            if param.default is None and isinstance(param, click.Option | click.Argument):
                param.show_default = False  # type: ignore[union-attr]
        return command


class OwnParser(click.Command):
    """A command whose module parses its own arguments (`main(args) -> int`, argparse): click hands them over as typed."""

    def __init__(self, name: str, main: Callable[[list[str]], int], summary: str) -> None:
        super().__init__(name, help=summary, add_help_option=False)
        self.own_main = main

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.args = list(args)
        return []

    def invoke(self, ctx: click.Context) -> Any:
        raise SystemExit(self.own_main(ctx.args))


class LazyGroup(Group):
    """Commands by module: `gkr --help` lists them from the table; a command's module loads when it is used."""

    table: ClassVar[dict[str, tuple[str, str]]] = {}  # command -> (its module, its one-line summary)
    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.table)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.table:
            return None
        name, summary = self.table[cmd_name]
        if self._listing:  # the list of commands needs their summaries only
            return click.Command(cmd_name, help=summary)
        module: Any = importlib.import_module(name)
        if hasattr(module, "main"):
            return OwnParser(cmd_name, module.main, summary)
        return self.plain_defaults(module.command)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            refuse_fleet(args)
        except Invalid as exc:
            raise click.exceptions.Exit(report(exc)) from None
        return super().parse_args(ctx, args)


class Commands(LazyGroup):
    table = COMMANDS


app = typer.Typer(cls=Commands, add_completion=False, no_args_is_help=True, help=HELP, pretty_exceptions_enable=False)


@app.callback()
def gkr() -> None:
    # No options of its own: typer makes a group of commands it does not hold only around a callback.
    pass
