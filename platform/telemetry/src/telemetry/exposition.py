"""The text format: a registry rendered, served over HTTP or written as a textfile; and an exposition checked.

The client library writes the format; ``check`` and ``table`` read the catalog, so a component's /metrics,
its final textfile and its README's table are all compared with the one declaration.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from contract.metrics import Metric

CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST


def render(registry: CollectorRegistry) -> str:
    return prometheus_client.generate_latest(registry).decode()


def serve(registry: CollectorRegistry, port: int, addr: str = "0.0.0.0") -> tuple[Any, int]:
    """Serve /metrics on `port` (0: any free port) in a daemon thread; returns the server and the bound port."""
    server, _thread = prometheus_client.start_http_server(port, addr=addr, registry=registry)
    return server, int(server.server_port)


def write_textfile(path: Path, registry: CollectorRegistry) -> None:
    """The exposition as a file, written whole (the library writes a temporary file and renames it)."""
    prometheus_client.write_to_textfile(str(path), registry)


def exposed(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """Each family in an exposition: its name as the catalog writes it -> (type, label names of its samples)."""
    found: dict[str, tuple[str, frozenset[str]]] = {}
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        found[name] = (family.type, frozenset(labels))
    return found


def check(catalog: Iterable[Metric], text: str) -> list[str]:
    """What in `text` differs from the catalog: families it lacks or does not declare, wrong types or labels."""
    want = {m.name: (m.kind, frozenset(m.labels)) for m in catalog}
    got = exposed(text)
    problems = [f"{n}: not exposed" for n in sorted(set(want) - set(got))]
    problems += [f"{n}: not in the catalog" for n in sorted(set(got) - set(want))]
    for name in sorted(set(want) & set(got)):
        kind, labels = got[name]
        if kind != want[name][0] or (labels and labels != want[name][1]):
            problems.append(
                f"{name}: exposed as {kind} {sorted(labels)}, declared {want[name][0]} {sorted(want[name][1])}"
            )
    return problems


def table(catalog: Iterable[Metric]) -> str:
    """The catalog as a Markdown table, for a component's README (a test keeps the README's copy current)."""
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    rows += [f"| `{m.name}` | {m.kind} | {', '.join(m.labels) or '-'} | {m.help} |" for m in catalog]
    return "\n".join(rows) + "\n"
