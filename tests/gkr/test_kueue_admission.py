"""What Kueue v0.19.2 makes of the objects gkr renders: the flavor each GPU pod can be given, the
admission checks that flavor brings, and the topology requests its webhook accepts.

Each rule is a small model of the upstream code, over every example's dry-run and the fleet's generated
Kueue configuration (kustomize/overlays/<cluster>/kueue-config); the citations are to the tag v0.19.2 of
kubernetes-sigs/kueue.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from contract import names
from contract.registry import team_pools
from tests.conftest import REPO
from tests.gkr.conftest import EXAMPLES, shipped

REGISTRY = shipped().registry
EXAMPLE_NAMES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))
GROUP = "kueue.x-k8s.io/podset-group-name"
REQUIRED, PREFERRED = "kueue.x-k8s.io/podset-required-topology", "kueue.x-k8s.io/podset-preferred-topology"
SLICE_TOPOLOGY, SLICE_SIZE = "kueue.x-k8s.io/podset-slice-required-topology", "kueue.x-k8s.io/podset-slice-size"


def kueue_config(cluster: str) -> dict[str, list[dict[str, Any]]]:
    """The cluster's generated Kueue objects by kind."""
    path = REPO / "kustomize" / "overlays" / cluster / "kueue-config" / "kueue-config.yaml"
    out: dict[str, list[dict[str, Any]]] = {}
    for doc in yaml.safe_load_all(path.read_text()):
        if doc:
            out.setdefault(doc["kind"], []).append(doc)
    return out


def dry_run(gkr: Callable[..., Result], path: Path) -> dict[str, list[dict[str, Any]]]:
    """A job file's objects by cluster name, as `gkr submit --dry-run -o json` prints them."""
    result = gkr("submit", "-f", str(path), "--dry-run", "-o", "json")
    assert result.exit_code == 0, result.stderr
    printed = json.loads(result.stdout)
    if isinstance(printed, dict) and "kind" not in printed:  # a run across regions: {context: [objects]}
        return {r.cluster: printed[REGISTRY.context(r)] for r in REGISTRY.regions if REGISTRY.context(r) in printed}
    region = yaml.safe_load(path.read_text())["region"]
    cluster = next(r.cluster for r in REGISTRY.regions if r.name == region)
    return {cluster: printed if isinstance(printed, list) else [printed]}


