"""What Kueue v0.19.2 makes of the objects gkr renders: the flavor each GPU pod can be given, the
admission checks that flavor brings, and the topology requests its webhook accepts.

Kueue's rules are fleet.controllers' (the flavor assigner, its webhooks: each cites the upstream code at
the tag v0.19.2 of kubernetes-sigs/kueue), over every example's dry run (tests/gkr/conftest.py `dry_run`)
and the fleet's generated Kueue configuration (kustomize/overlays/<cluster>/kueue-config).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from contract import names
from contract.registry import team_pools
from fleet.controllers import kueue, podsets, refusals
from fleet.controllers.pods import pod_requests
from tests.conftest import REPO
from tests.gkr.conftest import EXAMPLES, dry_run, shipped

REGISTRY = shipped().registry
EXAMPLE_NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))
GROUP, REQUIRED = podsets.GROUP, podsets.REQUIRED


def kueue_config(cluster: str) -> kueue.Cluster:
    """The cluster's generated Kueue objects."""
    path = REPO / "kustomize" / "overlays" / cluster / "kueue-config" / "kueue-config.yaml"
    return kueue.cluster(doc for doc in yaml.safe_load_all(path.read_text()) if doc)


def by_cluster(example: str) -> dict[str, list[dict[str, Any]]]:
    """A job file's objects by cluster name, as `gkr submit --dry-run` prints them."""
    run = dry_run("submit", "-f", str(EXAMPLES / f"{example}.yaml"), "-o", "yaml")
    clusters = {REGISTRY.context(r): r.cluster for r in REGISTRY.regions}
    out: dict[str, list[dict[str, Any]]] = {}
    for context, o in run.objects:
        out.setdefault(clusters[context], []).append(o)
    return out


def gpu_podsets(objects: list[dict[str, Any]]) -> list[podsets.PodSet]:
    """The pod sets Kueue makes of the objects (fleet.controllers.podsets) whose pods request GPUs."""
    found = [ps for o in objects if (w := podsets.workload(o)) is not None for ps in w.podsets]
    return [ps for ps in found if names.GPU_RESOURCE in pod_requests(ps.spec)]


def checks_for(queue: dict[str, Any], flavor: str) -> set[str]:
    """The admission checks a workload admitted on `flavor` gets: pkg/util/admissioncheck NewAdmissionChecks
    (no onFlavors: every flavor) and pkg/workload AdmissionChecksForWorkload (checks on the admitted flavors)."""
    strategy = queue["spec"].get("admissionChecksStrategy", {}).get("admissionChecks", [])
    return {c["name"] for c in strategy if not c.get("onFlavors") or flavor in c["onFlavors"]}


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_every_gpu_pod_can_only_be_given_its_pools_flavor(example: str) -> None:
    """`pool:` is what Kueue admits on: without the pool's label in the selector, an accelerator selector
    matches every H200 flavor and the first that fits wins, so a flex-start job lands on the reservation
    and no ProvisioningRequest is made."""
    job = yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text())
    for cluster, objects in by_cluster(example).items():
        config = kueue_config(cluster)
        queue = config.queues[job["team"]]
        region = next(r for r in REGISTRY.regions if r.cluster == cluster)
        pools = {p.name: p for p in region.pools}
        pool = job.get("pool") or team_pools(region.pools, job["team"])[0].name  # gkr's default (resolve._pool)
        for ps in gpu_podsets(objects):
            assert kueue.admitting(config, queue, ps, pod_requests(ps.spec)) == [pool], (
                f"{example}: {ps.spec.get('nodeSelector')}"
            )
            flex = {"dws-prov"} if pools[pool].flex_start else set()
            assert checks_for(queue, pool) == flex, f"{example}: pool {pool} and its admission checks"


def test_the_flex_start_example_gets_a_provisioning_request() -> None:
    """The AdmissionCheck is per flavor (onFlavors): only the flex-start flavor's workloads get one."""
    path = REPO / "kustomize" / "overlays" / "meridian-us-central1" / "kueue-config" / "kueue-config.yaml"
    (check,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "AdmissionCheck"]
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    job = yaml.safe_load((EXAMPLES / "flex-start-finetune.yaml").read_text())
    queue = kueue_config("meridian-us-central1").queues[job["team"]]
    assert checks_for(queue, job["pool"]) == {check["metadata"]["name"]}
    assert checks_for(queue, "h200-a") == set()


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_kueues_webhook_takes_every_examples_topology(example: str) -> None:
    """fleet.controllers.refusals: what Kueue's RayJob/RayCluster webhook refuses of the pod sets' topology
    annotations (pkg/controller/jobframework/tas_validation.go, called by raycluster/common.go)."""
    for objects in by_cluster(example).values():
        for obj in objects:
            w = podsets.workload(obj)
            assert (refusals.findings(w) if w else []) == [], example


def test_grpo_8b_roles_are_one_podset_group() -> None:
    """Both roles' pod sets in one group, so Kueue places trainer and generators in one block: the weight
    sync stays under one block's switches (pkg/cache/scheduler/tas_flavor_snapshot.go
    FindTopologyAssignmentsForFlavor places a group's pod sets together, findLeaderAndWorkers)."""
    from gkr.flags import as_flags
    from gkr.submit import prepare

    (job,) = prepare(str(EXAMPLES / "grpo-8b.yaml"), as_flags({}), shipped(), None)[1]
    w = podsets.workload(job)
    assert w is not None
    notes = {ps.name: (ps.template.get("metadata") or {}).get("annotations") or {} for ps in w.podsets}
    assert notes["trainer"][GROUP] == notes["generators"][GROUP]
    assert GROUP not in notes["head"]
    assert notes["trainer"][REQUIRED] == notes["generators"][REQUIRED] == names.TOPOLOGY_LEVELS[0]
