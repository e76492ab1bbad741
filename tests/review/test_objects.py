"""The default deny on hand-made objects: what a changed field looks like, what is known to be harmless and why,
quotas and priorities against the fleet plan, and what hostile input cannot do to it (security/objects.py,
security/quotas.py). The attempts on the shipped tree are test_default_deny.py's."""

from __future__ import annotations

import copy
import json
import textwrap
from typing import Any

from review.report import COMMENT_LIMIT, summary
from review.review import Review
from review.security import Finding, security_findings
from review.security.fields import MISSING, changes
from review.security.objects import KNOWN

Obj = dict[str, Any]


def _k8s(before: list[Obj], after: list[Obj], plans: tuple[Any, Any] = (None, None)) -> list[str]:
    return [f.what for f in security_findings({"c": before}, {"c": after}, {}, {}, *plans)]


def _obj(kind: str, name: str, namespace: str = "", api: str = "v1", **body: Any) -> Obj:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": api, "kind": kind, "metadata": meta, **body}


def _changed(old: Obj, edit: Any) -> tuple[Obj, Obj]:
    new = copy.deepcopy(old)
    edit(new)
    return old, new


# --- Field by field -------------------------------------------------------------------------------


def test_lists_pair_by_name_and_scripts_by_line() -> None:
    old = {"containers": [{"name": "a", "args": ["set -e\nrun\n"]}], "tolerations": [{"operator": "Exists"}]}
    new = {
        "containers": [{"name": "a", "args": ["set -e\nrun\nextra\n"]}, {"name": "b", "image": "x"}],
        "tolerations": [],
    }
    found = [(c.path, c.before, c.after, c.item) for c in changes(old, new)]
    assert found == [
        (("containers", "[a]", "args", "[0]"), "set -e\nrun\n", "set -e\nrun\nextra\n", None),
        (("containers", "[b]", "name"), MISSING, "b", ("containers", "[b]")),
        (("containers", "[b]", "image"), MISSING, "x", ("containers", "[b]")),
        (("tolerations",), [{"operator": "Exists"}], MISSING, None),  # [] and absent alike
    ]


def test_documents_in_strings_are_compared_field_by_field() -> None:
    config = {"act_on": "unambiguous", "pools": {"a": {"gpus": 8}}}
    old = {"data": {"config.json": json.dumps(config, indent=1)}}
    new = {"data": {"config.json": json.dumps(config | {"act_on": "all"}, indent=1)}}
    assert [(c.path, c.before, c.after) for c in changes(old, new)] == [
        (("data", "config.json", "act_on"), "unambiguous", "all")
    ]


def test_documents_nested_in_documents_stop_at_two_levels() -> None:
    text = "x: 1\n"
    for _ in range(50):  # every level a YAML block string holding the next: parsed twice, then compared as text
        text = "doc: |\n" + textwrap.indent(text, "  ") + "more: 1\n"
    (change,) = changes({"d": text}, {"d": text.replace("x: 1", "x: 2")})
    assert change.path == ("d", "doc", "doc")
    assert isinstance(change.before, str)


def test_a_changed_field_of_an_unknown_kind_is_listed_with_before_and_after() -> None:
    service = _obj("Service", "metrics", "warden", spec={"ports": [{"name": "m", "port": 9090}]})
    old, new = _changed(service, lambda o: o["spec"].update(type="LoadBalancer", externalIPs=["203.0.113.7"]))
    assert _k8s([old], [new]) == [
        "Service warden/metrics spec.type: (absent) -> LoadBalancer; spec.externalIPs: + 203.0.113.7"
    ]
    assert _k8s([new], [old]) == [  # narrowing is a change too: the review knows nothing of Services
        "Service warden/metrics spec.type: LoadBalancer -> (absent); spec.externalIPs: - 203.0.113.7"
    ]


def test_a_line_is_short_whatever_the_object_holds() -> None:
    old = _obj("ConfigMap", "big", "x", data={f"k{i}": "v" for i in range(50)})
    new = _obj("ConfigMap", "big", "x", data={f"k{i}": "w" * 10_000 for i in range(50)})
    (line,) = _k8s([old], [new])
    assert line.endswith("; and 44 more changed fields")
    assert len(line) < 800
    assert "w" * 67 + "..." in line


