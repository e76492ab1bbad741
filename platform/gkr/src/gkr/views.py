"""What the read commands show, computed from the registry and the cluster's answers (pure).

`gkr clusters`: GPUs per region by type and each team's nominal quota (the registry's, which
fleet's quota plan computed), or with --live what each team's ClusterQueue holds and uses.
`gkr list`: one row per job. `gkr logs`: each line prefixed with its pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract import names
from contract.registry import Region, Registry


@dataclass(frozen=True)
class LiveQuota:
    nominal: int
    used: int  # may exceed nominal while the team borrows

    @property
    def free(self) -> int:
        return self.nominal - self.used


Quota = int | LiveQuota | str  # nominal GPUs, what the cluster says, or `unreachable: <why>`


def gpus_by_type(region: Region) -> dict[str, int]:
    """The region's GPUs, by GKE accelerator type, in the order its pools are listed."""
    gpus: dict[str, int] = {}
    for pool in region.pools:
        gpus[pool.machine.gpu_type] = gpus.get(pool.machine.gpu_type, 0) + pool.gpus
    return gpus


def nominal_quota(registry: Registry, region: Region) -> dict[str, Quota]:
    return {t.name: t.quota.get(region.name, 0) for t in registry.teams}


def queue_gpus(queue: dict[str, Any], resource: str = names.GPU_RESOURCE) -> LiveQuota:
    """Nominal and in-use GPUs of a ClusterQueue, over all its flavors."""
    nominal = sum(
        int(r.get("nominalQuota", 0))
        for group in queue.get("spec", {}).get("resourceGroups", [])
        for flavor in group.get("flavors", [])
        for r in flavor.get("resources", [])
        if r.get("name") == resource
    )
    used = sum(
        int(r.get("total", 0))
        for flavor in queue.get("status", {}).get("flavorsUsage", [])
        for r in flavor.get("resources", [])
        if r.get("name") == resource
    )
    return LiveQuota(nominal, used)


def live_quota(teams: list[str], queues: list[dict[str, Any]] | None, why: str) -> dict[str, Quota]:
    """Each team's queue (its ClusterQueue is named after the team), or `unreachable: <why>` without an answer."""
    if queues is None:
        return dict.fromkeys(teams, f"unreachable: {why}")
    by_name = {q["metadata"]["name"]: q for q in queues}
    return {team: queue_gpus(by_name[team]) if team in by_name else LiveQuota(0, 0) for team in teams}


def capacity_row(region: Region, quota: dict[str, Quota]) -> dict[str, Any]:
    """A row of `gkr clusters` as data (-o yaml|json)."""
    plain = {
        team: {"nominal": q.nominal, "used": q.used, "free": q.free} if isinstance(q, LiveQuota) else q
        for team, q in quota.items()
    }
    return {"region": region.name, "cluster": region.cluster, "gpus": gpus_by_type(region), "quota": plain}


def capacity_header(registry: Registry, live: bool) -> list[str]:
    return ["region", "cluster", "GPUs", *(f"{'free / ' if live else ''}quota {t.name}" for t in registry.teams)]


def capacity_cells(row: dict[str, Any]) -> list[str]:
    """A row of the table: `free / nominal` per team with --live, else nominal."""
    cells = [
        f"{q['free']:,} / {q['nominal']:,}" if isinstance(q, dict) else (f"{q:,}" if isinstance(q, int) else str(q))
        for q in row["quota"].values()
    ]
    return [row["region"], row["cluster"], ", ".join(f"{n:,} {t}" for t, n in row["gpus"].items()), *cells]


def job_row(kind: str, item: dict[str, Any]) -> list[str]:
    """kind, name, state (KubeRay's deployment status or state, else the first true condition), queue."""
    status = item.get("status", {})
    state = (
        status.get("jobDeploymentStatus")
        or status.get("state")
        or next((c["type"] for c in status.get("conditions", []) if c.get("status") == "True"), "Pending")
    )
    queue = item["metadata"].get("labels", {}).get(names.QUEUE_LABEL, "")
    return [kind, item["metadata"]["name"], str(state), queue, run_cell(item)]


def run_cell(item: dict[str, Any]) -> str:
    """For a RayJob that is one region's part of a run: the run and its regions, the home one starred."""
    from gkr.lighthouse import run_of

    found = run_of(item)
    if found is None:
        return ""
    run, regions, home = found
    return f"{run}: " + ", ".join(f"{r}*" if r == home else r for r in regions)


def prefixed(pod: str, text: str) -> str:
    return "".join(f"[{pod}] {line}\n" for line in text.splitlines())


def object_state(obj: dict[str, Any]) -> str:
    """One object of a run, in a few words: a RayJob's state, the Lighthouse's readiness and address."""
    status = obj.get("status") or {}
    if obj.get("kind") == "Secret":  # the run's TLS identity: its contents are never shown
        return "present"
    if obj.get("kind") == "Deployment":
        return f"{status.get('readyReplicas', 0)}/{(obj.get('spec') or {}).get('replicas', 1)} ready"
    if obj.get("kind") == "Service":
        ingress = (status.get("loadBalancer") or {}).get("ingress") or [{}]
        ip = ingress[0].get("ip") if isinstance(ingress[0], dict) else None
        return f"{ip}:{names.LIGHTHOUSE_PORT}" if ip else "no load balancer IP yet"
    state = status.get("jobDeploymentStatus") or "Pending"
    return f"{state} ({status['jobStatus']})" if status.get("jobStatus") else str(state)


def run_status(run: str, home: str, found: dict[str, list[dict[str, Any]] | str]) -> dict[str, Any]:
    """`gkr status` of a run across regions: per region its objects and their state, or why it did not answer."""
    regions: dict[str, Any] = {}
    for region, objects in found.items():
        if isinstance(objects, str):
            regions[region] = objects
            continue
        regions[region] = {
            f"{o.get('kind', 'RayJob').lower()}/{o['metadata']['name']}": object_state(o) for o in objects
        } or "nothing found (deleted, or not submitted here)"
    return {"run": run, "home": home, "regions": regions}
