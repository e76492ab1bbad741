"""The fleet spec as typed data (pydantic v2).

Field-level rules (shapes, names, formats) live here; rules that relate one
part of the spec to another live in `rules.py`, and address ranges in
`planner.py`, so that each reports every problem it finds with its path.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum
from ipaddress import IPv4Network
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field, Strict

from contract import names as name_rules
from contract.signals import Action, SignalKind
from contract.warden import DEFAULTS as _WARDEN
from contract.warden import ActOn
from fleet.catalog import MACHINE_TYPES, MachineType

_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[a-z]{2,}")
_SEMVER = re.compile(r"\d+\.\d+\.\d+")
# repository:version, optionally @sha256:<digest>. Images the project builds get their digest
# from the image workflow; third-party images whose digest cannot be checked offline stay
# pinned by version until that workflow fills it in (never a floating tag such as latest).
_IMAGE = re.compile(
    r"[a-z0-9][-a-z0-9.]*(:\d+)?(/[a-z0-9][-_.a-z0-9]*)+:v?\d+(\.\d+){1,2}([-.+][-_.a-zA-Z0-9]+)?(@sha256:[0-9a-f]{64})?"
)
_HHMM = re.compile(r"([01]\d|2[0-3]):[0-5]\d")


def _matching(pattern: re.Pattern[str], fix: str) -> AfterValidator:
    return _accepted(lambda value: pattern.fullmatch(value) is not None, fix)


def _accepted(rule: Callable[[str], bool], fix: str) -> AfterValidator:
    def check(value: str) -> str:
        if not rule(value):
            raise ValueError(f"{value!r} {fix}")
        return value

    return AfterValidator(check)


def _dns1035(max_len: int) -> AfterValidator:
    def check(value: str) -> str:
        if not name_rules.is_dns1035_label(value, max_len):
            raise ValueError(
                f"{value!r} is not a valid name: use at most {max_len} lowercase letters, digits "
                "and '-', starting with a letter and not ending with '-' (DNS-1035)"
            )
        return value

    return AfterValidator(check)


# Ranges no subnet, Pod or Service range may touch. Google Cloud refuses the first five for any
# subnet range (VPC docs, "Prohibited IPv4 subnet ranges"); GKE nodes keep 172.17.0.0/16 for the
# container runtime's bridge (GKE docs, VPC-native clusters, range restrictions), so a Pod or node
# there is unreachable from its own node.
SPECIAL_RANGES = {
    IPv4Network("0.0.0.0/8"): "'this network' (RFC 1122)",
    IPv4Network("127.0.0.0/8"): "loopback",
    IPv4Network("169.254.0.0/16"): "link-local, where the metadata server lives",
    IPv4Network("224.0.0.0/4"): "multicast",
    IPv4Network("255.255.255.255/32"): "the broadcast address",
    IPv4Network("172.17.0.0/16"): "the Docker bridge range GKE reserves on every node",
}


def _cidr(value: object) -> IPv4Network:
    if isinstance(value, IPv4Network):
        return value
    if not isinstance(value, str):  # an int would parse as one address; a range is written as text
        raise ValueError(f"{value!r} is not an IPv4 range; write it in CIDR form as text, e.g. 10.0.0.0/20")
    try:
        loose = IPv4Network(value, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 range; write it in CIDR form, e.g. 10.0.0.0/20") from None
    if str(loose) != value:
        raise ValueError(f"{value!r} has host bits set; write {loose}")
    for special, what in SPECIAL_RANGES.items():
        if loose.overlaps(special):
            raise ValueError(
                f"{loose} overlaps {special}, {what}; no subnet, Pod or Service range may, "
                "so pick one in 10.0.0.0/8, 172.16.0.0/12 (not 172.17.0.0/16) or 192.168.0.0/16"
            )
    return loose


def _bucket(value: str) -> str:
    # Cloud Storage's naming rules (contract.names), no dots: the fleet creates its buckets, without a verified domain.
    problem = name_rules.bucket_problem(value, dots=False)
    if problem is not None:
        raise ValueError(f"{value!r} is not a valid bucket name: {problem}")
    return value


# Git's ref rules (git check-ref-format), plus no leading '-': the revision reaches `git` on
# every Argo CD repo server, where it would read as an option.
_REVISION_BAD = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|^[-/.]|[/.]$|\.lock$|^@$")


def _revision(value: str) -> str:
    if not value or len(value) > 255 or not value.isprintable() or _REVISION_BAD.search(value):
        raise ValueError(
            f"{value!r} is not a git revision: write a branch, tag or commit (no spaces, control characters, "
            "'..', '~^:?*[\\', and not starting with '-', '/' or '.')"
        )
    return value


Name = Annotated[str, _dns1035(name_rules.DNS_LABEL_MAX)]
PoolName = Annotated[str, _dns1035(name_rules.GKE_NAME_MAX)]
Range = Annotated[IPv4Network, BeforeValidator(_cidr)]
BucketName = Annotated[str, AfterValidator(_bucket)]
Version = Annotated[str, _matching(_SEMVER, "is not a pinned version; write MAJOR.MINOR.PATCH, e.g. 1.7.0")]
Image = Annotated[
    str,
    _matching(
        _IMAGE,
        "is not a pinned image; write REGISTRY/PATH:VERSION (e.g. :1.2.0), optionally @sha256:<64 hex digits>",
    ),
]
Email = Annotated[str, _matching(_EMAIL, "is not an email address; use the team's Google group")]
# Numbers and switches are strict: YAML already types `384` and `true`, so a quoted "384" or
# "yes" is a mistake to point at, not something to convert.
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]  # accepts an int: 1 is a number
Bool = Annotated[bool, Strict()]
Count = Annotated[int, Strict(), Field(ge=0)]


class Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Channel(StrEnum):
    RAPID = "RAPID"
    REGULAR = "REGULAR"
    STABLE = "STABLE"
    EXTENDED = "EXTENDED"


class Project(Base):
    id: Annotated[
        str,
        _accepted(
            name_rules.is_project_id,
            "is not a project id: 6-30 lowercase letters, digits or '-', starting with a letter",
        ),
    ]
    organization_id: Annotated[str, _matching(re.compile(r"\d{6,20}"), "is not an organization id (digits only)")]
    state_bucket: BucketName  # Terraform remote state, one prefix per stack
    # The Google group whose member groups Kubernetes RBAC may name (Google Groups for RBAC).
    gke_security_group: Annotated[
        str,
        _matching(
            re.compile(r"gke-security-groups@[^@\s]+\.[a-z]{2,}"),
            "must be gke-security-groups@<your domain>, as GKE requires",
        ),
    ]
    # The Google group of the people on call for the fleet: they alone (with cluster admins) may hold,
    # release and report nodes (`warden hold ...`: ClusterRole meridian-node-operator). None: nobody is bound.
    operators_group: Email | None = None


class Versions(Base):
    gke_channel: Channel
    # Kubernetes minor the clusters run: what generated manifests are validated against.
    kubernetes: Annotated[
        str, _matching(re.compile(r"1\.\d+"), "is not a Kubernetes minor version; write it like 1.35")
    ]
    kuberay: Version
    kueue: Version
    argocd: Version
    warden_image: Image
    trainer_image: Image
    nccl_installer_image: Image  # Google's gIB NCCL plugin installer for A3 Ultra


class GitOps(Base):
    """Where each cluster's Argo CD pulls this repository from."""

    repo: Annotated[str, _matching(re.compile(r"(https://|git@)\S+"), "is not a git URL; use https://... or git@...")]
    revision: Annotated[str, AfterValidator(_revision)] = "main"


