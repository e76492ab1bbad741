"""Team namespaces: RBAC for the team's Google group, quotas, the team's own identity, NetworkPolicies."""

from __future__ import annotations

from fleet import names
from fleet.gitops.admission import team_namespace_labels
from fleet.gitops.netpol import team_network_policies
from fleet.gitops.objects import Obj, obj
from fleet.load import LoadedFleet
from fleet.model import Fleet, Region, Team
from fleet.objectquota import object_quota
from fleet.planner import peer_pod_ranges
from fleet.quotaplan import TeamQuota

RESEARCHER_ROLE = "meridian-researcher"
DEFAULT_PRIORITY_ANNOTATION = names.DEFAULT_PRIORITY_ANNOTATION


QUEUE_VIEWER_ROLE = "meridian-queue-viewer"
# named in the trainer's warning (trainer.launch.subblocks.NODE_READER)
TRAINER_NODE_READER = "meridian-trainer-node-reader"
RW = ["get", "list", "watch", "create", "patch", "delete"]
READ = ["get", "list", "watch"]
# Containers that declare no requests (gkr's preflight init container, sidecars injected by GKE) get
# these, so the quota below admits them and Kueue and the quota count the same thing.
DEFAULT_REQUESTS = {"cpu": "100m", "memory": "256Mi"}


def researcher_role() -> Obj:
    """What a team member may do in the team's namespace: what gkr does, plus kubectl reads for debugging.

    Derived from gkr's requests (tests/gkr/test_rbac.py): server-side apply (patch, and create when the
    object is new), list, get, delete of its kinds and the headless Service of a multi-pod Job; pod lists
    and logs. Reads (get/list/watch) of what a job leaves behind, and deleting a pod (its controller
    recreates it: a restart, no way around the queue), are kept for kubectl. Nothing touches LocalQueues,
    ResourceQuotas or RBAC: a team cannot choose another queue or raise its own ceiling.
    """
    rules = [
        {"apiGroups": ["ray.io"], "resources": ["rayjobs", "rayclusters"], "verbs": list(RW)},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": list(RW)},
        {"apiGroups": [""], "resources": ["services"], "verbs": list(RW)},
        # A run's Lighthouse (gkr/lighthouse.py); the admission policy keeps Deployments on CPU and in the queue.
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": list(RW)},
        # A run's TLS identity (gkr/run_tls.py), in the team's own namespace only (a RoleBinding per namespace).
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list", "create", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": [*READ, "delete"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": list(READ)},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues", "workloads"], "verbs": list(READ)},
    ]
    return obj("rbac.authorization.k8s.io/v1", "ClusterRole", RESEARCHER_ROLE, rules=rules)


def queue_viewer_role() -> Obj:
    """Cluster-wide read of ClusterQueues: `gkr clusters --live` shows every team's free quota."""
    rules = [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"], "verbs": list(READ)}]
    return obj("rbac.authorization.k8s.io/v1", "ClusterRole", QUEUE_VIEWER_ROLE, rules=rules)


def trainer_node_reader(fleet: Fleet) -> list[Obj]:
    """Get of a Node by name, for every team's trainer account: the Ray driver reads the sub-block label of
    the Nodes its workers run on, to keep each replica group inside one (platform/trainer/README.md,
    "Sub-blocks under Ray"; Kueue tells a pod only its hostname). Only `get`: no list or watch (the driver
    knows each name from the pod's NODE_NAME), no subresource (nodes/proxy reaches the kubelet), no write.
    RBAC cannot grant less than the whole Node, so a team can read one it names (labels, annotations,
    taints, addresses, status.images), never list them.
    """
    rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    accounts = [
        {"kind": "ServiceAccount", "name": names.TRAINER_KSA, "namespace": names.team_namespace(t.name)}
        for t in fleet.teams
    ]
    return [
        obj("rbac.authorization.k8s.io/v1", "ClusterRole", TRAINER_NODE_READER, rules=rules),
        obj(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            TRAINER_NODE_READER,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TRAINER_NODE_READER},
            subjects=accounts,
        ),
    ]


def team_subjects(fleet: Fleet) -> list[dict[str, str]]:
    """Every team's Google group, as RBAC subjects (GKE's Google Groups for RBAC), each once."""
    groups = dict.fromkeys(t.group for t in fleet.teams)
    return [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group} for group in groups]


