"""`gkr health` (operators): per cluster and pool, nodes by Warden state, deep checks due, recent failures."""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Annotated, Any

import typer
from rich.table import Table

from contract.problem import Exit, one_of
from contract.registry import Region, Registry
from gkr import health as report
from gkr import health_read, kube
from gkr.commands import common, options


def health(
    region: Annotated[
        list[str] | None, typer.Option("--region", help="only this region (repeatable; default: every region)")
    ] = None,
    context: Annotated[
        str | None, typer.Option("--context", help="kubeconfig context for the one region chosen")
    ] = None,
    nodes: Annotated[bool, typer.Option("--nodes", help="also one line per node")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="the whole report as JSON (schema meridian.health/v1)")
    ] = False,
    due_after: Annotated[
        float | None,
        typer.Option("--due-after", help="days after its last deep check a node is due (default: Warden's cadence)"),
    ] = None,
    registry: options.RegistryPath = None,
) -> None:
    """Operators: per cluster and pool, nodes by Warden state, deep checks due, failures in the last 7 days."""
    _, found = common.located(registry)
    reg = found.registry
    if due_after is not None and not (math.isfinite(due_after) and 0 < due_after <= 3650):
        common.fail([f"--due-after {due_after}: a number of days in (0, 3650]"])
    chosen = _regions(reg, region or [])
    if context is not None and len(chosen) != 1:
        common.fail(["--context names one cluster's context: give one --region with it"])
    now = time.time()
    clusters = [_cluster(reg, r, context, due_after, now) for r in chosen]
    whole = report.report(clusters, now)
    if not as_json and not any(c["reachable"] for c in clusters):  # an empty table would say nothing
        print(f"error: {no_cluster_line(clusters)}", file=sys.stderr)
        raise SystemExit(Exit.FAILED)
    if as_json:
        print(json.dumps(whole, indent=2))
    else:
        _table(whole, nodes)
    if any(not c["reachable"] for c in clusters):
        raise SystemExit(Exit.FAILED)


def no_cluster_line(clusters: list[dict[str, Any]]) -> str:
    """Why no cluster could be read, and what fixes it (each region's credentials command), as one line."""
    whys = dict.fromkeys(str(c["error"]).split("; run: ")[0] for c in clusters)
    fixes = [str(c["error"]).partition("; run: ")[2] or f"{c['region']}: {c['error']}" for c in clusters]
    return (
        f"could read no cluster ({', '.join(whys)}): run {'; '.join(fixes)}; "
        "or point KUBECONFIG at a kubeconfig with the clusters' contexts"
    )


def _regions(reg: Registry, names: list[str]) -> list[Region]:
    """The regions named (each once, in the order given), or every region; an unknown one ends here, exit 2."""
    known = {r.name: r for r in reg.regions}
    unknown = [r for r in names if r not in known]
    if unknown:
        common.fail([f"--region {unknown[0]}: {one_of(known, unknown[0])}"])
    return [known[r] for r in dict.fromkeys(names)] if names else list(reg.regions)


def _cluster(reg: Registry, region: Region, context: str | None, due_after: float | None, now: float) -> dict[str, Any]:
    """One cluster's report, or why it could not be read."""
    target = context or reg.context(region)
    where = {"region": region.name, "cluster": region.cluster, "context": target}
    try:
        read = health_read.read(
            kube.client(target), common.LIVE_TIMEOUT_S, None if due_after is None else due_after * 86400
        )
    except Exception as exc:
        why = kube.unreachable(exc)
        fix = f"; run: {reg.credentials_command(region)}" if why in ("no context", "no kubeconfig") else ""
        return report.unreachable_report(where, why + fix)
    listed = report.nodes_of(read.nodes, read.events, now, read.cadence["seconds"])
    return report.cluster_report(where, listed, read.cadence, read.notes)


def _table(whole: dict[str, Any], nodes: bool) -> None:
    table = Table(*report.POOL_HEADER)
    for cluster in whole["clusters"]:
        for row in cluster.get("pools", []):
            table.add_row(*report.pool_cells(cluster, row))
    common.console().print(table)
    for cluster in whole["clusters"]:
        if not cluster["reachable"]:
            print(f"{cluster['region']}: unreachable ({cluster['error']})")
            continue
        days = cluster["cadence"]["seconds"] / 86400
        print(f"{cluster['region']}: due after {days:g} days ({cluster['cadence']['source']})")
        for note in cluster["notes"]:
            print(f"{cluster['region']}: note: {note}")
        for node in cluster["nodes"] if nodes else []:
            print(report.node_line(node))


command = options.typer_command("health", health)