class WardenPolicy(Base):
    """Safety limits for Warden (issue 8), shipped to every cluster as its config (contract.warden).

    The defaults are contract.warden's (in minutes and days here, seconds there).
    """

    dry_run: Bool = _WARDEN.dry_run
    # unambiguous: act on faults whose remedy is not in doubt (NVIDIA's reset/restart Xids, GCE host
    # maintenance) and only log the rest; all: act on every decision (contract.warden.ACT_ON).
    act_on: ActOn = _WARDEN.act_on
    # Circuit breaker, per pool and per cluster.
    unhealthy_share_limit: Float = Field(default=_WARDEN.unhealthy_share_limit, gt=0, le=0.5)
    window_minutes: Int = Field(default=round(_WARDEN.window_s / 60), ge=1, le=1440)
    max_remediations_per_pool: Int = Field(default=_WARDEN.max_per_pool, ge=1)
    max_remediations_per_cluster: Int = Field(default=_WARDEN.max_per_cluster, ge=1)
    # Remediations within repeat_offender_days -> hold for review.
    repeat_offender_count: Int = Field(default=_WARDEN.repeat_count, ge=2)
    repeat_offender_days: Int = Field(default=round(_WARDEN.repeat_window_s / 86400), ge=1)
    # Time for training to checkpoint.
    drain_grace_seconds: Int = Field(default=round(_WARDEN.drain_grace_s), ge=30, le=3600)
    xid_actions: dict[Int, Action] = {}  # overrides of contract.signals' Xid table
    signal_actions: dict[SignalKind, Action] = {}  # overrides of contract.signals.SIGNAL_ACTIONS
    nccl_failures: Int = Field(
        default=_WARDEN.nccl_failures, ge=1
    )  # NCCL failure Events from one node within the window
    # Drain before GKE's host maintenance.
    maintenance_lead_minutes: Int = Field(default=round(_WARDEN.maintenance_lead_s / 60), ge=5, le=1440)
    # Deep checks (issue 21): burn-in of joining and repaired nodes, sweeps of idle ones; ranges as contract.warden's.
    burn_in: Bool = _WARDEN.burn_in
    burn_in_max_per_pool: Int = Field(default=_WARDEN.burn_in_max_per_pool, ge=1)
    burn_in_max_age_hours: Int = Field(default=round(_WARDEN.burn_in_max_age_s / 3600), ge=1, le=720)
    sweeps: Bool = _WARDEN.sweeps
    sweep_every_days: Int = Field(default=round(_WARDEN.sweep_every_s / 86400), ge=1, le=365)
    sweep_idle_minutes: Int = Field(default=round(_WARDEN.sweep_idle_s / 60), ge=1, le=10080)
    sweep_max_per_pool: Int = Field(default=_WARDEN.sweep_max_per_pool, ge=0)
    deep_check_timeout_minutes: Int = Field(default=round(_WARDEN.deep_check_timeout_s / 60), ge=5, le=1440)


