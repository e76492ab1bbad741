"""Where each rule and each relied-on upstream behaviour was read: file and line at the pinned release (pure data).

Every rule a Finding names (fleet.controllers) has its sources here, and so does each upstream behaviour the
rest of the fleet relies on without a rule over objects (the TAS-only queues of fleet.gitops.kueue, the
node-loss path of fleet.goodput.nodeloss, the pause of Argo CD's automated sync the runbooks use). Each
`Source` names the release it was read at (`version`); tests/controllers/test_sources.py holds every one to
`versions.READ_AT`, so a bump of READ_AT fails until each line is read again at the new tag
(`git -C <mirror> show <tag>:<path> | grep -n <what>`) and its line and version are written here.

`commit`: where the snapshot read did not hold the tag, the commit the file was read at instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True)
class Source:
    release: str  # versions.READ_AT's key: kueue, kuberay, argocd or ray
    version: str  # the release whose tag the line was read at
    path: str  # in the upstream repository
    line: int  # the function's first line, or the decisive statement's
    what: str  # the function, constant or statement on that line
    test: str = ""  # the upstream test that pins it, `path:line "name"`, where there is one
    commit: str = ""  # the commit read instead of the tag, when the snapshot did not hold the tag

    def __str__(self) -> str:
        at = f"commit {self.commit}, the tag not being stored" if self.commit else f"v{self.version}"
        test = f"; test {self.test}" if self.test else ""
        return f"{self.path}:{self.line} {self.what} ({self.release} {at}{test})"


def _kueue(path: str, line: int, what: str, test: str = "") -> Source:
    return Source("kueue", "0.19.2", path, line, what, test)


def _kuberay(path: str, line: int, what: str, test: str = "") -> Source:
    return Source("kuberay", "1.7.0", f"ray-operator/controllers/ray/{path}", line, what, test)


def _in(make: Callable[[str, int, str], Source], path: str, *lines: tuple[int, str]) -> tuple[Source, ...]:
    """Several lines of one file."""
    return tuple(make(path, line, what) for line, what in lines)


def _argocd(path: str, line: int, what: str) -> Source:
    return Source("argocd", "3.5.1", path, line, what)


_SCHED = "pkg/cache/scheduler/"
_ASSIGNER = "pkg/scheduler/flavorassigner/"
_TAS_TEST = "test/integration/singlecluster/tas/tas_test.go"

# Finding.rule -> its sources, the decisive one first.
RULES: Mapping[str, tuple[Source, ...]] = MappingProxyType(
    {
        "never-managed": (
            _kueue(
                "pkg/controller/jobframework/reconciler.go",
                337,
                '"Namespace not opted in" (ReconcileGenericJob)',
                'test/e2e/sequential/baseline/reconcile_test.go "should not reconcile a job in the default'
                ' (unmanaged) namespace"',
            ),
            _kueue("pkg/features/kube_features.go", 734, "ManagedJobsNamespaceSelectorAlwaysRespected: GA, locked"),
        ),
        "no-queue": (
            _kueue("pkg/workload/resources.go", 245, "return ErrNamespaceMismatch"),
            _kueue("pkg/workload/resources.go", 42, "ErrNamespaceMismatch"),
        ),
        "refused": (
            _kueue("pkg/controller/jobs/rayjob/rayjob_webhook.go", 107, "validateCreate"),
            _kueue("pkg/controller/jobs/raycluster/common.go", 298, "ValidateCreate"),
            _kueue("pkg/controller/jobframework/constants.go", 21, "MaxPodSets = 18"),
            *_in(
                _kueue,
                "pkg/controller/jobframework/tas_validation.go",
                (34, "ValidateTASPodSetRequest"),
                (170, "ValidateSliceSizeAnnotationUpperBound"),
                (214, "ValidatePodSetGroupingTopology"),
            ),
        ),
        "never-admitted": (
            _kueue(
                _ASSIGNER + "tas_flavorassigner.go",
                166,
                "checkPodSetAndFlavorMatchForTAS",
                'pkg/scheduler/scheduler_tas_test.go "workload which does not need TAS skips the TAS flavor"',
            ),
            _kueue(_ASSIGNER + "tas_flavorassigner.go", 219, "isTASImplied"),
            _kueue(_SCHED + "clusterqueue.go", 741, "isTASOnly"),
            _kueue(_SCHED + "tas_flavor_snapshot.go", 1170, "HasLevel"),
            _kueue(_ASSIGNER + "flavorassigner.go", 1061, "findFlavorForPodSets"),
            _kueue(_ASSIGNER + "flavorassigner.go", 1071, '"resource %s unavailable in ClusterQueue"'),
            _kueue(
                _ASSIGNER + "flavorassigner.go",
                1208,
                "checkFlavorForPodSets",
                'pkg/scheduler/flavorassigner/flavorassigner_test.go "multiple flavors with different label keys,'
                " selector only uses flavor's own keys\"",
            ),
            _kueue(_ASSIGNER + "flavorassigner.go", 1278, "flavorSelector"),
            _kueue(_ASSIGNER + "flavorassigner.go", 1330, "fitsResourceQuota"),
            _kueue(_SCHED + "resource_node.go", 129, "potentialAvailable"),
            _kueue("pkg/workload/resources.go", 144, "AdjustResources"),
            _kueue("pkg/resources/factory.go", 71, "NewRequestsFromPodSpec"),
        ),
        "pool-not-enforced": (
            _kueue(
                "apis/kueue/v1beta2/clusterqueue_types.go",
                460,
                "MayStopSearch (default) of FlavorFungibility.whenCanBorrow",
                'pkg/scheduler/flavorassigner/flavorassigner_test.go "borrow before try next flavor"',
            ),
        ),
        "slice-size": (
            _kueue(_SCHED + "tas_flavor_snapshot.go", 1348, "sliceCount := state.count / state.sliceSize"),
            _kueue("pkg/controller/tas/topology_ungater.go", 491, '"The assignment can cover fewer pods"'),
        ),
        "ttl-after-finished": (
            _kueue("pkg/controller/jobs/rayjob/rayjob_controller.go", 222, "Finished"),
            _kuberay("rayjob_controller.go", 1515, "handleShutdownAfterJobFinishes"),
        ),
        "feature-gate": (_kueue("pkg/features/kube_features.go", 655, "defaultVersionedFeatureGates"),),
        "gate-conflict": (
            _kueue("pkg/config/validation.go", 653, '"feature gates for CLI and configuration cannot both specified"'),
            _kueue("cmd/kueue/main.go", 161, "LoadAndValidateFeatureGates"),
        ),
        "gate-unknown": (_kueue("pkg/config/validation.go", 641, "LoadAndValidateFeatureGates"),),
        "gate-locked": (_kueue("pkg/config/validation.go", 641, "LoadAndValidateFeatureGates"),),
        "gate-dependency": (
            _kueue("pkg/config/validation.go", 704, "validateFeatureGateDependency"),
            _kueue("pkg/config/validation.go", 718, "validateDRAFeatureGateDependencies"),
        ),
        "tas-mixed-queue": (
            _kueue(_ASSIGNER + "tas_flavorassigner.go", 219, "isTASImplied"),
            _kueue(_SCHED + "clusterqueue.go", 741, "isTASOnly"),
        ),
        "missing-flavor": (
            _kueue(_SCHED + "clusterqueue.go", 322, "ClusterQueueActiveReasonFlavorNotFound (inactiveReason)"),
        ),
        "missing-topology": (
            _kueue(_SCHED + "clusterqueue.go", 353, "ClusterQueueActiveReasonTopologyNotFound (inactiveReason)"),
        ),
        "kuberay": (
            _kuberay("utils/validation.go", 533, "ValidateRayJobMetadata", "utils/validation_test.go:2025"),
            _kuberay("utils/validation.go", 543, "ValidateRayJobSpec", "utils/validation_test.go:1236"),
            _kuberay("utils/validation.go", 103, "ValidateRayClusterSpec", "utils/validation_test.go:505"),
            _kuberay("utils/validation.go", 60, "validateRayGroupResources", "utils/validation_test.go:932"),
            _kuberay("utils/validation.go", 72, "validateRayGroupLabels", "utils/validation_test.go:1015"),
            _kuberay("common/pod.go", 721, "supportsUnifiedHealthCheck (2.53.0)"),
            *_in(
                _kuberay,
                "utils/constant.go",
                (375, "MaxRayClusterNameLength = 53"),
                (381, "MaxRayJobNameLength = MaxRayClusterNameLength - 6"),
            ),
            *_in(
                _kuberay,
                "utils/validation.go",
                (752, "validateDeletionConfiguration"),
                (32, "ValidateRayClusterMetadata"),
            ),
        ),
    }
)

# What the fleet relies on without a rule over objects: name -> its sources.
BEHAVIOURS: Mapping[str, tuple[Source, ...]] = MappingProxyType(
    {
        # fleet.gitops.kueue: every queue TAS-only, so a PodSet without `topology:` still gets the H200 flavors.
        "tas-only-queues": (
            _kueue(_ASSIGNER + "tas_flavorassigner.go", 219, "isTASImplied"),
            _kueue(_SCHED + "clusterqueue.go", 741, "isTASOnly"),
            _kueue(_SCHED + "tas_flavor_snapshot.go", 1212, "levelKeyWithImpliedFallback"),
            _kueue("pkg/util/tas/tas.go", 127, "IsLowestLevelHostname"),
        ),
        # fleet.goodput.nodeloss, layer by layer.
        "ray-node-death": (
            Source(
                "ray",
                "2.60.0",
                "src/ray/gcs/gcs_health_check_manager.cc",
                126,
                "StartHealthCheck: each check waits timeout_ms, the next period_ms after a failure",
                commit="2a48f197d35680bf86d63d43e27ad38403f3f228",
            ),
        ),
        "kuberay-terminating-pod": (
            *_in(
                _kuberay,
                "raycluster_controller.go",
                (931, "reconcilePods"),
                (1167, "diff := numExpectedWorkerPods - len(runningPods.Items)"),
                (1512, "shouldDeletePod"),
            ),
        ),
        "kuberay-ready-once": (_kuberay("raycluster_controller.go", 2019, "State = rayv1.Ready (calculateStatus)"),),
        "kueue-pods-ready": (_kueue("pkg/controller/jobs/rayjob/rayjob_controller.go", 229, "PodsReady"),),
        "kueue-node-failed": (
            *_in(
                _kueue,
                "pkg/controller/tas/node_controller.go",
                (361, "getWorkloadStatus"),
                (461, "checkPodsOnNode"),
                (713, "hasProgressingPods"),
            ),
            _kueue("pkg/controller/tas/constants.go", 30, "NodeFailureDelay = 30 * time.Second"),
            _kueue("pkg/features/kube_features.go", 730, "TASReplaceNodeDueToNotReadyOverFixedTime: deprecated, off"),
        ),
        "kueue-fail-fast": (
            *_in(
                _kueue,
                "pkg/scheduler/scheduler.go",
                (391, "processEntry"),
                (524, "handleFailedTASReplacement"),
                (910, "evictWorkloadAfterFailedTASReplacement"),
            ),
            _kueue("pkg/features/kube_features.go", 719, "TASFailedNodeReplacementFailFast: Beta, on"),
        ),
        "kueue-second-node": (
            _kueue(
                "pkg/controller/tas/node_controller.go",
                489,
                "evictWorkloadIfNeeded",
                f'{_TAS_TEST}:2630 "should evict workload when multiple assigned nodes fail"',
            ),
            _kueue(
                "pkg/controller/tas/node_controller.go",
                361,
                "getWorkloadStatus",
                f'{_TAS_TEST}:2364 "should remove node from unhealthyNodes when the node recovers"',
            ),
        ),
        # The runbooks pause one application's automated sync (fleet.gitops.argocd.PAUSE_POINTER).
        "argocd-pause": (
            _argocd("controller/appcontroller.go", 2332, "IsAutomatedSyncEnabled (autoSync returns unless it)"),
            _argocd("pkg/apis/application/v1alpha1/types.go", 1531, "IsAutomatedSyncEnabled: false only if enabled"),
            _argocd("docs/user-guide/auto_sync.md", 21, "`spec.syncPolicy.automated.enabled`"),
            _argocd("docs/operator-manual/cluster-bootstrapping.md", 222, "Ignoring differences in child applications"),
            _argocd("cmd/util/app.go", 226, "Automated = nil (--sync-policy none)"),
        ),
    }
)


def cite(name: str) -> str:
    """One behaviour's or rule's sources, for a docstring or a message."""
    return "; ".join(map(str, RULES.get(name) or BEHAVIOURS[name]))
