"""Prometheus collectors built from contract.metrics, one private registry per component, and their exposition.

Shared by preflight, Warden and the trainer (both depend on preflight; contract stays standard-library only).
The client library writes the text format; this module only maps the catalog onto it: a Counter is declared
without ``_total`` (the library appends it), so the exposed name is the catalog's.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from contract.metrics import Metric

# The library adds a `<counter>_created` series per counter; the catalog does not declare it and no query uses it.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST


class Family:
    """One catalog metric, with the small API Warden and the trainer call: inc, set, observe, get."""

    def __init__(self, metric: Metric, registry: CollectorRegistry, buckets: tuple[float, ...] = ()) -> None:
        self.metric, self.registry = metric, registry
        labels = list(metric.labels)
        if metric.kind == "counter":
            self.collector: Any = Counter(metric.name.removesuffix("_total"), metric.help, labels, registry=registry)
        elif metric.kind == "gauge":
            self.collector = Gauge(metric.name, metric.help, labels, registry=registry)
        else:
            bounds = buckets or Histogram.DEFAULT_BUCKETS
            self.collector = Histogram(metric.name, metric.help, labels, registry=registry, buckets=bounds)

    def _child(self, labels: dict[str, Any]) -> Any:
        return self.collector.labels(**{k: str(v) for k, v in labels.items()}) if labels else self.collector

    def inc(self, amount: float = 1, **labels: Any) -> None:
        self._child(labels).inc(amount)

    def set(self, value: float, **labels: Any) -> None:
        self._child(labels).set(value)

    def observe(self, value: float, **labels: Any) -> None:
        self._child(labels).observe(value)

    def get(self, **labels: Any) -> float:
        """The current value (a histogram's count); 0 for a label set never touched."""
        sample = self.metric.name + ("_count" if self.metric.kind == "histogram" else "")
        value = self.registry.get_sample_value(sample, {k: str(v) for k, v in labels.items()})
        return value or 0.0


def families(
    catalog: Iterable[Metric], registry: CollectorRegistry, buckets: dict[str, tuple[float, ...]] | None = None
) -> dict[str, Family]:
    """A Family per catalog entry, by name, registered in `registry`."""
    return {m.name: Family(m, registry, (buckets or {}).get(m.name, ())) for m in catalog}


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
