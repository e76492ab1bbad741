"""Read a job from a YAML file and flags (defaults < file < flags), naming where each error came from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic

from fleet.problems import dotted
from fleet.yamlsource import Source, YamlSyntaxError, parse
from gkr.spec import JobSpec


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
            path = tuple(int(p) if p.isdigit() else p for p in key.replace("[", ".").replace("]", "").split("."))
            return f"{self.file}:{self.source.line_of(path)}: {key}"
        return key


def read_job(file: str | None, flags: dict[str, tuple[str, Any]]) -> tuple[JobSpec, Origins]:
    """`flags` maps job keys to (flag name, value) for the flags that were given."""
    data: dict[str, Any] = {}
    source = None
    if file is not None:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError([f"{file}: cannot read it ({exc.strerror}); check the path"]) from None
        try:
            source, duplicates = parse(text)
        except YamlSyntaxError as exc:
            raise InputError([f"{file}:{exc.line}: not valid YAML: {exc.message}"]) from None
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
    try:
        return JobSpec.model_validate(data), origins
    except pydantic.ValidationError as exc:
        raise InputError([f"{origins.where(_key(e['loc']))}: {_message(e)}" for e in exc.errors()]) from None


def _key(loc: tuple[Any, ...]) -> str:
    return dotted(tuple(p for p in loc if isinstance(p, int) or "[" not in str(p)))


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "missing":
        return "is required; add it to the job file or pass it as a flag"
    if kind == "extra_forbidden":
        return "unknown key; see the job file reference in gkr's README"
    return f"{error['msg'].removeprefix('Value error, ')} (got {error['input']!r})"
