"""The options gkr's typer commands share, and a command from a typer-annotated function.

The commands about existing jobs (`list`, `status`, `logs`...) declare their options with typer;
`submit` and `preflight` parse theirs without it (gkr/commands/job_args.py) so a dry run starts fast.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import click
import typer
from typer.core import TyperOption

from gkr.commands.common import OUTPUT_HELP, WHERE, Where
from gkr.commands.group import Group

GIVEN_WHERE = "gkr.where"  # where in click's context the options of `where_options` record what was given
Output = Annotated[str, typer.Option("--output", "-o", help=OUTPUT_HELP)]
RegistryPath = Annotated[str | None, typer.Option(WHERE["registry"][0], help=WHERE["registry"][1])]
Context = Annotated[str | None, typer.Option(WHERE["context"][0], help=WHERE["context"][1])]
Kind = Annotated[str, typer.Option("--kind", help="rayjob, raycluster or job")]


def typer_command(name: str, function: Callable[..., Any], extra: list[click.Parameter] | None = None) -> click.Command:
    """A command from a typer-annotated function, for the lazy group; `extra` options go last."""
    app = typer.Typer(add_completion=False)
    app.command(name)(function)
    command = typer.main.get_command(app)
    command.params.extend(extra or [])
    return Group.plain_defaults(command)


def where_options() -> list[click.Parameter]:
    """--team, --region, --registry, --context for a command about existing jobs, read back with `where(ctx)`."""

    def record(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        ctx.meta.setdefault(GIVEN_WHERE, {})[param.name] = value
        return value

    return [
        TyperOption(param_decls=[flag, name], help=text, expose_value=False, callback=record, show_default=False)
        for name, (flag, text) in WHERE.items()
    ]


def where(ctx: click.Context) -> Where:
    return Where(**ctx.meta.get(GIVEN_WHERE, {}))
