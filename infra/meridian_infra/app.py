"""Build the CDK Terrain app for a fleet: `global` plus one stack per region."""

from __future__ import annotations

from cdktn import App

from fleet.load import LoadedFleet
from fleet.planner import peer_pod_ranges
from meridian_infra.backend import Backend
from meridian_infra.global_stack import GlobalStack
from meridian_infra.region_stack import RegionStack


def build_app(loaded: LoadedFleet, outdir: str, backend: Backend = "gcs") -> App:
    """The stacks of a loaded fleet, each region's from the address plan load() made."""
    fleet, addresses = loaded.fleet, loaded.addresses
    app = App(outdir=outdir)
    GlobalStack(app, fleet, backend)
    for ranges in addresses.regions:
        peers = peer_pod_ranges(addresses, ranges.region)
        RegionStack(app, fleet, fleet.regions[ranges.index], ranges, backend, peers)
    return app
