"""The catalog's metrics (contract.metrics) on the Prometheus client library, shared by preflight, Warden, trainer.

``telemetry.families`` builds one collector per catalog metric in a component's own registry;
``telemetry.exposition`` writes, serves and checks the text format. The only package that imports
``prometheus_client`` in the code that ships (tests/contract/test_single_sources.py).
"""

from __future__ import annotations

import prometheus_client

# The library adds a `<counter>_created` series per counter; the catalog does not declare it and no query uses it.
# Here, so it holds before any exposition is written, whichever of the modules a component imports.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
