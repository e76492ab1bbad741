"""The security class: a change that widens access is a finding; narrowing or no change says nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding as TreeFinding
from review.security import Finding, pod_specs, security_findings

Obj = dict[str, Any]


def _ds(**pod: Any) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "prepull", "namespace": "images"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}], **pod}}},
    }


def _container(security: Obj, **more: Any) -> Obj:
    """Container c of _ds() with this securityContext (and `more` of its fields)."""
    return {"name": "c", "image": "i", "securityContext": security, **more}


def _k8s(before: list[Obj], after: list[Obj]) -> list[str]:
    return [f.what for f in security_findings({"c": before}, {"c": after}, {}, {})]


def _both_ways(narrow: list[Obj], wide: list[Obj]) -> list[str]:
    """Findings from narrow to wide, after checking that the reverse and no change say nothing."""
    assert _k8s(wide, narrow) == []
    assert _k8s(wide, copy.deepcopy(wide)) == []
    return _k8s(narrow, wide)


# --- Pods -----------------------------------------------------------------------------------------


def test_pod_templates_are_found_wherever_a_kind_embeds_them() -> None:
    pod = {"containers": [{"name": "c"}]}
    ray = {
        "kind": "RayCluster",
        "spec": {
            "headGroupSpec": {"template": {"spec": pod}},
            "workerGroupSpecs": [{"groupName": "gpu", "template": {"spec": pod}}],
        },
    }
    jobset = {
        "kind": "JobSet",
        "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": pod}}}}]},
    }
    lws = {
        "kind": "LeaderWorkerSet",
        "spec": {"leaderWorkerTemplate": {"leaderTemplate": {"spec": pod}, "workerTemplate": {"spec": pod}}},
    }
    cron = {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": pod}}}}}
    assert [p for p, _ in pod_specs({"kind": "Pod", "spec": pod})] == [""]
    assert [p for p, _ in pod_specs(_ds())] == [""]
    assert [p for p, _ in pod_specs(ray)] == ["headGroupSpec", "workerGroupSpecs[gpu]"]
    assert [p for p, _ in pod_specs(jobset)] == ["replicatedJobs[w]"]
    assert [p for p, _ in pod_specs(lws)] == [
        "leaderWorkerTemplate.leaderTemplate",
        "leaderWorkerTemplate.workerTemplate",
    ]
    assert [p for p, _ in pod_specs(cron)] == ["jobTemplate"]
    assert list(pod_specs({"kind": "ConfigMap", "data": {"containers": "x"}})) == []


def test_a_privileged_pod_with_the_host_root_mounted_is_flagged() -> None:
    wide = _ds(
        hostNetwork=True,
        hostPID=True,
        hostIPC=True,
        volumes=[{"name": "root", "hostPath": {"path": "/"}}],
        containers=[
            _container(
                {"privileged": True, "allowPrivilegeEscalation": True, "capabilities": {"add": ["SYS_ADMIN"]}},
                volumeMounts=[{"name": "root", "mountPath": "/host"}],
                ports=[{"containerPort": 80, "hostPort": 80}],
            )
        ],
    )
    assert _both_ways([_ds()], [wide]) == [
        "DaemonSet.apps images/prepull uses the host's network (hostNetwork); sees the host's processes (hostPID); "
        "shares the host's IPC (hostIPC); container c becomes privileged; container c allows privilege escalation; "
        "container c adds capabilities SYS_ADMIN; container c opens host ports 80; mounts host path / read-write"
    ]


def test_root_init_and_ephemeral_containers() -> None:
    pod = {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}, "initContainers": [{"name": "init"}]}
    wide = _ds(
        securityContext=pod["securityContext"],
        initContainers=[{"name": "init", "securityContext": {"runAsUser": 0, "runAsNonRoot": False}}],
        ephemeralContainers=[{"name": "debug", "securityContext": {"capabilities": {"add": ["ALL"]}}}],
    )
    # A container that comes or goes is also listed as such (default deny, objects.py): new code runs with
    # the pod's account, or a sidecar that guarded something is gone. Its capabilities are pods.py's to say.
    assert _k8s([_ds(**pod)], [wide]) == [
        "DaemonSet.apps images/prepull init container init runs as root (runAsUser 0); "
        "init container init may run as root (runAsNonRoot false); ephemeral container debug adds capabilities ALL; "
        "ephemeralContainers[debug] added"
    ]
    assert _k8s([wide], [_ds(**pod)]) == ["DaemonSet.apps images/prepull ephemeralContainers[debug] removed"]


def test_another_service_account_is_flagged_either_way() -> None:
    """Which of two accounts has more rights is not in the pod: the change is named."""
    assert _k8s([_ds(serviceAccountName="prepull")], [_ds(serviceAccountName="argocd-application-controller")]) == [
        "DaemonSet.apps images/prepull runs as service account argocd-application-controller (was prepull), with its rights"
    ]
    assert _k8s([_ds()], [_ds(serviceAccountName="prepull")]) == [
        "DaemonSet.apps images/prepull runs as service account prepull (was default), with its rights"
    ]


def test_removing_a_guard_widens() -> None:
    guarded = _ds(
        automountServiceAccountToken=False,
        containers=[
            _container(
                {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
            )
        ],
    )
    assert _both_ways([guarded], [_ds()]) == [
        "DaemonSet.apps images/prepull mounts its service account token again; "
        "container c no longer forbids privilege escalation; container c gets a writable root filesystem; "
        "container c no longer drops capabilities ALL"
    ]


def test_host_paths_moved_or_made_writable() -> None:
    def mounted(path: str, read_only: bool) -> Obj:
        return _ds(
            volumes=[{"name": "v", "hostPath": {"path": path}}],
            containers=[{"name": "c", "volumeMounts": [{"name": "v", "mountPath": "/m", "readOnly": read_only}]}],
        )

    assert _both_ways([mounted("/var/log", True)], [mounted("/var/log", False)]) == [
        "DaemonSet.apps images/prepull mounts host path /var/log read-write (was read-only)"
    ]
    assert _k8s([mounted("/var/log", True)], [mounted("/etc", True)]) == [
        "DaemonSet.apps images/prepull mounts host path /etc read-only"
    ]


def test_a_new_workload_counts_in_full_and_a_plain_one_is_listed() -> None:
    ray = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "r", "namespace": "team-a"},
        "spec": {
            "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head"}]}}},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "template": {"spec": {"containers": [{"name": "w", "securityContext": {"privileged": True}}]}},
                }
            ],
        },
    }
    # A new object is listed whatever it holds (default deny, objects.py: a plain DaemonSet still runs new code
    # on every node), with where its unknown fields sit; what pods.py knows comes first.
    assert _k8s([], [ray]) == [
        "new RayCluster.ray.io team-a/r workerGroupSpecs[gpu] container w becomes privileged; "
        "added: headGroupSpec containers[head], spec.workerGroupSpecs[gpu]"
    ]
    assert _k8s([], [_ds()]) == ["new DaemonSet.apps images/prepull added: containers[c]"]


# --- RBAC -----------------------------------------------------------------------------------------


def _role(*rules: Obj, kind: str = "ClusterRole", labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "viewer", "labels": labels or {}},
        "rules": list(rules),
    }


def _rule(verbs: list[str], resources: list[str], groups: list[str] | None = None, **more: Any) -> Obj:
    return {"apiGroups": groups or [""], "resources": resources, "verbs": verbs, **more}


def test_role_rules_that_grant_more() -> None:
    narrow = _role(_rule(["get", "list"], ["pods"]))
    wide = _role(_rule(["get", "list", "create"], ["pods", "pods/exec"]), _rule(["*"], ["*"], ["*"]))
    assert _both_ways([narrow], [wide]) == [
        "ClusterRole.rbac.authorization.k8s.io viewer grants create on pods in core; "
        "grants create, get, list on pods/exec in core; grants * (every verb) on * (every resource) in * (every API group)"
    ]


def test_role_narrowed_to_names_says_nothing_and_a_url_is_a_grant() -> None:
    assert _k8s([_role(_rule(["get"], ["secrets"]))], [_role(_rule(["get"], ["secrets"], resourceNames=["one"]))]) == []
    assert _k8s([_role(_rule(["get"], ["secrets"], resourceNames=["one"]))], [_role(_rule(["get"], ["secrets"]))]) == [
        "ClusterRole.rbac.authorization.k8s.io viewer grants get on secrets in core"
    ]
    assert _k8s([_role()], [_role({"nonResourceURLs": ["/metrics"], "verbs": ["get"]})]) == [
        "ClusterRole.rbac.authorization.k8s.io viewer grants get on URLs /metrics"
    ]


def test_aggregation_labels_and_rules() -> None:
    aggregating = _role()
    aggregating["metadata"]["name"] = "collector"
    aggregating["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {"meridian.io/collect": "true"}}]}
    labelled = _role(labels={"rbac.authorization.k8s.io/aggregate-to-admin": "true", "meridian.io/collect": "true"})
    assert _both_ways([aggregating, _role()], [aggregating, labelled]) == [
        "ClusterRole.rbac.authorization.k8s.io viewer its rules join the built-in admin role "
        "(label rbac.authorization.k8s.io/aggregate-to-admin); "
        "its rules join ClusterRole collector (aggregation labels meridian.io/collect=true)"
    ]
    assert _k8s([], [aggregating]) == [
        "new ClusterRole.rbac.authorization.k8s.io collector aggregates the rules of every ClusterRole matching "
        '[{"matchLabels": {"meridian.io/collect": "true"}}]'
    ]


def _binding(role: str, *subjects: Obj) -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "b", "namespace": "team-a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": list(subjects),
    }


def test_bindings_to_more_subjects_or_another_role() -> None:
    team = {"kind": "Group", "name": "team-a@example.com"}
    everyone = {"kind": "Group", "name": "system:authenticated"}
    assert _both_ways([_binding("view", team)], [_binding("view", team, everyone)]) == [
        "RoleBinding.rbac.authorization.k8s.io team-a/b grants ClusterRole view to "
        "Group system:authenticated (every authenticated user)"
    ]
    assert _k8s([_binding("view", team)], [_binding("admin", team)]) == [
        "RoleBinding.rbac.authorization.k8s.io team-a/b now refers to ClusterRole admin (was ClusterRole view); "
        "grants ClusterRole admin to Group team-a@example.com"
    ]


# --- Admission ------------------------------------------------------------------------------------


def _policy(**spec: Any) -> Obj:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "pod-security"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"namespaceSelector": {"matchLabels": {"team": "a"}}},
            "validations": [
                {"expression": "true", "message": "no host paths"},
                {"expression": "true", "message": "no root"},
            ],
            **spec,
        },
    }


def test_any_admission_change_is_named() -> None:
    changed = _policy(
        failurePolicy="Ignore",
        matchConstraints={"namespaceSelector": {"matchLabels": {"team": "b"}}},
        validations=[{"expression": "true", "message": "no root"}],
    )
    assert _k8s([_policy()], [changed]) == [
        "ValidatingAdmissionPolicy.admissionregistration.k8s.io pod-security failurePolicy Fail -> Ignore; "
        "matchConstraints.namespaceSelector.matchLabels.team a -> b; validations removed: no host paths"
    ]
    assert _k8s([_policy()], []) == [
        "ValidatingAdmissionPolicy.admissionregistration.k8s.io pod-security removed: what it checked is no longer checked"
    ]
    assert _k8s([], [_policy()]) == [
        "new ValidatingAdmissionPolicy.admissionregistration.k8s.io pod-security added: it changes what the cluster admits"
    ]
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "b"},
    }
    deny, audit = (copy.deepcopy(binding) | {"spec": {"validationActions": [a]}} for a in ("Deny", "Audit"))
    assert _k8s([deny], [audit]) == [
        "ValidatingAdmissionPolicyBinding.admissionregistration.k8s.io b validationActions Deny -> Audit"
    ]


def test_webhooks_are_compared_by_name() -> None:
    def config(*webhooks: Obj) -> Obj:
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "m"},
            "webhooks": list(webhooks),
        }

    pods = {"name": "pods.example.com", "failurePolicy": "Fail", "objectSelector": {}}
    assert _k8s(
        [config(pods, {"name": "jobs.example.com"})], [config(pods | {"objectSelector": {"matchLabels": {"x": "y"}}})]
    ) == [
        "MutatingWebhookConfiguration.admissionregistration.k8s.io m webhooks[pods.example.com].objectSelector.matchLabels.x "
        "(none) -> y; webhooks jobs.example.com removed"
    ]


# --- NetworkPolicy and Pod Security ---------------------------------------------------------------


def _netpol(name: str = "np", **spec: Any) -> Obj:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], **spec},
    }


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "team-a"},
    "spec": {"containers": [{"name": "c"}]},
}


def test_network_policies_that_admit_more() -> None:
    same_team = {"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": 443}]}
    narrow = _netpol(
        ingress=[same_team], egress=[{"to": [{"ipBlock": {"cidr": "10.0.0.0/16"}}]}], policyTypes=["Ingress", "Egress"]
    )
    wide = _netpol(
        ingress=[same_team, {"from": [{"namespaceSelector": {}}]}],
        egress=[{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]}],
        policyTypes=["Ingress", "Egress"],
    )
    assert _both_ways([POD, narrow], [POD, wide]) == [
        "NetworkPolicy.networking.k8s.io team-a/np now admits ingress from in namespaces every namespace (empty selector) "
        "on any port; now admits egress to 10.0.0.0/8 except 10.1.0.0/16 on any port"
    ]
    assert _k8s([POD, wide], [POD, _netpol(ingress=wide["spec"]["ingress"])]) == [
        "NetworkPolicy.networking.k8s.io team-a/np no longer restricts egress"
    ]


def test_removing_policies_or_adding_an_allow_all_next_to_them() -> None:
    deny = _netpol("deny-ingress")
    assert _k8s([POD, deny], [POD]) == [
        "NetworkPolicy.networking.k8s.io team-a/deny-ingress removed",
        "namespace team-a has no NetworkPolicy left: all its traffic is admitted",
    ]
    allow_all = _netpol("allow-all", ingress=[{}])
    assert _k8s([POD, deny], [POD, deny, allow_all]) == [
        "new NetworkPolicy.networking.k8s.io team-a/allow-all now admits ingress from anywhere on any port"
    ]
    assert _k8s([POD], [POD, allow_all]) == []  # nothing was refused before


def test_pod_security_levels_lowered() -> None:
    def namespace(level: str) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "images", "labels": {"pod-security.kubernetes.io/enforce": level}},
        }

    assert _both_ways([namespace("restricted")], [namespace("baseline")]) == [
        "Namespace images enforces Pod Security baseline (was restricted)"
    ]


# --- Terraform ------------------------------------------------------------------------------------


def _stack(resources: dict[str, dict[str, Obj]], data: dict[str, Any] | None = None) -> dict[str, Any]:
    subnet = {
        "ip_cidr_range": "10.8.0.0/20",
        "secondary_ip_range": [{"range_name": "pods", "ip_cidr_range": "10.0.0.0/13"}],
    }
    return {
        "resource": {"google_compute_subnetwork": {"subnet": subnet}, **resources},
        **({"data": data} if data else {}),
    }


def _tf(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    return [f.what for f in security_findings({}, {}, {"a": before}, {"a": after})]


def _fw(
    name: str, protocol: str, sources: list[str], ports: list[str] | None = None, action: str = "allow", **more: Any
) -> Obj:
    return {
        "name": name,
        "direction": "INGRESS",
        action: [{"protocol": protocol, **({"ports": ports} if ports else {})}],
        "source_ranges": sources,
        **more,
    }


def test_firewall_rules_created_or_widened() -> None:
    ssh = _fw("ssh", "tcp", ["10.0.0.0/13"], ["22"])
    assert _tf(_stack({}), _stack({"google_compute_firewall": {"ssh": ssh}})) == [
        "new firewall rule ssh allows tcp:22 from 10.0.0.0/13 (a pods)"
    ]
    wider = _fw("ssh", "tcp", ["10.0.0.0/8"], ["22-23"])
    assert _tf(
        _stack({"google_compute_firewall": {"ssh": ssh}}), _stack({"google_compute_firewall": {"ssh": wider}})
    ) == ["firewall rule ssh now allows tcp:22-23 from 10.0.0.0/8 (was: allows tcp:22 from 10.0.0.0/13 (a pods))"]
    assert (
        _tf(_stack({"google_compute_firewall": {"ssh": wider}}), _stack({"google_compute_firewall": {"ssh": ssh}}))
        == []
    )
    off = _fw("ssh", "tcp", ["10.0.0.0/13"], ["22"], disabled=True)
    assert _tf(
        _stack({"google_compute_firewall": {"ssh": off}}), _stack({"google_compute_firewall": {"ssh": ssh}})
    ) == ["new firewall rule ssh allows tcp:22 from 10.0.0.0/13 (a pods)"]


def test_firewall_deny_rules_removed_or_narrowed() -> None:
    deny = _fw("no-ssh", "tcp", ["0.0.0.0/0"], action="deny")
    narrower = _fw("no-ssh", "tcp", ["0.0.0.0/0"], ["22"], action="deny")
    assert _tf(_stack({"google_compute_firewall": {"d": deny}}), _stack({})) == [
        "firewall rule no-ssh removed; it denys tcp (any port) from 0.0.0.0/0 (anywhere)"
    ]
    assert _tf(
        _stack({"google_compute_firewall": {"d": deny}}), _stack({"google_compute_firewall": {"d": narrower}})
    ) == [
        "firewall rule no-ssh now denys tcp:22 from 0.0.0.0/0 (anywhere) (was: denys tcp (any port) from 0.0.0.0/0 (anywhere))"
    ]
    assert (
        _tf(_stack({"google_compute_firewall": {"d": narrower}}), _stack({"google_compute_firewall": {"d": deny}}))
        == []
    )


def test_iam_grants_and_custom_roles() -> None:
    member = {"project": "p", "role": "roles/viewer", "member": "group:a@example.com"}
    conditional = member | {"condition": {"title": "zone-a", "expression": "resource.name.startsWith('z')"}}
    role = {"role_id": "warden", "permissions": ["compute.instances.get"]}
    before = _stack({"google_project_iam_member": {"m": conditional}, "google_project_iam_custom_role": {"r": role}})
    after = _stack(
        {
            "google_project_iam_member": {"m": member},
            "google_project_iam_custom_role": {
                "r": role | {"permissions": ["compute.instances.get", "compute.instances.delete"]}
            },
            "google_storage_bucket_iam_binding": {
                "b": {"bucket": "ckpt", "role": "roles/storage.admin", "members": ["allUsers"]}
            },
        }
    )
    assert _tf(after, before) == []
    assert _tf(before, after) == [
        "grants roles/viewer to group:a@example.com on project p",
        "grants roles/storage.admin to allUsers on storage bucket ckpt",
        "custom role warden grants compute.instances.delete",
    ]


def test_iam_policies_are_read_from_their_policy_document() -> None:
    def policy(*members: str) -> dict[str, Any]:
        return _stack(
            {
                "google_storage_bucket_iam_policy": {
                    "p": {"bucket": "ckpt", "policy_data": "${data.google_iam_policy.ckpt.policy_data}"}
                }
            },
            {
                "google_iam_policy": {
                    "ckpt": {"binding": [{"role": "roles/storage.objectUser", "members": list(members)}]}
                }
            },
        )

    assert _tf(policy("group:a@example.com", "group:b@example.com"), policy("group:a@example.com")) == []
    assert _tf(policy("group:a@example.com"), policy("group:a@example.com", "allAuthenticatedUsers")) == [
        "grants roles/storage.objectUser to allAuthenticatedUsers on storage bucket ckpt"
    ]


# --- The shipped tree and stacks ------------------------------------------------------------------

Trees = dict[str, tuple[ClusterTree, list[TreeFinding]]]


def _clusters(trees: Trees) -> dict[str, list[Obj]]:
    return {region: [copy.deepcopy(o) for _, o in tree.objects()] for region, (tree, _) in trees.items()}


def test_the_shipped_tree_compared_with_itself_says_nothing(trees: Trees, stacks: dict[str, Any]) -> None:
    assert security_findings(_clusters(trees), _clusters(trees), stacks, copy.deepcopy(stacks)) == []


def test_issue_26_a_privileged_prepull_with_the_host_root_is_flagged_in_every_cluster(trees: Trees) -> None:
    before, after = _clusters(trees), _clusters(trees)
    for objects in after.values():
        (prepull,) = [
            o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "trainer-image-prepull"
        ]
        pod = prepull["spec"]["template"]["spec"]
        pod["volumes"] = [{"name": "host", "hostPath": {"path": "/"}}]
        for container in pod["containers"]:
            container["securityContext"]["privileged"] = True
            container["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
    findings = security_findings(before, after, {}, {})
    assert findings == [
        Finding(
            cluster,
            "DaemonSet.apps meridian-images/trainer-image-prepull container trainer becomes privileged; mounts host path / read-write",
        )
        for cluster in after
    ]
    assert len(findings) == len(trees) > 1


def test_ssh_from_a_pod_range_is_a_finding(stacks: dict[str, Any]) -> None:
    after = copy.deepcopy(stacks)
    region, pods = "us-central1", "10.16.0.0/13"  # us-east4's pods
    after[region]["resource"]["google_compute_firewall"]["ssh"] = _fw("ssh-from-pods", "tcp", [pods], ["22"])
    assert security_findings({}, {}, stacks, after) == [
        Finding(region, "new firewall rule ssh-from-pods allows tcp:22 from 10.16.0.0/13 (us-east4 pods)")
    ]


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet", "Job"])
def test_every_workload_kind_with_a_template(kind: str) -> None:
    workload = _ds(hostPID=True) | {"kind": kind}
    assert _k8s([_ds() | {"kind": kind}], [workload]) == [
        f"{kind}.apps images/prepull sees the host's processes (hostPID)"
    ]
