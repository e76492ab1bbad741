"""The run's live metrics (contract.metrics.TRAINER), fed by the group's events: rank 0 of each group serves them.

Every update comes from an event the group writes anyway (EventLog's observer), so the events file, the
/metrics endpoint and W&B tell one story. Goodput's buckets map onto the catalog's categories; the counters
advance by what each bucket gained since the last event.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from contract.metrics import GOODPUT_CATEGORIES, TRAINER
from contract.names import ADVERTISE_HOST_ENV, REGION_ENV
from telemetry.exposition import serve, write_textfile
from telemetry.families import families, registry
from trainer.observe.goodput import Goodput

log = logging.getLogger("trainer")

# observe/goodput.py's buckets -> the catalog's categories (GOODPUT_CATEGORIES): time stalled in
# recovery and steps that did not commit are both lost to a failure.
CATEGORY = {
    "productive": "productive",
    "startup": "startup",
    "checkpoint": "checkpoint",
    "recovery": "failed",
    "failed_steps": "failed",
    "replayed": "replayed",
}
# Staged: the blocking copy (seconds); durable: the upload and marker (up to minutes on a large model).
CHECKPOINT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class Sink(Protocol):
    """Somewhere else a window's values go (W&B)."""

    def log(self, values: dict[str, float], step: int) -> None: ...

    def finish(self) -> None: ...


class RunMetrics:
    """One replica group's TRAINER metrics, labelled run/region/group, in a registry of its own."""

    def __init__(self, run: str, region: str, group: int, goodput: Goodput, sinks: tuple[Sink, ...] = ()) -> None:
        self.registry = registry()
        self.family = families(TRAINER, self.registry, {TRAINER.checkpoint_seconds: CHECKPOINT_BUCKETS})
        self.labels = {"run": run, "region": region, "group": str(group)}
        self.goodput, self.sinks = goodput, sinks
        self.booked = dict.fromkeys(CATEGORY, 0.0)
        self.server: Any = None
        self.port = 0
        for category in GOODPUT_CATEGORIES:  # every category exposed from the start, at 0
            self.family[TRAINER.goodput_seconds].inc(0, **self.labels, category=category)
        self.family[TRAINER.heals].inc(0, **self.labels)

    def record(self, event: str, fields: dict[str, Any]) -> None:
        """Update from one event (EventLog's observer)."""
        self._book_goodput()
        if event == "commit":
            self.family[TRAINER.step].set(fields["step"], **self.labels)
            self.family[TRAINER.participants].set(fields["participants"], **self.labels)
            self.family[TRAINER.last_commit_timestamp_seconds].set(time.time(), **self.labels)
        elif event == "step":
            self._window(fields)
        elif event == "healed":
            self.family[TRAINER.heals].inc(1, **self.labels)
        elif event in ("checkpoint_staged", "checkpoint_durable"):
            state = event.removeprefix("checkpoint_")
            self.family[TRAINER.checkpoint_seconds].observe(fields["seconds"], **self.labels, state=state)

    def _book_goodput(self) -> None:
        for bucket, category in CATEGORY.items():
            gained = self.goodput.seconds.get(bucket, 0.0) - self.booked[bucket]
            if gained > 0:
                self.family[TRAINER.goodput_seconds].inc(gained, **self.labels, category=category)
                self.booked[bucket] += gained

    def _window(self, fields: dict[str, Any]) -> None:
        self.family[TRAINER.loss].set(fields["loss"], **self.labels)
        self.family[TRAINER.tokens_per_second].set(fields["tokens_per_s"], **self.labels)
        if fields.get("mfu") is not None:  # None: the peak is unknown (CPU); the gauge stays absent
            self.family[TRAINER.mfu_ratio].set(fields["mfu"], **self.labels)
        if self.sinks:
            values = self.values()
            for sink in self.sinks:
                sink.log(values, int(fields["step"]))

    def values(self) -> dict[str, float]:
        """This group's current values, keyed by the catalog's attribute name (W&B's key).

        Goodput seconds per category as ``goodput_seconds/<category>``; the histogram left out.
        """
        out: dict[str, float] = {}
        for key, m in TRAINER.items():
            if m.kind == "histogram":
                continue
            if "category" in m.labels:
                for c in GOODPUT_CATEGORIES:
                    out[f"{key}/{c}"] = self.family[m].get(**self.labels, category=c)
            elif self.registry.get_sample_value(m.name, self.labels) is not None:
                out[key] = self.family[m].get(**self.labels)
        return out

    def serve(self, port: int, port_file: Path) -> None:
        """Serve /metrics on `port` (0: any free one; taken: a free one instead); the bound port to `port_file`.

        In a pod (the Ray launcher sets names.ADVERTISE_HOST_ENV to its IP) only on that address, where the scrape
        arrives: not on the pod's other interfaces (gVNIC, RDMA NICs). The local launcher: every interface."""
        addr = os.environ.get(ADVERTISE_HOST_ENV) or "0.0.0.0"
        try:
            self.server, self.port = serve(self.registry, port, addr)
        except OSError as error:  # another group on this machine holds it (the local launcher)
            log.info("metrics port %d unavailable (%s); serving on a free port", port, error.strerror)
            self.server, self.port = serve(self.registry, 0, addr)
        port_file.parent.mkdir(parents=True, exist_ok=True)
        partial = port_file.with_name(port_file.name + ".partial")
        partial.write_text(f"{self.port}\n")
        partial.replace(port_file)  # whole or absent: a reader never sees an empty file

    def finish(self, textfile: Path) -> None:
        """The final values to `textfile` (Prometheus text format); stop serving, close the sinks."""
        self._book_goodput()
        write_textfile(textfile, self.registry)
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        for sink in self.sinks:
            sink.finish()


def region_of(cfg: Any, environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """The region label: the config's, else the job's environment (gkr), else "local"."""
    return str(getattr(cfg.ft, "region", "") or environ.get(REGION_ENV, "") or "local")


def start(cfg: Any, group: int, goodput: Goodput, run_dir: Path) -> RunMetrics:
    """A group's metrics, served unless run.metrics_port is -1, sent to W&B too with logging.wandb."""
    sinks: tuple[Sink, ...] = ()
    if cfg.logging.wandb:
        from trainer.observe.wandb_sink import WandbSink  # wandb is optional: imported only when asked for

        sinks = (WandbSink(cfg, group),)
    found = RunMetrics(cfg.run.name, region_of(cfg), group, goodput, sinks)
    if cfg.run.metrics_port >= 0:
        found.serve(cfg.run.metrics_port, run_dir / f"metrics-{group}.port")
    return found


def observer(found: RunMetrics | None) -> Callable[[str, dict[str, Any]], None] | None:
    return None if found is None else found.record