def templates(obj: dict[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(pod set name, count, pod template) of each pod set Kueue makes of an object (KubeRay's: head, then
    each worker group, pkg/controller/jobs/raycluster BuildPodSets; a Job's or Deployment's one template)."""
    spec = obj.get("spec", {})  # a Secret has none
    if obj["kind"] in ("RayJob", "RayCluster"):
        cluster = spec["rayClusterSpec"] if obj["kind"] == "RayJob" else spec
        yield "head", 1, cluster["headGroupSpec"]["template"]
        for group in cluster["workerGroupSpecs"]:
            yield group["groupName"], group["replicas"], group["template"]
    elif "template" in spec:
        yield "main", spec.get("parallelism", spec.get("replicas", 1)), spec["template"]


def gpu_templates(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        t
        for o in objects
        for _, _, t in templates(o)
        if any(names.GPU_RESOURCE in c["resources"].get("requests", {}) for c in t["spec"]["containers"])
    ]


def matching_flavors(template: dict[str, Any], queue: dict[str, Any], flavors: dict[str, dict[str, Any]]) -> list[str]:
    """The flavors of the queue Kueue may give this pod template, in the queue's order.

    pkg/scheduler/flavorassigner/flavorassigner.go: checkFlavorForPodSets matches the pod's nodeSelector,
    reduced to the flavor's own label keys (flavorSelector), against the flavor's nodeLabels; a key the
    flavor does not name constrains nothing (upstream tests "multiple flavors, fits a node selector",
    "multiple flavors with different label keys, selector only uses flavor's own keys"). findFlavorForPodSets
    then takes the first matching flavor that fits: v1beta2 flavorFungibility.whenCanBorrow defaults to
    MayStopSearch (apis/kueue/v1beta2/clusterqueue_types.go), so a fit by borrowing stops the search.
    """
    selector = template["spec"].get("nodeSelector", {})
    out = []
    for group in queue["spec"]["resourceGroups"]:
        for quota in group["flavors"]:
            gpus = next(r for r in quota["resources"] if r["name"] == names.GPU_RESOURCE)
            if gpus["nominalQuota"] == 0 and gpus.get("borrowingLimit", 1) == 0:
                continue  # no GPU ever fits (the CPU flavor)
            labels = flavors[quota["name"]]["spec"].get("nodeLabels", {})
            assert not flavors[quota["name"]]["spec"].get("nodeTaints"), (
                "the model leaves out taints: none are generated"
            )
            if all(labels[k] == v for k, v in selector.items() if k in labels):
                out.append(quota["name"])
    return out


def checks_for(queue: dict[str, Any], flavor: str) -> set[str]:
    """The admission checks a workload admitted on `flavor` gets: pkg/util/admissioncheck NewAdmissionChecks
    (no onFlavors: every flavor) and pkg/workload AdmissionChecksForWorkload (checks on the admitted flavors)."""
    strategy = queue["spec"].get("admissionChecksStrategy", {}).get("admissionChecks", [])
    return {c["name"] for c in strategy if not c.get("onFlavors") or flavor in c["onFlavors"]}


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_every_gpu_pod_can_only_be_given_its_pools_flavor(gkr: Callable[..., Result], example: str) -> None:
    """`pool:` is what Kueue admits on: without the pool's label in the selector, an accelerator selector
    matches every H200 flavor and the first that fits wins, so a flex-start job lands on the reservation
    and no ProvisioningRequest is made."""
    job = yaml.safe_load((EXAMPLES / f"{example}.yaml").read_text())
    for cluster, objects in dry_run(gkr, EXAMPLES / f"{example}.yaml").items():
        config = kueue_config(cluster)
        flavors = {f["metadata"]["name"]: f for f in config["ResourceFlavor"]}
        (queue,) = [q for q in config["ClusterQueue"] if q["metadata"]["name"] == job["team"]]
        region = next(r for r in REGISTRY.regions if r.cluster == cluster)
        pools = {p.name: p for p in region.pools}
        pool = job.get("pool") or team_pools(region.pools, job["team"])[0].name  # gkr's default (resolve._pool)
        for template in gpu_templates(objects):
            assert matching_flavors(template, queue, flavors) == [pool], (
                f"{example}: {template['spec']['nodeSelector']}"
            )
            flex = {"dws-prov"} if pools[pool].flex_start else set()
            assert checks_for(queue, pool) == flex, f"{example}: pool {pool} and its admission checks"


def test_the_flex_start_example_gets_a_provisioning_request() -> None:
    """The AdmissionCheck is per flavor (onFlavors): only the flex-start flavor's workloads get one."""
    config = kueue_config("meridian-us-central1")
    (check,) = config["AdmissionCheck"]
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"
    job = yaml.safe_load((EXAMPLES / "flex-start-finetune.yaml").read_text())
    (queue,) = [q for q in config["ClusterQueue"] if q["metadata"]["name"] == job["team"]]
    assert checks_for(queue, job["pool"]) == {check["metadata"]["name"]}
    assert checks_for(queue, "h200-a") == set()


def topology_problems(obj: dict[str, Any]) -> list[str]:
    """What Kueue's RayJob/RayCluster webhook refuses of the pod sets' topology annotations.

    pkg/controller/jobs/raycluster/common.go ValidateTopologyRequest calls, in
    pkg/controller/jobframework/tas_validation.go: ValidateTASPodSetRequest (one of required/preferred;
    a group name needs one of them, is not a number, and not beside slice annotations; slice size and
    topology together) and ValidatePodSetGroupingTopology (a group is exactly 2 pod sets, one of them of
    1 pod, with the same required or preferred topology). The group's request is built only with
    required or preferred (pkg/controller/jobframework/tas.go Build).
    """
    out: list[str] = []
    grouped: dict[str, list[tuple[int, str | None, str | None]]] = {}
    for name, count, template in templates(obj):
        notes = template["metadata"].get("annotations", {})
        if REQUIRED in notes and PREFERRED in notes:
            out.append(f"{name}: more than one topology annotation")
        if (SLICE_TOPOLOGY in notes) != (SLICE_SIZE in notes):
            out.append(f"{name}: slice topology and size go together")
        if GROUP in notes:
            if notes[GROUP].isdigit():
                out.append(f"{name}: group name is a number")
            if SLICE_TOPOLOGY in notes or SLICE_SIZE in notes:
                out.append(f"{name}: group name beside slice annotations")
            if REQUIRED not in notes and PREFERRED not in notes:
                out.append(f"{name}: group name without required or preferred topology")
            grouped.setdefault(notes[GROUP], []).append((count, notes.get(REQUIRED), notes.get(PREFERRED)))
    for group, members in grouped.items():
        if len(members) != 2:
            out.append(f"group {group}: {len(members)} pod sets, not 2")
        elif 1 not in (members[0][0], members[1][0]):
            out.append(f"group {group}: no pod set of 1 pod")
        elif members[0][1:] != members[1][1:]:
            out.append(f"group {group}: different topology requests")
    return out


@pytest.mark.parametrize("example", EXAMPLE_NAMES)
def test_kueues_webhook_takes_every_examples_topology(gkr: Callable[..., Result], example: str) -> None:
    for objects in dry_run(gkr, EXAMPLES / f"{example}.yaml").values():
        for obj in objects:
            assert topology_problems(obj) == [], example


def test_grpo_8b_roles_are_one_podset_group() -> None:
    """Both roles' pod sets in one group, so Kueue places trainer and generators in one block: the weight
    sync stays under one block's switches (pkg/cache/scheduler/tas_flavor_snapshot.go
    FindTopologyAssignmentsForFlavor places a group's pod sets together, findLeaderAndWorkers)."""
    from gkr.flags import as_flags
    from gkr.submit import prepare

    (job,) = prepare(str(EXAMPLES / "grpo-8b.yaml"), as_flags({}), shipped(), None)[1]
    notes = {name: t["metadata"]["annotations"] for name, _, t in templates(job)}
    assert notes["trainer"][GROUP] == notes["generators"][GROUP]
    assert GROUP not in notes["head"]
    assert notes["trainer"][REQUIRED] == notes["generators"][REQUIRED] == names.TOPOLOGY_LEVELS[0]
