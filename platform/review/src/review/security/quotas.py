"""Team quotas and priorities as Kueue and the namespaces get them, against the fleet plan.

The report's quota table reads each side's fleet plan (`meridian plan --json`); Argo CD applies the rendered
ClusterQueues, Cohort, ResourceQuotas and WorkloadPriorityClasses. A generator that renders other numbers
than the plan (research's queue x4) left the table at +0. So each of those numbers is compared with what
the pull request's own plan says it should be, whenever the number or the plan's word on it changes:

- a team's ClusterQueue: nominal quota and borrowing limit per flavor and resource (`kueue.teams`);
- the Cohort: its own nominal quota (`kueue.cohort`, the GPUs in no team's quota);
- any other ClusterQueue (Warden's sweeps): nothing of its own, and a borrowing limit no higher than
  everything the cohort can lend in that flavor (the cohort's quota and every team's nominal quota);
- a team namespace's ResourceQuota: `requests.<resource>` at the team's ceiling (`kueue.teams.admissible`),
  its object counts (`pods`, `services`, `count/...`) at the plan's (`objects`, fleet.objectquota); any other
  ResourceQuota's `pods` may move by exactly the region's node change (one node agent per node);
- a WorkloadPriorityClass the plan names at the plan's value (`priorities`), any other strictly below
  every one the plan names, so it preempts no team's workload.

A disagreement is one line naming the number, before -> after, and what the plan says. A plan that says
nothing (a side whose producer predates these fields, or a cluster the plan does not name) explains
nothing: every changed number is listed. The plan is the pull request's own document, read as hostile
data: anything but a count explains nothing. Pure: objects and plans in, lines out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contract import names
from review.kubernetes import Obj
from review.security.common import dicts

KUEUE = "kueue.x-k8s.io"
QUEUE_KINDS = ("ClusterQueue", "Cohort")
PLANNED_KINDS = (*QUEUE_KINDS, "WorkloadPriorityClass", "ResourceQuota")  # what the fleet plan has a word on
Entry = tuple[str, str, str]  # flavor, resource, field (nominalQuota, borrowingLimit, lendingLimit)
_FIELDS = {"nominalQuota": "nominal", "borrowingLimit": "borrowing limit", "lendingLimit": "lending limit"}


def amount(value: Any) -> int | None:
    """A quantity as the generator writes it (an int, or whole GiB as "<n>Gi"); anything else is None."""
    if isinstance(value, str):
        digits = value.removesuffix("Gi")
        return int(digits) if digits.isdigit() and len(digits) < 16 else None
    return _count(value)


def _count(value: Any) -> int | None:
    """A count in the plan document (hostile): an int, never a bool."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _counts(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): n for k, v in value.items() if (n := _count(v)) is not None}


def _table(value: Any) -> dict[tuple[str, str], int]:
    """flavor -> resource -> count, from the plan document; what is not a count is left out."""
    if not isinstance(value, dict):
        return {}
    return {(str(f), r): n for f, quota in value.items() for r, n in _counts(quota).items()}


@dataclass(frozen=True)
class ClusterPlan:
    """What one side's fleet plan says about one cluster."""

    region: str
    nodes: int | None
    knows_kueue: bool = False  # the plan has the `kueue` fields at all
    cohort: dict[tuple[str, str], int] = field(default_factory=dict)
    nominal: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)  # team -> its table
    borrowing: dict[str, dict[tuple[str, str], int]] = field(default_factory=dict)
    admissible: dict[str, dict[str, int]] = field(default_factory=dict)  # team -> resource -> ceiling
    objects: dict[str, dict[str, int]] = field(default_factory=dict)  # team -> ResourceQuota count name -> count
    priorities: dict[str, int] | None = None  # None: the plan names none
    machines: dict[str, str] = field(default_factory=dict)  # GPU pool -> machine type


