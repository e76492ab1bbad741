"""The pinned lists of metric names the upstream exporters expose (upstream_metrics.yaml), with their sources."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

FILE = Path(__file__).with_name("upstream_metrics.yaml")


@dataclass(frozen=True)
class Exporter:
    name: str
    version: str
    source: str
    names: frozenset[str]


@cache
def exporters() -> tuple[Exporter, ...]:
    data = yaml.safe_load(FILE.read_text(encoding="utf-8"))
    return tuple(
        Exporter(name, str(entry["version"]), str(entry["source"]), frozenset(entry["names"]))
        for name, entry in data.items()
    )


def names() -> frozenset[str]:
    return frozenset(n for e in exporters() for n in e.names)
