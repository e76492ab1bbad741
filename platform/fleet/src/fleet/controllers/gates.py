"""Kueue v0.19.2's feature gates: the ones Meridian relies on, set explicitly, and what the manager refuses.

Where Kueue reads them (`cmd/kueue/main.go`, `pkg/config/validation.go` `LoadAndValidateFeatureGates`): the
`--feature-gates` flag, which the chart writes from `controllerManager.featureGates` (charts/kueue/values.yaml,
templates/_helpers.tpl `kueue.featureGates`, only when the list is not empty), or the Configuration's
`featureGates` map (apis/config/v1beta2/configuration_types.go). Both at once and the manager exits ("feature
gates for CLI and configuration cannot both specified"). Meridian sets them in the Configuration
(fleet.gitops.kueue.manager_config), beside the rest of the manager's settings, and leaves the chart's list
empty.

Why each gate, and why FailFast is off: fleet.gitops.kueue's module docstring. Every gate is set even where
it is the default, because defaults move between releases (TASReplaceNodeDueToNotReadyOverFixedTime was on in
0.17 and 0.18 and is off, deprecated, in 0.19: `pkg/features/kube_features.go`); a deprecated gate may be
removed in a later release, and an unknown name stops the manager, which fleet.controllers.versions makes a
person re-read before a bump.

Dependencies (`validation.go` `validateFeatureGateDependency` and the checks beside it): a gate that is on
while one it depends on is off stops the manager. Locked gates (GA, `LockToDefault`) cannot be set to
anything but their default. Pure data and functions: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.controllers.findings import Finding

TAS = "TopologyAwareScheduling"
REPLACEMENT = "TASFailedNodeReplacement"
FAIL_FAST = "TASFailedNodeReplacementFailFast"
ON_POD_TERMINATION = "TASReplaceNodeOnPodTermination"
NOT_READY = "TASReplaceNodeDueToNotReadyOverFixedTime"

# Gate -> (value Meridian needs, why). fleet.gitops.kueue renders exactly these.
RELIED_ON: Mapping[str, tuple[bool, str]] = {
    TAS: (True, "every team queue and the sweep queue is topology-aware"),
    REPLACEMENT: (True, "a lost node is swapped in the workload's topology assignment, not waited for"),
    ON_POD_TERMINATION: (True, "a NotReady node counts as lost once its pods terminate"),
    # Off (0.19's default, deprecated): a node counts as lost once its pods terminate, not after 30 s NotReady.
    # Kueue keeps one failed node per workload and evicts the gang on a second, so a kubelet restart or a
    # network blip of 30 s must not count (fleet.goodput.nodeloss marks the node at the pod's eviction).
    NOT_READY: (
        False,
        "on, a node NotReady for 30 s (a kubelet restart) counts as lost, and a second such node evicts the gang",
    ),
    FAIL_FAST: (False, "on, one failed search for a replacement node evicts the whole gang"),
}

# The defaults at v0.19.2 (pkg/features/kube_features.go defaultVersionedFeatureGates) of every gate a
# dependency below names.
DEFAULTS: Mapping[str, bool] = {
    TAS: True,
    REPLACEMENT: True,
    FAIL_FAST: True,
    ON_POD_TERMINATION: True,
    NOT_READY: False,
    "TASProfileMixed": True,
    "TASBalancedPlacement": False,
    "TASReplaceNodeOnNodeTaints": True,
    "TASMultiLayerTopology": True,
    "TASRespectNodeAffinityPreferred": False,
    "TASRecomputeAssignmentWithinSchedulingCycle": True,
    "TASHandleOverlappingFlavors": True,
    "ElasticJobsViaWorkloadSlices": True,
    "ElasticJobsViaWorkloadSlicesWithTAS": False,
    "UnadmittedWorkloadsObservability": False,
    "UnadmittedWorkloadsExplicitStatus": False,
    "KueueDRAIntegration": True,
    "KueueDRAIntegrationExtendedResource": True,
    "KueueDRAIntegrationPartitionableDevices": True,
    "KueueDRAIntegrationConsumableCapacity": False,
}

# Gate -> the gates it needs on (validation.go LoadAndValidateFeatureGates, validateDRAFeatureGateDependencies).
DEPENDS_ON: Mapping[str, tuple[str, ...]] = {
    REPLACEMENT: (TAS,),
    FAIL_FAST: (TAS, REPLACEMENT),
    ON_POD_TERMINATION: (TAS, REPLACEMENT),
    NOT_READY: (TAS, REPLACEMENT),
    "TASProfileMixed": (TAS,),
    "TASBalancedPlacement": (TAS,),
    "TASReplaceNodeOnNodeTaints": (TAS,),
    "TASMultiLayerTopology": (TAS,),
    "TASRespectNodeAffinityPreferred": (TAS,),
    "TASRecomputeAssignmentWithinSchedulingCycle": (TAS,),
    "TASHandleOverlappingFlavors": (TAS,),
    "ElasticJobsViaWorkloadSlicesWithTAS": ("ElasticJobsViaWorkloadSlices", TAS),
    "UnadmittedWorkloadsExplicitStatus": ("UnadmittedWorkloadsObservability",),
    "KueueDRAIntegrationExtendedResource": ("KueueDRAIntegration",),
    "KueueDRAIntegrationPartitionableDevices": ("KueueDRAIntegration",),
    "KueueDRAIntegrationConsumableCapacity": ("KueueDRAIntegration",),
}

# GA gates locked to their default: setting another value stops the manager.
LOCKED: Mapping[str, bool] = {
    "HierarchicalCohorts": True,
    "ObjectRetentionPolicies": True,
    "ManagedJobsNamespaceSelectorAlwaysRespected": True,
    "MultiKueueAllowInsecureKubeconfigs": False,
    "PropagateBatchJobLabelsToWorkload": True,
    "SkipFinalizersForPodsSuspendedByParent": True,
    "MultiKueueWaitForWorkloadAdmitted": True,
    "MultiKueueRedoAdmissionOnEvictionInWorker": True,
}

# Every gate v0.19.2 knows (kube_features.go): any other name stops the manager.
KNOWN = frozenset(
    [
        "PartialAdmission",
        "FlavorFungibility",
        "VisibilityOnDemand",
        "DisableWaitForPodsReady",
        "PrioritySortingWithinCohort",
        "FairSharingPreemptWithinNominal",
        "FairSharingPrioritizeNonBorrowing",
        "MultiKueue",
        "TopologyAwareScheduling",
        "LocalQueueMetrics",
        "TASProfileMixed",
        "HierarchicalCohorts",
        "AdmissionFairSharing",
        "ObjectRetentionPolicies",
        "TASFailedNodeReplacement",
        "ElasticJobsViaWorkloadSlices",
        "ElasticJobsViaWorkloadSlicesWithTAS",
        "TASFailedNodeReplacementFailFast",
        "TASReplaceNodeOnPodTermination",
        "SkipReassignmentForPodOwnedWorkloads",
        "TASReplaceNodeDueToNotReadyOverFixedTime",
        "ManagedJobsNamespaceSelectorAlwaysRespected",
        "TASBalancedPlacement",
        "TASAssignmentsEncodingByHostnamePrefix",
        "KueueDRAIntegration",
        "KueueDRAIntegrationExtendedResource",
        "QuotaCheckStrategy",
        "KueueDRARejectWorkloadsWhenDRADisabled",
        "KueueDRAIntegrationPartitionableDevices",
        "KueueDRAIntegrationConsumableCapacity",
        "MultiKueueAdaptersForCustomJobs",
        "WorkloadRequestUseMergePatch",
        "MultiKueueAllowInsecureKubeconfigs",
        "MultiKueueKubeConfigPathValidation",
        "ReclaimablePods",
        "PropagateBatchJobLabelsToWorkload",
        "MultiKueueClusterProfile",
        "FailureRecoveryPolicy",
        "SkipFinalizersForPodsSuspendedByParent",
        "MultiKueueWaitForWorkloadAdmitted",
        "MultiKueueRedoAdmissionOnEvictionInWorker",
        "TLSOptions",
        "RemoveFinalizersWithStrictPatch",
        "TASReplaceNodeOnNodeTaints",
        "AssignQueueLabelsForPods",
        "TASMultiLayerTopology",
        "SchedulingEquivalenceHashing",
        "SchedulerLongRequeueInterval",
        "SchedulerTimestampPreemptionBuffer",
        "CustomMetricLabels",
        "SparkApplicationIntegration",
        "MultiKueueOrchestratedPreemption",
        "PriorityBoost",
        "AdmissionGatedBy",
        "ShortWorkloadNames",
        "FastQuotaReleaseInPodIntegration",
        "RejectUpdatesToCQWithInvalidOnFlavors",
        "FinishOrphanedWorkloads",
        "MultiKueueIncrementalDispatcherConfig",
        "MultiKueueIncrementalDispatcherRespectConfigOrder",
        "ConcurrentAdmission",
        "MetricForWorkloadCreationLatency",
        "TASRespectNodeAffinityPreferred",
        "MultiKueueManagerQuotaAutomation",
        "WorkloadIdentifierAnnotations",
        "WorkloadPriorityClassDefaulting",
        "MetricsForCohorts",
        "CleanupProvisioningRequestsOnEviction",
        "TASHandleOverlappingFlavors",
        "UnadmittedWorkloadsObservability",
        "TASRecomputeAssignmentWithinSchedulingCycle",
        "UnadmittedWorkloadsExplicitStatus",
        "DeferRayServiceFinalizationForRedisCleanup",
        "TASCacheNodeMatchResults",
        "TASCachingRemainingResources",
        "TASCacheTopologyTree",
        "SchedulerLibraryIntegration",
        "VectorizedResourceRequests",
        "WorkloadValidateResourcesAreNonNegative",
        "TASValidateWorkloadSliceSize",
        "WorkloadValidationForPodSetMetadata",
        "PrioritizePreemptorWorkloads",
        "LWSImmutableGroupSize",
        "FlavorFungibilityPreserveScanProgress",
        "SkipAncestorCheckForDeletedWorkloads",
        "MultiKueueRemoteSpecSync",
        "RecomputeAssignmentUponPreemptionTargetsOverlap",
        "PodIntegrationValidateGroupOwner",
        "ValidateRayAndSparkJobUpdates",
    ]
)

WHERE = "Kueue manager configuration"


def explicit(configuration: Mapping[str, Any], chart_values: Mapping[str, Any]) -> tuple[dict[str, object], bool]:
    """The gates set explicitly, and whether both the chart's flag and the Configuration set some."""
    in_config = {str(k): v for k, v in (configuration.get("featureGates") or {}).items()}
    listed = (chart_values.get("controllerManager") or {}).get("featureGates") or []
    in_chart = {str(g.get("name")): g.get("enabled") for g in listed if isinstance(g, Mapping)}
    return (in_chart or in_config), bool(in_chart and in_config)