def test_a_new_or_removed_object_is_one_entry() -> None:
    job = _obj("CronJob", "miner", "warden", api="batch/v1", spec={"schedule": "* * * * *"})
    assert _k8s([], [job]) == ["new CronJob.batch warden/miner added: spec.schedule"]
    assert _k8s([job], []) == ["CronJob.batch warden/miner removed: spec.schedule"]


# --- Known harmless -------------------------------------------------------------------------------


def test_every_known_entry_says_what_and_why() -> None:
    assert all(k.fields and k.why for k in KNOWN)
    assert len(KNOWN) <= 16  # a short table: anything else is a code owner's


def _pod(**container: Any) -> Obj:
    spec = {"containers": [{"name": "c", "image": "r/app:1", "ports": [{"containerPort": 80}], **container}]}
    return _obj("Deployment", "d", "t", api="apps/v1", spec={"template": {"metadata": {"labels": {}}, "spec": spec}})


def test_pins_ports_and_unselected_labels_are_harmless() -> None:
    old = _pod()
    new = copy.deepcopy(old)
    container = new["spec"]["template"]["spec"]["containers"][0]
    container.update(image="r/app:2@sha256:ab", ports=[{"containerPort": 80, "name": "http"}])
    new["spec"]["template"]["metadata"]["labels"]["app"] = "d"
    new["metadata"]["annotations"] = {"checkov.io/skip1": "CKV_K8S_8=why"}
    assert _k8s([old], [new]) == []
    other = copy.deepcopy(old)
    other["spec"]["template"]["spec"]["containers"][0]["image"] = "evil.example/app:1"
    assert _k8s([old], [other]) == [
        "Deployment.apps t/d containers[c].image: r/app:1 -> evil.example/app:1"  # another image: other code
    ]


def _policy(selector_key: str) -> Obj:
    return _obj(
        "ValidatingAdmissionPolicy",
        "p",
        api="admissionregistration.k8s.io/v1",
        spec={
            "matchConstraints": {
                "namespaceSelector": {"matchExpressions": [{"key": selector_key, "operator": "Exists"}]}
            },
            "validations": [{"expression": 'namespaceObject.metadata.labels["example.dev/tier"] == "a"'}],
        },
    )


def test_a_label_is_security_when_something_selects_on_it() -> None:
    def namespace(**labels: str) -> Obj:
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": labels}}

    policy = _policy("example.dev/team")
    netpol = _obj(
        "NetworkPolicy",
        "n",
        "x",
        api="networking.k8s.io/v1",
        spec={
            "podSelector": {},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"example.dev/zone": "z"}}}]}],
        },
    )
    old = namespace(**{"example.dev/team": "a", "example.dev/tier": "a", "example.dev/zone": "z", "note": "x"})
    new = namespace(note="y")
    assert _k8s([policy, netpol, old], [policy, netpol, new]) == [
        "Namespace team-a label example.dev/team: a -> (absent) (selected by admission policies); "
        "label example.dev/tier: a -> (absent) (selected by admission policies); "
        "label example.dev/zone: z -> (absent) (selected by NetworkPolicies)"
    ]
    # Nothing selects on them without those objects: the same change says nothing.
    assert _k8s([old], [new]) == []
    # Kueue's manager configuration, embedded in an Argo CD Application's Helm values, selects too.
    config = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nmanagedJobsNamespaceSelector:\n"
    config += "  matchExpressions: [{key: example.dev/team, operator: Exists}]\n"
    app = _obj(
        "Application",
        "kueue",
        "argocd",
        api="argoproj.io/v1alpha1",
        spec={"source": {"helm": {"valuesObject": {"managerConfig": {"controllerManagerConfigYaml": config}}}}},
    )
    assert _k8s([app, old], [app, new]) == [
        "Namespace team-a label example.dev/team: a -> (absent) (selected by Kueue's manager configuration)"
    ]


