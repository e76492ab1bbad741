"""The `gkr` command (gkr --help: gkr.commands.HELP): which parser a command line goes to."""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn

from contract.problem import Invalid, report
from gkr.commands import COMMANDS
from gkr.registry import refuse_fleet


def main(argv: list[str] | None = None) -> NoReturn:
    """The `gkr` command: `submit` and `preflight` parse their own arguments (no click, typer or rich:
    a dry run starts fast); every other command, and `gkr --help`, goes through the typer group."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        refuse_fleet(args)
    except Invalid as exc:
        raise SystemExit(report(exc)) from None
    if args and args[0] in COMMANDS:
        module = importlib.import_module(COMMANDS[args[0]][0])
        if hasattr(module, "main"):
            raise SystemExit(module.main(args[1:]))
    from gkr.commands.group import app  # click, typer and rich: every other command

    app(args, prog_name="gkr")
    raise SystemExit(0)  # typer exits itself; this only says so


if __name__ == "__main__":
    main()
