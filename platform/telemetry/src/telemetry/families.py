"""A collector per catalog metric, in a registry of the component's own.

A Counter is declared without ``_total`` (the library appends it), so the exposed name is the catalog's.
Families are keyed by the catalog's Metric (``found[TRAINER.step]``), never by a spelled name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from contract.metrics import Metric

Registry = CollectorRegistry  # what components hold and hand to telemetry.exposition, without importing the library


def registry() -> Registry:
    """A registry of the component's own (not the library's global one, which collects process metrics)."""
    return CollectorRegistry(auto_describe=True)


class Family:
    """One catalog metric, with the small API Warden, preflight and the trainer call: inc, set, observe, get."""

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
    catalog: Iterable[Metric], registry: CollectorRegistry, buckets: Mapping[Metric, tuple[float, ...]] | None = None
) -> dict[Metric, Family]:
    """A Family per catalog entry, keyed by the entry, registered in `registry`; histograms take `buckets`."""
    return {m: Family(m, registry, (buckets or {}).get(m, ())) for m in catalog}
