"""The command line of the commands that make a job (`submit`, `preflight`): argparse, the job keys' flags from their declarations.

argparse is in the standard library: a dry run loads neither click, typer nor rich (about two
thirds of its start-up when it did). Every job option defaults to unset, so a job file's value
stands unless the flag is given (defaults < file < flags); `JobParser.parse` hands what was
given, by flag, to `gkr.flags.from_flags`, which gives it the key's shape. A key's option comes
from its type: a switch for true/false, repeatable for a list or a mapping, an integer or a text
otherwise; the command is the arguments that are no option's, and every argument after `--`.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any, NoReturn, get_args, get_origin

from contract.problem import Invalid
from gkr import keys
from gkr.commands.common import WHERE
from gkr.flags import by_flag
from gkr.spec import AFTER_DASHES
from gkr.submit import one_line

SHORT = {"--env": "-e"}  # the one short alias a job key's flag has had


class JobParser(argparse.ArgumentParser):
    """A command's parser; each job option's destination is its flag (the command's: AFTER_DASHES)."""

    def __init__(self, prog: str, description: str) -> None:
        super().__init__(prog=prog, description=description, allow_abbrev=False)  # click took no abbreviation
        self.job_flags: list[str] = []

    def error(self, message: str) -> NoReturn:
        """One line, exit 2 (through Invalid), where argparse would print its usage and exit itself."""
        raise Invalid(one_line([f"{self.prog}: {message}; see `{self.prog} --help`"]))

    def add_job_keys(
        self, cls: type, only: Iterable[str] | None = None, defaults: dict[str, Any] | None = None
    ) -> None:
        """The options of a declaring class's keys (or of `only` those), in declaration order; `defaults` by key."""
        chosen = set(only) if only is not None else None
        for flag, found in by_flag(cls).items():
            found = [k for k in found if chosen is None or k.path in chosen]
            if found:
                self._add_key(flag, found, (defaults or {}).get(found[0].path))
                self.job_flags.append(flag)

    def add_where(self, *names: str) -> None:
        """Where the job goes, as the other commands say it (`registry`, `context`: gkr.commands.common.WHERE)."""
        for name in names:
            flag, text = WHERE[name]
            self.add_argument(flag, dest=name, help=_escaped(text))

    def parse(self, args: list[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
        """(every option, the job flags: flag -> what was given, None or empty when not); Invalid for a bad line.

        The arguments after the first `--` are the command's, as typed; before it, an argument that
        is no option's is the command's too (as click took it: `gkr submit job.yaml` is then
        explained, gkr/commands/submit.py).
        """
        dashes = args.index("--") if "--" in args else len(args)
        parsed = self.parse_intermixed_args(args[:dashes])
        given = {flag: getattr(parsed, flag) for flag in self.job_flags}
        after = args[dashes + 1 :]
        if after and AFTER_DASHES not in given:
            self.error(f"unrecognized arguments after --: {' '.join(after)}")
        if AFTER_DASHES in given:
            given[AFTER_DASHES] = [*(given[AFTER_DASHES] or ()), *after]
        return parsed, given

    def _add_key(self, flag: str, found: list[keys.Key], default: Any) -> None:
        text = _escaped("; ".join(k.setting.help for k in found))
        if flag == AFTER_DASHES:
            self.add_argument(flag, nargs="*", metavar="COMMAND", help=text)
            return
        decls = [flag, *([SHORT[flag]] if flag in SHORT else [])]
        name = flag.removeprefix("--").upper().replace("-", "_")
        kinds = [k.kind for k in found]
        if kinds == [bool]:
            self.add_argument(*decls, dest=flag, action="store_true", help=text)
        elif len(found) > 1 or any(get_origin(k) in (tuple, dict) for k in kinds):
            self.add_argument(*decls, dest=flag, action="append", metavar=name, help=text)
        else:
            number = int in (kinds[0], *get_args(kinds[0]))
            shown = f" (default: {default})" if default is not None else ""
            self.add_argument(
                *decls, dest=flag, type=int if number else str, default=default, metavar=name, help=text + shown
            )


def _escaped(text: str) -> str:
    """argparse formats help with %: a percentage in a help text (`90% of ...`) would break it."""
    return text.replace("%", "%%")