def findings(configuration: Mapping[str, Any], chart_values: Mapping[str, Any]) -> list[Finding]:
    """Every gate Meridian relies on not set to its value, and every setting that stops the manager."""
    gates, both = explicit(configuration, chart_values)
    found = []
    if both:
        found.append(
            Finding(
                WHERE,
                "gate-conflict",
                "feature gates are set both in the chart's "
                "controllerManager.featureGates and in the Configuration: the manager exits; keep "
                "them in the Configuration",
            )
        )
    for gate, (wanted, why) in RELIED_ON.items():
        if gates.get(gate) is not wanted:
            now = "not set" if gate not in gates else f"{gates[gate]!r}"
            found.append(
                Finding(
                    WHERE,
                    "feature-gate",
                    f"featureGates.{gate} is {now}; Meridian needs {str(wanted).lower()} ({why}): set it explicitly",
                )
            )
    for gate, value in gates.items():
        if gate not in KNOWN:
            found.append(
                Finding(WHERE, "gate-unknown", f"featureGates.{gate} is no Kueue 0.19.2 gate: the manager exits")
            )
        elif gate in LOCKED and value is not LOCKED[gate]:
            found.append(
                Finding(
                    WHERE,
                    "gate-locked",
                    f"featureGates.{gate} is locked to {LOCKED[gate]} (GA): the manager exits; remove it",
                )
            )
    effective = {**DEFAULTS, **{g: bool(v) for g, v in gates.items()}}
    for gate, needs in DEPENDS_ON.items():
        for need in needs:
            if effective.get(gate) and not effective.get(need):
                found.append(
                    Finding(
                        WHERE,
                        "gate-dependency",
                        f"featureGates.{gate} is on but needs {need}, which "
                        "is off (pkg/config/validation.go): the manager exits",
                    )
                )
    return found
