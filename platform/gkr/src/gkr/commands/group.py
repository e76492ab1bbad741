"""The command groups: gkr's, whose commands load by module name, and `gkr registry`'s."""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import click
from typer.core import TyperGroup

from contract.problem import report
from gkr.registry import replaced


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


class LazyGroup(Group):
    """Commands by module: `gkr --help` lists them from the table; a command's module loads when it is used."""

    table: ClassVar[dict[str, tuple[str, str]]] = {}  # command -> (its module, its one-line summary)
    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.table)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.table:
            return None
        module, summary = self.table[cmd_name]
        if self._listing:  # the list of commands needs their summaries only
            return click.Command(cmd_name, help=summary)
        command: Any = importlib.import_module(module).command
        return self.plain_defaults(command)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """--fleet (gone with the registry) is refused in one line wherever it appears before `--`."""
        for i, arg in enumerate(args[: args.index("--") if "--" in args else len(args)]):
            if arg == "--fleet" or arg.startswith("--fleet="):
                value = arg.partition("=")[2] or (args[i + 1] if i + 1 < len(args) else "fleet.yaml")
                raise click.exceptions.Exit(report(replaced("--fleet", value)))
        return super().parse_args(ctx, args)