def quota_hard(quotas: TeamQuota, objects: dict[str, int] | None = None) -> dict[str, str]:
    """The namespace's ceiling: exactly what Kueue may admit for the team here (nominal + borrowing limits),
    and the object counts fleet.objectquota sized for it (`objects`).

    Every pod in a team namespace goes through Kueue (manageJobsWithoutQueueName), so the requests only
    bite when Kueue is bypassed or broken. The counts bound what Kueue does not see: Services (the
    cluster's Service range), Secrets, ConfigMaps, PVCs, Events, and pods waiting behind Kueue's gate.
    """
    ceiling = quotas.admissible
    return {
        f"requests.{names.GPU_RESOURCE}": str(ceiling[names.GPU_RESOURCE]),
        "requests.cpu": str(ceiling["cpu"]),
        "requests.memory": f"{ceiling['memory']}Gi",
        **{key: str(count) for key, count in sorted((objects or {}).items())},
    }


def cluster_objects(fleet: Fleet) -> list[Obj]:
    """What every team shares in a cluster: the roles, the read of every ClusterQueue, the trainer's Node read."""
    return [
        researcher_role(),
        queue_viewer_role(),
        obj(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            QUEUE_VIEWER_ROLE,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": QUEUE_VIEWER_ROLE},
            subjects=team_subjects(fleet),
        ),
        *trainer_node_reader(fleet),
    ]


def namespace_objects(fleet: Fleet, team: Team, quotas: TeamQuota, objects: dict[str, int]) -> list[Obj]:
    """The team's namespace, its members' access and its ceiling in one region (`objects`: its counts)."""
    namespace = names.team_namespace(team.name)
    return [
        obj(
            "v1",
            "Namespace",
            namespace,
            labels=team_namespace_labels(fleet, team.name),  # the team and Pod Security levels
            annotations={DEFAULT_PRIORITY_ANNOTATION: team.priority},
        ),
        obj(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            "team-members",
            namespace,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RESEARCHER_ROLE},
            subjects=[{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": team.group}],
        ),
        obj("v1", "ResourceQuota", "team-limits", namespace, spec={"hard": quota_hard(quotas, objects)}),
        obj(
            "v1",
            "LimitRange",
            "team-defaults",
            namespace,
            spec={"limits": [{"type": "Container", "defaultRequest": DEFAULT_REQUESTS}]},
        ),
    ]


def identity_objects(fleet: Fleet, team: Team) -> list[Obj]:
    """The account the team's pods run as, and what it may do in the cluster."""
    namespace = names.team_namespace(team.name)
    return [
        # The team's pods run as this account; Workload Identity maps it to the team's own
        # Google service account, which reaches only the team's checkpoint folder.
        obj(
            "v1",
            "ServiceAccount",
            names.TRAINER_KSA,
            namespace,
            labels={names.TEAM_LABEL: team.name},
            annotations={names.GCP_SERVICE_ACCOUNT_ANNOTATION: names.team_service_account_email(fleet, team.name)},
        ),
        # The trainer reports NCCL failures as Events on its own pods; Warden counts them per node.
        obj(
            "rbac.authorization.k8s.io/v1",
            "Role",
            "trainer-events",
            namespace,
            rules=[{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}],
        ),
        obj(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            "trainer-events",
            namespace,
            roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "trainer-events"},
            subjects=[{"kind": "ServiceAccount", "name": names.TRAINER_KSA, "namespace": namespace}],
        ),
    ]


def team_objects(loaded: LoadedFleet, region: Region) -> list[Obj]:
    """Every team's namespace in the region, its quota from the quota plan, its peers from the address plan."""
    fleet = loaded.fleet
    peers = peer_pod_ranges(loaded.addresses, region.name)
    services = next(r.services.cidr for r in loaded.addresses.regions if r.region == region.name)
    objects = cluster_objects(fleet)
    for team in fleet.teams:
        quotas = loaded.quotas.team(region.name, team.name)
        objects += [
            *namespace_objects(fleet, team, quotas, object_quota(fleet, region, services, quotas)),
            *identity_objects(fleet, team),
            # No ingress from another team; only what a run and the platform's scrapers and operators need.
            *team_network_policies(names.team_namespace(team.name), peers),
        ]
    return objects