class Registry(Base):
    location: Annotated[str, _accepted(name_rules.is_dns1035_label, "is not an Artifact Registry location")]
    repository: Name

    def url(self, project: str) -> str:
        return f"{self.location}-docker.pkg.dev/{project}/{self.repository}"


class Weekday(StrEnum):
    MO = "MO"
    TU = "TU"
    WE = "WE"
    TH = "TH"
    FR = "FR"
    SA = "SA"
    SU = "SU"


class MaintenanceWindow(Base):
    """A weekly recurring window, in UTC."""

    days: tuple[Weekday, ...] = Field(min_length=1)
    start_utc: Annotated[str, _matching(_HHMM, "is not a time of day; write HH:MM in UTC, e.g. 04:00")]
    hours: Int = Field(ge=4, le=24)


class Exclusion(Base):
    """A maintenance exclusion; times in RFC 3339 with a zone.

    Without `end` the exclusion lasts until the end of support of the cluster's
    minor version (GKE's UNTIL_END_OF_SUPPORT), as cluster-toolkit's A3 Ultra
    blueprint holds node upgrades off training capacity; renew it (a new start)
    after each planned minor upgrade.
    """

    name: Name
    start: AwareDatetime
    end: AwareDatetime | None = None
    scope: Literal["NO_UPGRADES", "NO_MINOR_UPGRADES", "NO_MINOR_OR_NODE_UPGRADES"] = "NO_MINOR_OR_NODE_UPGRADES"


class Cluster(Base):
    name: Annotated[str, _dns1035(name_rules.GKE_NAME_MAX)] | None = None  # default: <fleet>-<region>
    release_channel: Channel | None = None  # default: versions.gke_channel
    maintenance_window: MaintenanceWindow
    maintenance_exclusions: tuple[Exclusion, ...] = ()


class CapacityMode(StrEnum):
    RESERVATION = "reservation"  # SPECIFIC_RESERVATION affinity, optionally on reservation blocks
    FLEX_START = "flex_start"  # queued provisioning (Dynamic Workload Scheduler)
    SPOT = "spot"
    ON_DEMAND = "on_demand"


class Capacity(Base):
    mode: CapacityMode
    reservation: str | None = None  # name, or projects/<p>/reservations/<name> for a shared one
    # One reservation block (a dense, co-located part of the reservation); GKE targets one per pool.
    block: Annotated[str, _dns1035(name_rules.DNS_LABEL_MAX)] | None = None


class OnMachine(Base):
    """A pool of nodes of one machine type from the catalog (validated against it in rules.py)."""

    machine_type: str

    @property
    def machine(self) -> MachineType:
        return MACHINE_TYPES[self.machine_type]


