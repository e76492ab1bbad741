"""Read a job from a YAML file and flags (defaults < file < flags), naming where each error came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import safeyaml
from contract.problem import Invalid, Problem, dotted
from gkr.spec import JobSpec, parse_job

GROUP_SHAPE = {"replica_groups", "group_size"}


@dataclass(frozen=True)
class Origins:
    file: str | None
    source: safeyaml.Source | None
    flags: dict[str, str]  # job key -> the flag that set it

    def line(self, problem: Problem) -> str:
        """`flag --pods: ...`, `job.yaml:7: pods: ...`, or `pods: ...`: where the value came from, then what."""
        top = problem.path[0] if problem.path else ""
        if top in self.flags:
            return f"flag {self.flags[str(top)]}: {problem.message}"
        if self.file and self.source is not None:
            return problem.line(f"{self.file}:{self.source.line_of(problem.path)}")
        return problem.line()


def read_job(file: str | None, flags: dict[str, tuple[str, Any]]) -> tuple[JobSpec, Origins]:
    """`flags` maps job keys to (flag name, value) for the flags that were given; Invalid for bad input."""
    data: dict[str, Any] = {}
    source = None
    if file is not None:
        try:
            source = safeyaml.located(safeyaml.read_text(file))
        except OSError as exc:
            raise Invalid([f"{file}: cannot read it ({exc.strerror}); check the path"]) from None
        except safeyaml.YamlError as exc:
            raise Invalid([f"{file}:{exc.line}: {exc.message}"]) from None
        if source.duplicates:
            raise Invalid(
                [f"{file}:{source.line_of(p)}: {dotted(p)}: {safeyaml.DUPLICATE_KEY}" for p in source.duplicates]
            )
        if source.data is None:
            source = safeyaml.Source({}, {})
        if not isinstance(source.data, dict):
            raise Invalid([f"{file}:1: a job file is a YAML mapping (name, team, command, pods...); see gkr's README"])
        data = dict(source.data)
    for key, (_, value) in flags.items():
        data[key] = value
    # Two views of one shape: a flag that gives either replaces the file's shape, not half of it.
    if GROUP_SHAPE & flags.keys():
        data = {k: v for k, v in data.items() if k not in GROUP_SHAPE or k in flags}
    origins = Origins(file, source, {key: flag for key, (flag, _) in flags.items()})
    spec, problems = parse_job(data)
    if spec is None:
        raise Invalid([origins.line(p) for p in problems])
    return spec, origins