def test_the_registry_is_harmless_only_while_nothing_in_the_cluster_reads_it() -> None:
    old = _obj("ConfigMap", "meridian-registry", "meridian-registry", data={"registry.json": '{"a": 1}'})
    old, new = _changed(old, lambda o: o["data"].update({"registry.json": '{"a": 2}'}))
    assert _k8s([old], [new]) == []
    reader = _pod(volumeMounts=[{"name": "r", "mountPath": "/r"}])
    reader["metadata"]["namespace"] = "meridian-registry"
    reader["spec"]["template"]["spec"]["volumes"] = [{"name": "r", "configMap": {"name": "meridian-registry"}}]
    assert _k8s([old, reader], [new, reader]) == [
        "ConfigMap meridian-registry/meridian-registry data.registry.json.a: 1 -> 2"
    ]


# --- Quotas and priorities against the fleet plan -------------------------------------------------


def _plan(research: int = 768, cohort: int = 0, nodes: int = 390, **more: Any) -> dict[str, Any]:
    def team(gpus: int) -> Obj:
        return {
            "nominal": {"h200-a": {"nvidia.com/gpu": gpus}},
            "borrowing": {"h200-a": {"nvidia.com/gpu": 1024 - gpus}},
            "admissible": {"nvidia.com/gpu": 1024},
        }

    kueue = {"cohort": {"h200-a": {"nvidia.com/gpu": cohort}} if cohort else {}, "teams": {"research": team(research)}}
    region = {"name": "r", "cluster": "c", "capacity": {"nodes": nodes}, "kueue": kueue}
    return {"regions": [region], "priorities": [{"name": "standard", "value": 1000}], **more}


def _queue(name: str, nominal: Any, borrowing: Any = None) -> Obj:
    resource = {
        "name": "nvidia.com/gpu",
        "nominalQuota": nominal,
        **({"borrowingLimit": borrowing} if borrowing is not None else {}),
    }
    groups = [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "h200-a", "resources": [resource]}]}]
    return _obj("ClusterQueue", name, api="kueue.x-k8s.io/v1beta2", spec={"resourceGroups": groups})


def test_a_queue_is_explained_by_the_plan_or_listed() -> None:
    assert _k8s([_queue("research", 768, 256)], [_queue("research", 512, 512)], (_plan(), _plan(512))) == []
    assert _k8s([_queue("research", 768, 256)], [_queue("research", 3072, 256)], (_plan(), _plan())) == [
        "ClusterQueue.kueue.x-k8s.io research quota h200-a/nvidia.com/gpu nominal 768 -> 3,072 (the fleet plan: 768)"
    ]
    # The plan moves, the queue does not: the quota table would show what Argo CD never applies.
    assert _k8s([_queue("research", 768, 256)], [_queue("research", 768, 512)], (_plan(), _plan(512))) == [
        "ClusterQueue.kueue.x-k8s.io research quota h200-a/nvidia.com/gpu nominal 768 -> 768 (the fleet plan: 512)"
    ]
    assert _k8s([_queue("research", 768, 256)], [_queue("research", 768, 256)], (_plan(), _plan(512))) == [
        "ClusterQueue.kueue.x-k8s.io research quota h200-a/nvidia.com/gpu nominal 768 -> 768 (the fleet plan: 512); "
        "quota h200-a/nvidia.com/gpu borrowing limit 256 -> 256 (the fleet plan: 512)"
    ]
    # Without the plan's word, or with a forged one, nothing is explained.
    forged = _plan()
    forged["regions"][0]["kueue"]["teams"]["research"]["nominal"]["h200-a"]["nvidia.com/gpu"] = "3072"
    for plan in (None, {"regions": [{"cluster": "c", "name": "r"}]}, forged):
        assert _k8s([_queue("research", 768, 256)], [_queue("research", 3072, 256)], (plan, plan)) != []
    # A plan that says nothing (a producer from before these fields) leaves an unchanged queue alone.
    assert _k8s([_queue("research", 768, 256)], [_queue("research", 768, 256)], (_plan(), None)) == []


def test_a_queue_the_plan_does_not_name_borrows_within_the_cohort() -> None:
    plan = _plan(cohort=512)  # lendable: 512 + research's 768
    assert _k8s([_queue("sweep", 0, 768)], [_queue("sweep", 0, 1280)], (plan, plan)) == []
    assert _k8s([_queue("sweep", 0, 768)], [_queue("sweep", 8, 5000)], (plan, plan)) == [
        "ClusterQueue.kueue.x-k8s.io sweep quota h200-a/nvidia.com/gpu nominal 0 -> 8 (the fleet plan gives it "
        "nothing of its own); quota h200-a/nvidia.com/gpu borrowing limit 768 -> 5,000 (more than the cohort can "
        "lend there, 1,280)"
    ]


