"""Every rule in fleet.controllers over the committed tree, joined with every job Meridian's tools submit.

Each cluster's tree is built as Argo CD builds it (tests/conftest.py `trees`: kustomize over the committed
overlays, the Kueue chart's values from the `kueue` Application). The jobs: every gkr example, rendered by
gkr's own planner (gkr.plan, as `gkr submit --dry-run` does) in the region it goes to, each part of a run
across regions in its own region; `gkr preflight` in every region; Warden's sweep Job on a node of every pool
Warden sweeps (warden.deepcheck, with the cluster's generated Warden policy). Kueue's rules and KubeRay's
(fleet.controllers.kuberay) both apply to every job.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from contract import names
from contract import warden as warden_config
from fleet.controllers import kuberay, kueue
from fleet.controllers.kueue import Cluster
from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding as BuildFinding
from fleet.model import CapacityMode, Fleet
from gkr import plan
from gkr import registry as gkr_registry
from gkr.config import UserConfig
from gkr.flags import as_flags
from gkr.resolved import Resolved
from gkr.submit import preflight_job
from tests.gkr.conftest import EXAMPLES, registry_folder
from warden import deepcheck
from warden.sweeper import Sweeper

Obj = dict[str, Any]
Trees = dict[str, tuple[ClusterTree, list[BuildFinding]]]
JOBS = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
# Where Warden creates its sweeps: the Sweeper's default, which `warden serve` (warden.cli) keeps.
SWEEP_NAMESPACE = inspect.signature(Sweeper).parameters["namespace"].default


def _cluster(tree: ClusterTree) -> Cluster:
    apps = [o for o in tree.argocd if o.get("kind") == "Application" and o["metadata"]["name"] == "kueue"]
    (app,) = apps
    return kueue.cluster([o for _, o in tree.objects()], app["spec"]["source"]["helm"]["valuesObject"])


@pytest.fixture(scope="module")
def clusters(trees: Trees) -> dict[str, Cluster]:
    """Region -> its cluster's Kueue objects, namespaces, LimitRanges and manager config."""
    return {region: _cluster(tree) for region, (tree, _) in trees.items()}


def _found(clusters: dict[str, Cluster], resolved: Resolved, objects: list[Obj]) -> list[str]:
    pool = resolved.pool.name if resolved.spec.gpus_per_pod else None  # the GPU pool gkr resolved the job to
    c = clusters[resolved.region.name]
    found = [f for o in objects for f in [*kueue.job_findings(c, o, pool), *kuberay.job_findings(o)]]
    return [f"{resolved.region.name}: {f}" for f in found]


def test_every_clusters_kueue_configuration_passes(clusters: dict[str, Cluster]) -> None:
    assert {region: [str(f) for f in kueue.config_findings(c)] for region, c in clusters.items()} == {
        region: [] for region in clusters
    }


def test_every_queue_is_topology_aware(clusters: dict[str, Cluster]) -> None:
    # What lets a PodSet without `topology:` onto the H200 flavors (fleet.gitops.kueue, module docstring).
    for c in clusters.values():
        assert {name: kueue.tas_only(c, q) for name, q in c.queues.items()} == dict.fromkeys(c.queues, True)


@pytest.mark.parametrize("example", JOBS)
def test_every_gkr_example_is_admitted_as_it_asks(example: str, clusters: dict[str, Cluster]) -> None:
    found = gkr_registry.load(registry_folder())
    planned = plan.plan(str(EXAMPLES / example), {}, found, UserConfig(), None, None)
    if isinstance(planned, plan.One):
        findings = _found(clusters, planned.resolved, planned.objects)
    else:
        run = planned.run
        findings = [f for p in run.parts for f in _found(clusters, p.resolved, [p.rayjob])]
        findings += _found(clusters, run.home.resolved, list(run.lighthouse))
    assert findings == []


@pytest.mark.parametrize("region", ["us-central1", "us-east4", "europe-west1"])
def test_gkr_preflight_is_admitted_in_every_region(region: str, clusters: dict[str, Cluster]) -> None:
    found = gkr_registry.load(registry_folder())
    job = preflight_job("someone", 2, 8)
    flags = {**as_flags(job), "team": ("--team", "research"), "region": ("--region", region)}
    planned = plan.plan(None, flags, found, UserConfig(), None, None)
    assert isinstance(planned, plan.One)
    assert _found(clusters, planned.resolved, planned.objects) == []


def test_wardens_sweeps_are_admitted_on_every_pool_they_sweep(
    fleet: Fleet, trees: Trees, clusters: dict[str, Cluster]
) -> None:
    findings = []
    for region in fleet.regions:
        tree, _ = trees[region.name]
        (policy_map,) = [
            o for o in tree.apps["warden"] if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "warden-policy"
        ]
        policy = warden_config.loads(policy_map["data"][warden_config.FILE], "warden-policy")
        for pool in region.gpu_pools:
            if pool.capacity.mode is CapacityMode.FLEX_START:
                continue  # burned in when they join, never swept (fleet.gitops.kueue.sweep_objects)
            node = {
                "metadata": {"name": f"{pool.name}-node", "labels": {names.NODE_POOL_LABEL: pool.name}},
                "status": {"capacity": {names.GPU_RESOURCE: "8"}},
            }
            job = deepcheck.sweep_job(node, policy, SWEEP_NAMESPACE, 0.0)
            findings += [f"{region.name}: {f}" for f in kueue.job_findings(clusters[region.name], job, pool.name)]
    assert findings == []


def test_the_examples_are_all_here() -> None:
    assert sorted(p.name for p in Path(EXAMPLES).glob("*.yaml")) == JOBS
    assert len(JOBS) >= 8
