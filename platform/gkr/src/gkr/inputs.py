"""Read a job from a YAML file and flags (defaults < file < flags), naming where each error came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import safeyaml
from contract.problem import dotted
from fleet.yamlsource import Source, YamlSyntaxError, parse
from gkr.spec import JobSpec, parse_job


class InputError(Exception):
    """Bad input; `lines` are ready to print, one problem each."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass(frozen=True)
class Origins:
    file: str | None
    source: Source | None
    flags: dict[str, str]  # job key -> the flag that set it

    def where(self, key: str) -> str:
        top = key.split(".", 1)[0].split("[", 1)[0]
        if top in self.flags:
            return f"flag {self.flags[top]}"
        if self.file and self.source is not None:
            path = tuple(
                int(p) if p.isascii() and p.isdigit() else p for p in key.replace("[", ".").replace("]", "").split(".")
            )
            return f"{self.file}:{self.source.line_of(path)}: {key}"
        return key


def read_job(file: str | None, flags: dict[str, tuple[str, Any]]) -> tuple[JobSpec, Origins]:
    """`flags` maps job keys to (flag name, value) for the flags that were given."""
    data: dict[str, Any] = {}
    source = None
    if file is not None:
        try:
            source, duplicates = parse(safeyaml.read_text(file))
        except OSError as exc:
            raise InputError([f"{file}: cannot read it ({exc.strerror}); check the path"]) from None
        except (safeyaml.YamlError, YamlSyntaxError) as exc:
            raise InputError([f"{file}:{exc.line}: {exc.message}"]) from None
        if duplicates:
            raise InputError([f"{file}:{source.line_of(p.path)}: {dotted(p.path)}: {p.message}" for p in duplicates])
        if source.data is None:
            source = Source({}, {})
        if not isinstance(source.data, dict):
            raise InputError(
                [f"{file}:1: a job file is a YAML mapping (name, team, command, pods...); see gkr's README"]
            )
        data = dict(source.data)
    for key, (_, value) in flags.items():
        data[key] = value
    origins = Origins(file, source, {key: flag for key, (flag, _) in flags.items()})
    spec, problems = parse_job(data)
    if spec is None:
        raise InputError([f"{origins.where(p.field)}: {p.message}" for p in problems])
    return spec, origins