def cluster_plans(plan: Any) -> dict[str, ClusterPlan]:
    """Cluster name -> what the plan says of it; {} for a missing or malformed plan."""
    if not isinstance(plan, dict):
        return {}
    raw = plan.get("priorities")
    priorities = (
        {str(p.get("name")): n for p in dicts(raw) if (n := _count(p.get("value"))) is not None}
        if isinstance(raw, list)
        else None
    )
    out = {}
    for region in dicts(plan.get("regions")):
        cluster, kueue, capacity = region.get("cluster"), region.get("kueue"), region.get("capacity")
        objects = region.get("objects")
        objects = {str(t): _counts(q) for t, q in objects.items()} if isinstance(objects, dict) else {}
        if not isinstance(cluster, str):
            continue
        kueue = kueue if isinstance(kueue, dict) else None
        teams = (kueue or {}).get("teams")
        teams = {str(t): q for t, q in teams.items() if isinstance(q, dict)} if isinstance(teams, dict) else {}
        out[cluster] = ClusterPlan(
            str(region.get("name")),
            _count(capacity.get("nodes")) if isinstance(capacity, dict) else None,
            kueue is not None,
            _table((kueue or {}).get("cohort")),
            {t: _table(q.get("nominal")) for t, q in teams.items()},
            {t: _table(q.get("borrowing")) for t, q in teams.items()},
            {t: _counts(q.get("admissible")) for t, q in teams.items()},
            objects,
            priorities,
            {
                str(p.get("name")): p["machine_type"]
                for p in dicts(region.get("gpu_pools"))
                if isinstance(p.get("machine_type"), str)
            },
        )
    return out


def quota_table(o: Obj | None) -> dict[Entry, Any]:
    """A ClusterQueue's or Cohort's quotas: (flavor, resource, field) -> the value as written."""
    out: dict[Entry, Any] = {}
    for group in dicts(((o or {}).get("spec") or {}).get("resourceGroups")):
        for flavor in dicts(group.get("flavors")):
            for resource in dicts(flavor.get("resources")):
                for name, value in resource.items():
                    if name != "name":
                        out[(str(flavor.get("name")), str(resource.get("name")), str(name))] = value
    return out


def _covered(o: Obj | None) -> set[str]:
    groups = dicts(((o or {}).get("spec") or {}).get("resourceGroups"))
    return {str(r) for g in groups for r in g.get("coveredResources") or []}


# --- What the plan explains -----------------------------------------------------------------------

Why = str | None  # None: the plan explains the value; else what the plan says instead
SILENT = "the fleet plan does not say"  # a plan without these fields (an older producer), or another cluster
Key = tuple[str, str, str, str]


def _wanted(wanted: int | None, value: Any) -> Why:
    if wanted is None:
        return "the fleet plan gives none"
    return None if amount(value) == wanted else f"the fleet plan: {wanted:,}"


def _queue_why(kind: str, name: str, entry: Entry, value: Any, plan: ClusterPlan | None) -> Why:
    if plan is None or not plan.knows_kueue:
        return SILENT
    flavor, resource, what = entry
    if kind == "Cohort":
        return _wanted(plan.cohort.get((flavor, resource)) if what == "nominalQuota" else None, value)
    if name in plan.nominal:
        tables = {"nominalQuota": plan.nominal[name], "borrowingLimit": plan.borrowing.get(name, {})}
        return _wanted(tables.get(what, {}).get((flavor, resource)), value)
    # A queue the plan does not name (Warden's sweeps) holds nothing of its own and borrows at most what
    # the cohort can lend: its own quota and every team's nominal quota in that flavor.
    if what == "nominalQuota":
        return None if amount(value) == 0 else "the fleet plan gives it nothing of its own"
    if what != "borrowingLimit":
        return "the fleet plan gives none"
    lendable = plan.cohort.get((flavor, resource), 0) + sum(t.get((flavor, resource), 0) for t in plan.nominal.values())
    held = amount(value)
    return None if held is not None and held <= lendable else f"more than the cohort can lend there, {lendable:,}"


def _show(value: Any) -> str:
    n = amount(value)
    if n is None:
        return "(none)" if value is None else str(value)[:40]
    return f"{n:,}Gi" if isinstance(value, str) and value.endswith("Gi") else f"{n:,}"


def _line(what: str, was: Any, now: Any, why_now: Why, why_before: Why) -> list[str]:
    """The number, when the plan does not explain HEAD's value and the value moved, or the plan's word on
    it moved (a plan that stopped saying anything leaves an unchanged value alone)."""
    if why_now is None or (was == now and why_now in (why_before, SILENT)):
        return []
    return [f"{what} {_show(was)} -> {_show(now)} ({why_now})"]


def queue_lines(k: Key, old: Obj | None, new: Obj, before: ClusterPlan | None, after: ClusterPlan | None) -> list[str]:
    """A ClusterQueue's or Cohort's numbers that HEAD's plan does not explain (module doc)."""
    kind, name = k[1], k[3]
    was, now = quota_table(old), quota_table(new)
    out = []
    for entry in [*now, *(e for e in was if e not in now)]:
        flavor, resource, what = entry
        out += _line(
            f"quota {flavor}/{resource} {_FIELDS.get(what, what)}",
            was.get(entry),
            now.get(entry),
            _queue_why(kind, name, entry, now.get(entry), after),
            _queue_why(kind, name, entry, was.get(entry), before),
        )
    if old is not None and _covered(old) and _covered(old) != _covered(new):
        out.append(f"covers {', '.join(sorted(_covered(old)))} -> {', '.join(sorted(_covered(new))) or '(nothing)'}")
    return out


