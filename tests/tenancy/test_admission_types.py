"""Each admission policy expression names only fields of every kind its policy matches (celtypes.py).

Before the team policies were split per kind, one `templates` variable served Pods, Jobs,
Deployments, RayClusters and RayJobs: `object.spec.template` on a Pod, `object.spec.headGroupSpec` on
a Job. The evaluator never reached those branches, so only the API server's type check (warnings on
every policy) showed them.
"""

from __future__ import annotations

from fleet.gitops.validate import CrdSchemas
from fleet.model import Fleet
from tests.tenancy.celtypes import kind_schema, matched_kinds, missing_field, object_chains
from tests.tenancy.conftest import Policies
from tests.tenancy.vap import expressions


def test_the_chain_reader() -> None:
    expression = "has(object.spec.template) && object.spec.workerGroupSpecs.map(g, g.x) + oldObject.a.b"
    assert list(object_chains(expression)) == [("spec", "template"), ("spec", "workerGroupSpecs")]


def test_the_schema_walk(fleet: Fleet, crds: CrdSchemas) -> None:
    pod = kind_schema("", "v1", "Pod", fleet.versions.kubernetes, crds)
    assert missing_field(pod, ("spec", "containers"), fleet.versions.kubernetes) is None
    assert missing_field(pod, ("spec", "template", "spec"), fleet.versions.kubernetes) == "spec.template"
    assert missing_field(pod, ("metadata", "labels", "any"), fleet.versions.kubernetes) is None  # a map
    ray = kind_schema("ray.io", "v1", "RayCluster", fleet.versions.kubernetes, crds)
    assert missing_field(ray, ("spec", "headGroupSpec", "template"), fleet.versions.kubernetes) is None
    assert missing_field(ray, ("spec", "template"), fleet.versions.kubernetes) == "spec.template"


def test_every_expression_names_fields_each_matched_kind_has(
    fleet: Fleet, crds: CrdSchemas, cluster_policies: dict[str, Policies]
) -> None:
    problems, checked = set(), 0
    for policies in cluster_policies.values():
        for name, (policy, _) in policies.items():
            kinds = matched_kinds(policy)
            for expression in expressions(policy):
                for chain in object_chains(expression):
                    for group, version, kind in kinds:
                        schema = kind_schema(group, version, kind, fleet.versions.kubernetes, crds)
                        bad = missing_field(schema, chain, fleet.versions.kubernetes)
                        checked += 1
                        if bad:
                            problems.add(f"{name}: object.{bad} is not a field of {kind}")
    assert checked > 100
    assert not problems, "\n".join(sorted(problems))