def test_resource_quotas_follow_the_plans_ceiling_and_the_regions_nodes() -> None:
    def quota(namespace: str, **hard: Any) -> Obj:
        return _obj("ResourceQuota", "q", namespace, spec={"hard": hard})

    team = quota("team-research", **{"requests.nvidia.com/gpu": "1024"})
    assert _k8s([team], [quota("team-research", **{"requests.nvidia.com/gpu": "4096"})], (_plan(), _plan())) == [
        "ResourceQuota team-research/q hard requests.nvidia.com/gpu 1,024 -> 4,096 (the fleet plan: 1,024)"
    ]
    pods = quota("warden", pods="462")
    grown = (_plan(), _plan(nodes=454))
    assert _k8s([pods], [quota("warden", pods="526")], grown) == []
    assert _k8s([pods], [quota("warden", pods="9999")], grown) == [
        "ResourceQuota warden/q hard pods 462 -> 9,999 (the region's nodes change by +64)"
    ]


def test_a_team_namespaces_object_counts_follow_the_plan() -> None:
    # Issue 39: team namespaces count pods, Services, Events...; the plan's `objects` (fleet.objectquota) says
    # what each should be, so a count that moves with the fleet is explained and a forged one is a finding.
    def quota(**hard: Any) -> Obj:
        return _obj("ResourceQuota", "team-limits", "team-research", spec={"hard": hard})

    def plan(pods: int, services: int, nodes: int = 390) -> dict[str, Any]:
        found = _plan(nodes=nodes)
        found["regions"][0]["objects"] = {"research": {"pods": pods, "services": services}}
        return found

    old = quota(pods="10240", services="1279")
    # A pool grown by 64 nodes: research's pods grow by 2 x 512 GPUs, not by 64; the plan says so.
    grown = (plan(10240, 1279), plan(11264, 1279, nodes=454))
    assert _k8s([old], [quota(pods="11264", services="1279")], grown) == []
    assert _k8s([old], [quota(pods="11264", services="4000")], grown) == [
        "ResourceQuota team-research/team-limits hard services 1,279 -> 4,000 (the fleet plan: 1,279)"
    ]
    # A plan from before object counts (no `objects`): pods by the nodes' rule, any other count listed.
    older = (_plan(), _plan(nodes=454))
    assert _k8s([old], [quota(pods="11264", services="1279")], older) == [
        "ResourceQuota team-research/team-limits hard pods 10,240 -> 11,264 (the region's nodes change by +64)"
    ]


def test_a_priority_the_plan_does_not_name_stays_below_every_one_it_does() -> None:
    def priority(name: str, value: int) -> Obj:
        return _obj("WorkloadPriorityClass", name, api="kueue.x-k8s.io/v1beta2", value=value)

    plans = (_plan(), _plan())
    assert _k8s([priority("sweep", 0)], [priority("sweep", 900)], plans) == []
    assert _k8s([priority("sweep", 0)], [priority("sweep", 1000)], plans) == [
        "WorkloadPriorityClass.kueue.x-k8s.io sweep value 0 -> 1,000 (not below standard (1,000), the fleet plan's "
        "lowest: it can preempt team workloads)"
    ]
    assert _k8s([priority("standard", 1000)], [priority("standard", 5000)], plans) == [
        "WorkloadPriorityClass.kueue.x-k8s.io standard value 1,000 -> 5,000 (the fleet plan: 1,000)"
    ]


# --- The comment ----------------------------------------------------------------------------------


def test_thousands_of_findings_still_fit_a_comment() -> None:
    findings = [Finding(f"cluster-{i}", f"ConfigMap x/y{i} data.k: {'v' * 500} -> {'w' * 500}") for i in range(3000)]
    r = Review("main (abc)", "HEAD (def)", [], [], [], [], findings=findings)
    comment = summary(r, "https://ci.example/run/1")
    assert len(comment) < COMMENT_LIMIT
    assert "more in [the full report](https://ci.example/run/1)" in comment
    assert "**Outcome: a code owner must approve** (exit 4; labels: security)" in comment
