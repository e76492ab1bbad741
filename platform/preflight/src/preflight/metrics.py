"""preflight's results as Prometheus metrics (contract.metrics.PREFLIGHT): served while it runs, or a textfile.

``--metrics-port`` serves them while the checks run (the probation and job-start pods, scraped by the
generated PodMonitorings until they exit); ``--metrics-file`` writes them once at the end, whole, for
node-exporter's textfile collector on a node that has one. The verdict label is the check's status:
pass, fail, error (could not run) or skip.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from contract.metrics import PREFLIGHT
from preflight.report import Result
from telemetry.exposition import serve, write_textfile
from telemetry.families import families, registry


class PreflightMetrics:
    def __init__(self) -> None:
        self.registry = registry()
        found = families(PREFLIGHT, self.registry)
        self.checks = found[PREFLIGHT.checks]
        self.last_run = found[PREFLIGHT.last_run]
        self.server: Any = None

    def serve(self, port: int) -> int:
        self.server, bound = serve(self.registry, port)
        return bound

    def record(self, result: Result) -> None:
        self.checks.inc(check=result.name, verdict=result.status)

    def finish(self, textfile: str | None) -> None:
        self.last_run.set(time.time())
        if textfile:
            write_textfile(Path(textfile), self.registry)
