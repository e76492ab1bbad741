"""The job keys' flags as command-line options, built from their declarations (gkr/spec.py).

Every option defaults to unset, so a job file's value stands unless the flag is given (defaults <
file < flags). The options do not reach the command function as arguments: each records what was
given under its flag, and `given(ctx)` hands that to `gkr.flags.from_flags`, which gives it the
key's shape. A key's option comes from its type: a switch for true/false, repeatable for a list or
a mapping, an integer or a text otherwise; the command is the arguments after `--`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args, get_origin

import click
from typer.core import TyperArgument, TyperOption

from gkr import keys
from gkr.flags import by_flag
from gkr.spec import AFTER_DASHES

GIVEN = "gkr.job-flags"  # where in click's context the options record what was given
SHORT = {"--env": "-e"}  # the one short alias a job key's flag has had


def options(
    cls: type, only: Iterable[str] | None = None, defaults: dict[str, Any] | None = None
) -> list[click.Parameter]:
    """The options of a declaring class's keys (or of `only` those), in declaration order; `defaults` by key."""
    chosen = set(only) if only is not None else None
    defaults = defaults or {}
    out: list[click.Parameter] = []
    for flag, found in by_flag(cls).items():
        found = [k for k in found if chosen is None or k.path in chosen]
        if found:
            out.append(_parameter(flag, found, defaults.get(found[0].path)))
    return out


def given(ctx: click.Context) -> dict[str, Any]:
    """Flag -> what the command line gave, for every job option of the command."""
    return dict(ctx.meta.get(GIVEN, {}))


def _record(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    flag = param.opts[0] if isinstance(param, click.Option) else AFTER_DASHES
    ctx.meta.setdefault(GIVEN, {})[flag] = value
    return value


def _parameter(flag: str, found: list[keys.Key], default: Any) -> click.Parameter:
    text = "; ".join(k.setting.help for k in found)
    if flag == AFTER_DASHES:
        return TyperArgument(
            param_decls=["command"], nargs=-1, required=False, expose_value=False, callback=_record, help=text
        )
    decls = [flag, *([SHORT[flag]] if flag in SHORT else [])]
    common: dict[str, Any] = {"expose_value": False, "callback": _record, "help": text}
    kinds = [k.kind for k in found]
    if kinds == [bool]:
        return TyperOption(param_decls=decls, is_flag=True, default=False, **common)
    if len(found) > 1 or any(get_origin(k) in (tuple, dict) for k in kinds):
        return TyperOption(param_decls=decls, multiple=True, type=str, **common)
    number = int in (kinds[0], *get_args(kinds[0]))
    return TyperOption(
        param_decls=decls, type=int if number else str, default=default, show_default=default is not None, **common
    )