class GpuPool(OnMachine):
    name: PoolName
    zone: str
    nodes: Int = Field(ge=1, le=4096)  # fixed size; for flex_start the most it scales to
    capacity: Capacity
    team: Name | None = None  # dedicated to one team; None: shared by every team
    max_pods_per_node: Int = Field(default=32, ge=8, le=256)


class SystemPool(OnMachine):
    nodes_per_zone: Int = Field(ge=1, le=100)
    max_pods_per_node: Int = Field(default=110, ge=8, le=256)


class CpuPool(OnMachine):
    """Autoscaled CPU workers for Ray heads and CPU-only jobs (never the H200 nodes)."""

    name: PoolName
    max_nodes: Int = Field(ge=1, le=1000)  # across the region's zones; scales down to min_nodes
    min_nodes: Int = Field(default=0, ge=0, le=1000)
    max_pods_per_node: Int = Field(default=110, ge=8, le=256)


class RegionNetwork(Base):
    """Explicit ranges; each one left out is planned."""

    nodes: Range | None = None
    pods: Range | None = None
    services: Range | None = None
    gvnic: Range | None = None
    control_plane: Range | None = None
    rdma: dict[str, tuple[Range, ...]] = {}  # GPU zone -> its 8 RDMA subnets


class Region(Base):
    name: str
    zones: tuple[str, ...] = Field(min_length=1)
    cluster: Cluster
    system_pool: SystemPool
    gpu_pools: tuple[GpuPool, ...] = ()
    cpu_pools: tuple[CpuPool, ...] = ()
    network: RegionNetwork = RegionNetwork()


class NetworkPlan(Base):
    """How planned ranges are cut. Changing any of these moves planned ranges."""

    supernet: Range = IPv4Network("10.0.0.0/8")
    region_prefix: Int = Field(default=12, ge=8, le=24)
    pod_prefix: Int = Field(default=13, ge=8, le=24)
    node_prefix: Int = Field(default=20, ge=16, le=28)
    service_prefix: Int = Field(default=20, ge=16, le=27)
    gvnic_prefix: Int = Field(default=20, ge=16, le=28)
    rdma_subnet_prefix: Int = Field(default=22, ge=16, le=28)
    rdma_zone_slots: Int = Field(default=4, ge=1, le=8)  # zones per region that can hold RDMA subnets


class DatasetBucket(Base):
    name: BucketName
    location: str  # GCS location: a region or a multi-region such as US


class Buckets(Base):
    checkpoint_prefix: BucketName  # one regional bucket per region: <prefix>-<region>
    staged_retention_days: Int = Field(default=7, ge=1, le=365)
    datasets: tuple[DatasetBucket, ...] = ()

    def checkpoint_bucket(self, region: str) -> str:
        return f"{self.checkpoint_prefix}-{region}"


class Priority(Base):
    name: Name
    value: Int = Field(ge=-(2**31), le=10**9)


class ObjectCounts(Base):
    """A team's object-count quotas in each of its namespaces, overriding fleet.objectquota's sizes (None: derived)."""

    pods: Count | None = None
    services: Count | None = None  # checked against the cluster's Service range (fleet.objectquota.problems)
    secrets: Count | None = None
    configmaps: Count | None = None
    persistentvolumeclaims: Count | None = None
    events: Count | None = None  # count/events and count/events.events.k8s.io alike


class Team(Base):
    name: Name
    group: Email
    priority: str  # the default for the team's jobs
    # The highest priority the team's jobs may ask for (admission policy and gkr); default: `priority`.
    max_priority: str | None = None

    @property
    def ceiling(self) -> str:
        return self.max_priority or self.priority

    quota: dict[str, Count] = {}  # region -> nominal GPUs
    objects: ObjectCounts = ObjectCounts()  # object-count quotas of its namespaces; derived unless given


class Fleet(Base):
    name: Annotated[str, _dns1035(20)]
    project: Project
    versions: Versions
    registry: Registry
    network: NetworkPlan = NetworkPlan()
    gitops: GitOps
    warden: WardenPolicy = WardenPolicy()
    buckets: Buckets
    priorities: tuple[Priority, ...] = Field(min_length=1)
    regions: tuple[Region, ...] = Field(min_length=1)
    teams: tuple[Team, ...] = Field(min_length=1)

    def cluster_name(self, region: Region) -> str:
        return region.cluster.name or f"{self.name}-{region.name}"

    def release_channel(self, region: Region) -> Channel:
        return region.cluster.release_channel or self.versions.gke_channel
