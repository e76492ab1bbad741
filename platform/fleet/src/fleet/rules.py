"""Rules that relate one part of the fleet spec to another.

Each rule returns Problems with the path of the value to change. Address
ranges are checked by the planner.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from functools import partial

from contract import names as name_rules
from contract.problem import Path, Problem, one_of
from fleet import images, names, upstream
from fleet.catalog import MACHINE_TYPES, REGIONS
from fleet.controllers import versions
from fleet.model import CapacityMode, Exclusion, Fleet, GpuPool, Region


def check(fleet: Fleet) -> list[Problem]:
    problems: list[Problem] = []
    for rule in (_regions, _pools, _cpu_pools, _teams, _priorities, _images, _upstream, _names):
        problems.extend(rule(fleet))
    return problems


def _duplicates(items: Iterable[tuple[Path, str]], what: str) -> Iterator[Problem]:
    items = list(items)
    counts = Counter(name for _, name in items)
    reported: set[str] = set()
    for path, name in items:
        if counts[name] > 1 and name not in reported:
            reported.add(name)
            yield Problem(path=path, message=f"{what} {name!r} is used {counts[name]} times; names must be unique")


def _regions(fleet: Fleet) -> Iterator[Problem]:
    yield from _duplicates(((("regions", i, "name"), r.name) for i, r in enumerate(fleet.regions)), "region")
    for i, region in enumerate(fleet.regions):
        at: Path = ("regions", i)
        known = REGIONS.get(region.name)
        if known is None:
            yield Problem(path=(*at, "name"), message=f"unknown region {region.name!r}; {one_of(REGIONS, region.name)}")
            continue
        for z, zone in enumerate(region.zones):
            if zone not in known:
                yield Problem(
                    path=(*at, "zones", z), message=f"zone {zone!r} is not in {region.name}; {one_of(known, zone)}"
                )
        yield from _duplicates(((((*at, "zones", z)), zone) for z, zone in enumerate(region.zones)), "zone")
        window = region.cluster.maintenance_window
        days_at = (*at, "cluster", "maintenance_window", "days")
        for d, day in enumerate(window.days):
            if day in window.days[:d]:
                # GKE takes a set of days: a repeat adds no maintenance time, and hides a missing day.
                yield Problem(path=(*days_at, d), message=f"{day} is listed twice; list each day once")
        if len(set(window.days)) * window.hours * 4 < 48:
            yield Problem(
                path=(*at, "cluster", "maintenance_window"),
                message="GKE needs at least 48 hours of maintenance availability in 32 days; "
                "add days or hours (days x hours must be at least 12)",
            )
        for e, exclusion in enumerate(region.cluster.maintenance_exclusions):
            yield from _exclusion(exclusion, (*at, "cluster", "maintenance_exclusions", e))
        system = region.system_pool
        machine = MACHINE_TYPES.get(system.machine_type)
        path = (*at, "system_pool", "machine_type")
        if machine is None:
            yield Problem(
                path=path,
                message=f"unknown machine type {system.machine_type!r}; {one_of(_cpu_types(), system.machine_type)}",
            )
        elif machine.is_gpu:
            yield Problem(
                path=path,
                message=f"{machine.name} is a GPU machine; the system pool needs a CPU type such as n2-standard-16",
            )


def _exclusion(exclusion: Exclusion, at: Path) -> Iterator[Problem]:
    if exclusion.end is None:
        if exclusion.scope == "NO_UPGRADES":
            yield Problem(
                path=(*at, "end"),
                message="a NO_UPGRADES exclusion needs an end (at most 30 days); "
                "set end, or use scope NO_MINOR_OR_NODE_UPGRADES to hold until end of support",
            )
        return
    length = exclusion.end - exclusion.start
    if length <= timedelta(0):
        yield Problem(path=(*at, "end"), message="the exclusion ends before it starts; swap start and end")
    elif exclusion.scope == "NO_UPGRADES" and length > timedelta(days=30):
        yield Problem(
            path=(*at, "end"),
            message=f"a NO_UPGRADES exclusion lasts at most 30 days in GKE, this one {length.days}; "
            "shorten it or use scope NO_MINOR_OR_NODE_UPGRADES",
        )


def _cpu_types() -> list[str]:
    return [m.name for m in MACHINE_TYPES.values() if not m.is_gpu]


def _pools(fleet: Fleet) -> Iterator[Problem]:
    teams = {t.name for t in fleet.teams}
    for i, region in enumerate(fleet.regions):
        at: Path = ("regions", i, "gpu_pools")
        yield from _duplicates(((((*at, p, "name")), pool.name) for p, pool in enumerate(region.gpu_pools)), "pool")
        for p, pool in enumerate(region.gpu_pools):
            yield from _pool(region, pool, (*at, p), teams)
        # Pools already reported for their zone or machine are left out.
        rdma = [
            (p, pool.zone)
            for p, pool in enumerate(region.gpu_pools)
            if (m := MACHINE_TYPES.get(pool.machine_type))
            and m.rdma_nics
            and pool.zone in region.zones
            and m.offered_in(pool.zone)
        ]
        zones = sorted({zone for _, zone in rdma})
        if len(zones) > 1:
            first_other = next(p for p, zone in rdma if zone != rdma[0][1])
            yield Problem(
                path=(*at, first_other, "zone"),
                message=f"A3 Ultra pools of {region.name} span zones {', '.join(zones)}; pods name RDMA networks rdma-0..7, "
                "which exist once per cluster, so keep them in one zone",
            )


def _cpu_pools(fleet: Fleet) -> Iterator[Problem]:
    for i, region in enumerate(fleet.regions):
        at: Path = ("regions", i, "cpu_pools")
        taken = {p.name for p in region.gpu_pools} | {names.SYSTEM_POOL}
        yield from _duplicates(((((*at, p, "name")), pool.name) for p, pool in enumerate(region.cpu_pools)), "pool")
        for p, pool in enumerate(region.cpu_pools):
            if pool.name in taken:
                yield Problem(
                    path=(*at, p, "name"),
                    message=f"pool name {pool.name!r} is already a GPU or system pool; pick another name",
                )
            machine = MACHINE_TYPES.get(pool.machine_type)
            if machine is None or machine.is_gpu:
                what = "is a GPU machine" if machine else "is not a known CPU machine type"
                yield Problem(
                    path=(*at, p, "machine_type"),
                    message=f"{pool.machine_type!r} {what}; {one_of(_cpu_types(), pool.machine_type)}",
                )
            if pool.min_nodes > pool.max_nodes:
                yield Problem(
                    path=(*at, p, "min_nodes"),
                    message=f"min_nodes {pool.min_nodes} is above max_nodes {pool.max_nodes}",
                )


def _pool(region: Region, pool: GpuPool, at: Path, teams: set[str]) -> Iterator[Problem]:
    if pool.zone not in region.zones:
        yield Problem(
            path=(*at, "zone"),
            message=f"zone {pool.zone!r} is not one of the zones of {region.name}; {one_of(region.zones, pool.zone)}",
        )
    machine = MACHINE_TYPES.get(pool.machine_type)
    gpu_types = [m.name for m in MACHINE_TYPES.values() if m.is_gpu]
    if machine is None:
        yield Problem(
            path=(*at, "machine_type"),
            message=f"unknown machine type {pool.machine_type!r}; {one_of(gpu_types, pool.machine_type)}",
        )
    elif not machine.is_gpu:
        yield Problem(path=(*at, "machine_type"), message=f"{machine.name} has no GPUs; {one_of(gpu_types)}")
    elif pool.zone in region.zones and not machine.offered_in(pool.zone):
        offered = sorted(z for z in machine.zones or () if z.startswith(f"{region.name}-"))
        where = (
            f"in {region.name} it is offered in {', '.join(offered)}"
            if offered
            else f"it is not offered in {region.name}"
        )
        yield Problem(path=(*at, "zone"), message=f"{machine.name} is not offered in {pool.zone}; {where}")
    if pool.team is not None and pool.team not in teams:
        yield Problem(path=(*at, "team"), message=f"unknown team {pool.team!r}; {one_of(teams, pool.team)}")
    yield from _capacity(pool, (*at, "capacity"))


def _capacity(pool: GpuPool, at: Path) -> Iterator[Problem]:
    capacity = pool.capacity
    mode = capacity.mode
    if mode is CapacityMode.RESERVATION:
        if not capacity.reservation:
            yield Problem(
                path=(*at, "reservation"),
                message="mode reservation needs the reservation's name; add capacity.reservation",
            )
        return
    why = {
        CapacityMode.FLEX_START: "queued provisioning (flex-start) cannot consume a reservation",
        CapacityMode.SPOT: "spot capacity cannot consume a reservation",
        CapacityMode.ON_DEMAND: "on-demand pools do not consume a reservation",
    }[mode]
    if capacity.reservation:
        yield Problem(path=(*at, "reservation"), message=f"{why}; remove it or use mode: reservation")
    if capacity.block:
        yield Problem(
            path=(*at, "block"),
            message=f"{why}, so a reservation block does not apply; remove it or use mode: reservation",
        )


def _teams(fleet: Fleet) -> Iterator[Problem]:
    yield from _duplicates(((("teams", i, "name"), t.name) for i, t in enumerate(fleet.teams)), "team")
    values = {p.name: p.value for p in fleet.priorities}
    for i, team in enumerate(fleet.teams):
        for field in ("priority", "max_priority"):
            name = getattr(team, field)
            if name is not None and name not in values:
                yield Problem(path=("teams", i, field), message=f"unknown priority {name!r}; {one_of(values, name)}")
        if team.priority in values and team.ceiling in values and values[team.priority] > values[team.ceiling]:
            yield Problem(
                path=("teams", i, "max_priority"),
                message=f"{team.ceiling} is below the team's default priority {team.priority}; raise max_priority",
            )
    yield from _quotas(fleet)


def _quotas(fleet: Fleet) -> Iterator[Problem]:
    # Whether the pools can hold the quotas is the quota plan's to say (fleet.quotaplan).
    regions = {r.name for r in fleet.regions}
    for i, team in enumerate(fleet.teams):
        for name in team.quota:
            if name not in regions:
                yield Problem(
                    path=("teams", i, "quota", name),
                    message=f"quota for region {name!r}, which the fleet does not have; {one_of(regions, name)}",
                )


def _priorities(fleet: Fleet) -> Iterator[Problem]:
    yield from _duplicates(((("priorities", i, "name"), p.name) for i, p in enumerate(fleet.priorities)), "priority")
    yield from _duplicates(
        ((("priorities", i, "value"), str(p.value)) for i, p in enumerate(fleet.priorities)), "priority value"
    )


def _images(fleet: Fleet) -> Iterator[Problem]:
    registry = fleet.registry.url(fleet.project.id)
    for field in ("warden_image", "trainer_image"):
        image: str = getattr(fleet.versions, field)
        if not image.startswith(f"{registry}/"):
            yield Problem(
                path=("versions", field),
                message=f"image must come from the fleet's registry {registry}/; push it there and pin its digest",
            )


def _upstream(fleet: Fleet) -> Iterator[Problem]:
    """What each pinned upstream release needs written down, one line per release: the commit its tag names
    (Argo CD syncs that, fleet.upstream), for Argo CD its helper images (fleet.images.ARGOCD_HELPERS), and a
    reading of its sources at that version (fleet.controllers.versions); so too for the Ray every image runs."""
    for release in upstream.UPSTREAMS:
        pinned = upstream.version(release, fleet)
        missing = []
        if release is upstream.ARGOCD and pinned not in images.ARGOCD_HELPERS:
            missing.append(
                "its redis and dex images are not known to the Binary Authorization allowlist; add them to "
                "fleet.images.ARGOCD_HELPERS from that tag's manifests/install.yaml "
                f"(known: {', '.join(sorted(images.ARGOCD_HELPERS))})"
            )
        if pinned not in release.commits:
            missing.append(upstream.missing(release, pinned))
        unread = versions.unread(release.field, pinned)  # what was read at the pin (fleet.controllers.versions)
        if unread is not None:
            missing.append(unread)
        if missing:
            yield Problem(
                path=("versions", release.field), message=f"{release.name} {pinned}: {'; and '.join(missing)}"
            )
    ray = name_rules.RAY_VERSION  # not fleet.yaml's: the requirements lock pins it (tests/contract)
    unread = versions.unread("ray", ray)
    if unread is not None:
        yield Problem(path=("versions",), message=f"Ray {ray} (contract.names.RAY_VERSION): {unread}")


# (what, rule, shortest, longest, whose rules). Every name the platform derives is checked against the API
# that will receive it, so a spec that plans cleanly never fails at apply. The rules are contract.names'; the
# lengths are checked first (the rules' own would say less), so the rules take any length here.
_ANY = 1 << 16
_DNS_CHARACTERS = "lowercase letters, digits and '-'"
_DNS1035: Callable[[str], bool] = partial(name_rules.is_dns1035_label, limit=_ANY)
_KINDS: dict[str, tuple[Callable[[str], bool], int, int, str]] = {
    "namespace": (partial(name_rules.is_dns1123_label, limit=_ANY), 1, 63, "Kubernetes' DNS-1123 label"),
    "cluster name": (_DNS1035, 1, name_rules.GKE_NAME_MAX, "GKE"),
    "network name": (_DNS1035, 1, 63, "Compute Engine"),
    "subnet name": (_DNS1035, 1, 63, "Compute Engine"),
    "bucket name": (partial(name_rules.is_bucket_name, dots=False), 3, 63, "Cloud Storage"),
    "service account id": (_DNS1035, 6, names.SERVICE_ACCOUNT_ID_MAX, "IAM"),
}


def _derived(fleet: Fleet) -> Iterator[tuple[Path, str, str, str]]:
    """(path to change, kind, derived name, how to fix) for every name made from the spec."""
    shorter = "shorten the fleet name"
    for i, team in enumerate(fleet.teams):
        at: Path = ("teams", i, "name")
        yield at, "namespace", names.team_namespace(team.name), "shorten the team name"
        account = names.team_service_account_id(fleet, team.name)
        yield at, "service account id", account, "shorten the team name or the fleet name"
    for role in names.SERVICE_ACCOUNT_ROLES:
        yield ("name",), "service account id", names.service_account_id(fleet, role), shorter
    yield ("name",), "network name", names.main_network(fleet), shorter
    yield ("name",), "network name", names.gvnic_network(fleet), shorter
    for i, region in enumerate(fleet.regions):
        yield (
            ("regions", i, "cluster", "name"),
            "cluster name",
            fleet.cluster_name(region),
            "set a shorter cluster.name",
        )
        yield (
            ("buckets", "checkpoint_prefix"),
            "bucket name",
            fleet.buckets.checkpoint_bucket(region.name),
            ("shorten the prefix"),
        )
        yield ("name",), "subnet name", names.region_subnet(fleet, region.name), shorter
        yield ("name",), "subnet name", names.gvnic_subnet(fleet, region.name), shorter
        for zone in sorted({p.zone for p in region.gpu_pools}):
            yield ("name",), "network name", names.rdma_network(fleet, zone), shorter
            yield ("name",), "subnet name", names.rdma_subnet(fleet, zone, 7), shorter


def _names(fleet: Fleet) -> Iterator[Problem]:
    clusters = ((("regions", i, "cluster", "name"), fleet.cluster_name(r)) for i, r in enumerate(fleet.regions))
    yield from _duplicates(clusters, "cluster")
    blamed: set[Path] = set()  # one problem per value to change: its first broken name says enough
    for path, kind, name, fix in _derived(fleet):
        rule, shortest, longest, whose = _KINDS[kind]
        if path in blamed:
            continue
        if len(name) > longest:
            what = f"is longer than {whose}'s {longest} characters ({len(name)})"
        elif len(name) < shortest:
            what = f"is shorter than {whose}'s {shortest} characters ({len(name)})"
        elif not rule(name):
            bucket = name_rules.bucket_problem(name, dots=False) if kind == "bucket name" else None
            what = f"breaks {whose}'s naming rules ({bucket or _DNS_CHARACTERS})"
        else:
            continue
        blamed.add(path)
        yield Problem(path=path, message=f"the derived {kind} {name!r} {what}; {fix}")
