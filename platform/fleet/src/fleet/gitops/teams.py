"""Team namespaces: RBAC for the team's Google group, quotas, the team's own identity."""

from __future__ import annotations

from fleet import names
from fleet.capacity import gpu_capacity
from fleet.gitops.admission import team_namespace_labels
from fleet.gitops.objects import Obj, obj
from fleet.model import Fleet, Region

RESEARCHER_ROLE = "meridian-researcher"
DEFAULT_PRIORITY_ANNOTATION = "meridian.dev/default-priority"


def researcher_role() -> Obj:
    """What a team member may do in the team's namespace: run and inspect jobs, nothing cluster-wide."""
    rules = [
        {
            "apiGroups": ["ray.io"],
            "resources": ["rayjobs", "rayclusters"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["batch"],
            "resources": ["jobs"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {"apiGroups": [""], "resources": ["pods", "pods/log", "services", "events"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues", "workloads"], "verbs": ["get", "list", "watch"]},
    ]
    return obj("rbac.authorization.k8s.io/v1", "ClusterRole", RESEARCHER_ROLE, rules=rules)


def team_objects(fleet: Fleet, region: Region) -> list[Obj]:
    objects = [researcher_role()]
    region_gpus = gpu_capacity(region).gpus
    for team in fleet.teams:
        namespace = names.team_namespace(team.name)
        objects += [
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
            # Kueue enforces nominal quota and borrowing; this caps what a namespace can ever hold
            # and keeps team services off public load balancers.
            obj(
                "v1",
                "ResourceQuota",
                "team-limits",
                namespace,
                spec={
                    "hard": {
                        f"requests.{names.GPU_RESOURCE}": str(region_gpus),
                        "services.loadbalancers": "0",
                        "services.nodeports": "0",
                    }
                },
            ),
            # The team's pods run as this account; Workload Identity maps it to the team's own
            # Google service account, which reaches only the team's checkpoint folder.
            obj(
                "v1",
                "ServiceAccount",
                names.TRAINER_KSA,
                namespace,
                labels={names.TEAM_LABEL: team.name},
                annotations={"iam.gke.io/gcp-service-account": names.team_service_account_email(fleet, team.name)},
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
    return objects