def _team_of(namespace: str, plan: ClusterPlan | None) -> str | None:
    return next((t for t in (plan.admissible if plan else {}) if names.team_namespace(t) == namespace), None)


def _planned_count(namespace: str, key: str, plan: ClusterPlan | None) -> int | None:
    """The plan's object count `key` of a team namespace (fleet.objectquota), or None where it says none."""
    team = _team_of(namespace, plan)
    return plan.objects.get(team, {}).get(key) if plan is not None and team is not None else None


def judges_resource_quota(k: Key, key: str, plan: ClusterPlan | None) -> bool:
    """Whether resource_quota_lines judges this `spec.hard` key (else the default deny lists its change)."""
    team = _team_of(k[2], plan) is not None
    return key == "pods" or (team and key.startswith("requests.")) or _planned_count(k[2], key, plan) is not None


def resource_quota_lines(
    k: Key, old: Obj | None, new: Obj, before: ClusterPlan | None, after: ClusterPlan | None
) -> list[str]:
    """A team namespace's `requests.*` at the plan's ceiling and its counts at the plan's, and any other `pods`
    moving with the region's nodes."""

    def hard(o: Obj | None) -> dict[str, Any]:
        value = ((o or {}).get("spec") or {}).get("hard")
        return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}

    def ceiling(key: str, value: Any, plan: ClusterPlan | None) -> Why:
        team = _team_of(k[2], plan)
        return _wanted(plan.admissible[team].get(key.removeprefix("requests.")), value) if plan and team else None

    was, now = hard(old), hard(new)
    grown = (
        after.nodes - before.nodes
        if after and before and after.nodes is not None and before.nodes is not None
        else None
    )
    out = []
    for key in [*now, *(x for x in was if x not in now)]:
        a, b = was.get(key), now.get(key)
        if _planned_count(k[2], key, after) is not None:  # a team namespace's count: the plan's
            out += _line(
                f"hard {key}",
                a,
                b,
                _wanted(_planned_count(k[2], key, after), b),
                _wanted(_planned_count(k[2], key, before), a) if before is not None else SILENT,
            )
        elif key == "pods" and a != b:
            old_pods, new_pods = amount(a), amount(b)
            if grown is None:
                out.append(f"hard pods {_show(a)} -> {_show(b)} ({SILENT})")
            elif old_pods is None or new_pods is None or new_pods - old_pods != grown:
                out.append(f"hard pods {_show(a)} -> {_show(b)} (the region's nodes change by {grown:+,})")
        elif key.startswith("requests.") and _team_of(k[2], after) is not None:
            out += _line(f"hard {key}", a, b, ceiling(key, b, after), ceiling(key, a, before))
    return out


def priority_lines(
    name: str, old: Obj | None, new: Obj, before: ClusterPlan | None, after: ClusterPlan | None
) -> list[str]:
    """A WorkloadPriorityClass's value the plan does not explain (module doc)."""

    def why(value: Any, plan: ClusterPlan | None) -> Why:
        if plan is None or not plan.priorities:
            return SILENT
        if name in plan.priorities:
            return _wanted(plan.priorities[name], value)
        lowest, floor = min(plan.priorities.items(), key=lambda p: p[1])
        held = _count(value)
        if held is not None and held < floor:
            return None
        return f"not below {lowest} ({floor:,}), the fleet plan's lowest: it can preempt team workloads"

    a, b = (old or {}).get("value"), new.get("value")
    return _line("value", a, b, why(b, after), why(a, before))


# --- The rendered side of the report's quota table ------------------------------------------------


def queue_gpus(clusters: dict[str, list[Obj]], plan: Any) -> dict[str, int]:
    """ "research in us-east4 (ClusterQueue)" -> the nominal GPUs the rendered queue holds, over its flavors."""
    regions = {c: p.region for c, p in cluster_plans(plan).items()}
    out = {}
    for cluster, objects in clusters.items():
        for o in objects:
            if o.get("kind") == "ClusterQueue" and str(o.get("apiVersion", "")).startswith(f"{KUEUE}/"):
                held = sum(
                    amount(v) or 0
                    for (_, resource, what), v in quota_table(o).items()
                    if resource == names.GPU_RESOURCE and what == "nominalQuota"
                )
                name = (o.get("metadata") or {}).get("name")
                out[f"{name} in {regions.get(cluster, cluster)} (ClusterQueue)"] = held
    return out
