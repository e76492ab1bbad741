"""Scenario tests on throwaway commits: a copy of this repository, one change per scenario."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from contract.registry import REGISTRY_CONFIGMAP, REGISTRY_NAMESPACE
from fleet.gitops import admission
from review import cli as review_cli_module
from review.report import markdown, summary
from review.review import review
from tests.review.conftest import KUBECTL, Sandbox, at_base, git, replace_once, reset, review_cli, scenario

pytestmark = pytest.mark.scenario  # each test plans both sides of a change in the review's sandbox

# The registry ConfigMap in every cluster holds the whole fleet's registry (fleet.gitops.registry), so a
# change to any region's pools or any team's quota changes it in every cluster.
REGISTRY = ("", "ConfigMap", REGISTRY_NAMESPACE, REGISTRY_CONFIGMAP)


def test_growing_a_pool_is_not_destructive(sandbox: Sandbox) -> None:
    r = scenario(
        sandbox,
        replace_once("        zone: us-east4-b\n        nodes: 384", "        zone: us-east4-b\n        nodes: 448"),
    )
    assert r.destructive == []
    assert [(d.name, d.before, d.after) for d in r.regions if d.before != d.after] == [("us-east4", 3072, 3584)]
    ((stack, resources),) = [(d.stack, d.resources) for d in r.stacks]
    assert stack == "us-east4"
    assert [(x.action, x.address, [(c.path, c.before, c.after) for c in x.changes]) for x in resources] == [
        ("update", "google_container_node_pool.pool_h200-a", [("node_count", 384, 448)])
    ]
    assert r.access == []  # nobody new can reach anything
    # No team's quota grew (issue 31): the 512 new GPUs are the Kueue cohort's own, lent to every team, and the
    # review says so per region and pool, in the comment too.
    assert [(d.name, d.before, d.after) for d in r.unallocated] == [("us-east4 h200-a", 0, 512)]
    assert "| us-east4 h200-a | 0 | 512 | +512 |" in summary(r)
    assert "Unallocated GPUs (Kueue lends them through the cohort; no team is guaranteed them)" in summary(r)
    east = next(c for c in r.clusters if c.cluster == "meridian-us-east4")
    assert ("kueue.x-k8s.io", "Cohort", "", "meridian") in [o.key for o in east.objects]
    # Every number Kueue and the namespaces get moves as the fleet plan says (the default deny's quotas.py):
    # nothing for a code owner.
    assert (r.exit_code, r.labels, r.security) == (0, [], [])


def test_changing_a_pools_machine_type_is_destructive(sandbox: Sandbox) -> None:
    edit = replace_once(
        "      - name: h200-flex\n        machine_type: a3-ultragpu-8g\n        zone: us-central1-b",
        "      - name: h200-flex\n        machine_type: a3-megagpu-8g\n        zone: us-central1-c",
    )
    r = scenario(sandbox, edit)
    # One line for the pool, from what Terraform will do: it is recreated elsewhere, with other GPUs.
    assert r.destructive == [
        "us-central1: node pool h200-flex moves from us-central1-b to us-central1-c: "
        "128 nodes, 1,024 H200 -> 128 nodes, 1,024 H100 (-1,024 H200)"
    ]
    pool = next(x for d in r.stacks for x in d.resources if x.address == "google_container_node_pool.pool_h200-flex")
    assert pool.action == "replace"
    assert ("node_config.machine_type", "a3-ultragpu-8g", "a3-megagpu-8g") in [
        (c.path, c.before, c.after) for c in pool.changes
    ]
    assert "**DESTRUCTIVE: replaces node pool h200-flex in us-central1-b: 128 nodes, 1,024 H200**" in markdown(r)
    assert "> **DESTRUCTIVE: 1 change takes capacity or data down**" in markdown(r)
    assert (r.exit_code, r.labels) == (3, ["destructive"])


def test_moving_a_range_is_destructive(sandbox: Sandbox) -> None:
    edit = replace_once("  - name: us-east4\n", "  - name: us-east4\n    network: {nodes: 10.200.0.0/20}\n")
    r = scenario(sandbox, edit)
    assert (
        r.destructive
        == [
            "us-east4: replaces subnetwork meridian-us-east4, and with it the cluster in us-east4: 454 nodes, 3,072 GPUs"  # 384 GPU + 6 system + up to 64 CPU workers
        ]
    )
    subnet = next(x for d in r.stacks for x in d.resources if x.address == "google_compute_subnetwork.subnet")
    assert [(c.path, c.before, c.after) for c in subnet.changes] == [
        ("ip_cidr_range", "10.24.128.0/20", "10.200.0.0/20")
    ]


def test_changing_a_kueue_quota(sandbox: Sandbox) -> None:
    r = scenario(
        sandbox, replace_once("quota: {us-central1: 1024, us-east4: 768,", "quota: {us-central1: 1024, us-east4: 512,")
    )
    assert r.destructive == []
    assert r.stacks == []  # nothing in Terraform
    assert {c.cluster: [o.key for o in c.objects if o.key == REGISTRY] for c in r.clusters} == {
        f"meridian-{region}": [REGISTRY] for region in ("us-central1", "us-east4", "europe-west1")
    }
    ((cluster, objects),) = [
        (c.cluster, [o for o in c.objects if o.key != REGISTRY]) for c in r.clusters if len(c.objects) > 1
    ]
    assert cluster == "meridian-us-east4"
    # The GPU quota moves for research alone; the region's CPU pool is shared by GPU quota,
    # so every team's CPU share follows (fleet.quotaplan).
    # The 256 GPUs research gives up are no team's: the cohort's own quota, lent to every team (issue 31), so
    # every team's ceiling in the region (nominal + borrowing limits, issue 14) stays where it was.
    assert [o.key for o in objects if o.key[1] == "ResourceQuota"] == []
    assert {o.key[3]: o.flags for o in objects} == {
        "research": [
            "Kueue quota of research: cpu/cpu 512 -> 372, cpu/memory 2048Gi -> 1489Gi, h200-a/cpu 21504 -> 14336, "
            "h200-a/memory 283392Gi -> 188928Gi, h200-a/nvidia.com/gpu 768 -> 512"
        ],
        "pretraining": ["Kueue quota of pretraining: cpu/cpu 1365 -> 1490, cpu/memory 5461Gi -> 5958Gi"],
        "evals": ["Kueue quota of evals: cpu/cpu 171 -> 186, cpu/memory 683Gi -> 745Gi"],
        "meridian": [
            "Kueue quota of cohort meridian: h200-a/cpu none -> 7168, h200-a/memory none -> 94464Gi, "
            "h200-a/nvidia.com/gpu none -> 256"
        ],
    }
    assert [(d.name, d.before, d.after) for d in r.unallocated] == [("us-east4 h200-a", 0, 256)]
    assert [(d.name, d.before, d.after) for d in r.teams if d.before != d.after] == [
        ("research", 2560, 2304),
        ("research in us-east4", 768, 512),
    ]
    # The rendered queue says what the plan says.
    assert [(d.name, d.before, d.after) for d in r.queues if d.before != d.after] == [
        ("research in us-east4 (ClusterQueue)", 768, 512)
    ]
    assert (r.exit_code, r.labels, r.security) == (0, [], [])


def test_a_spec_change_without_make_generate_is_refused(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The Kubernetes side is built from the committed tree, which here still has the old quota:
    # without the refusal the report said "No change in any cluster".
    repo, base = at_base(sandbox)
    spec = repo / "fleet.yaml"
    spec.write_text(
        replace_once("quota: {us-central1: 1024, us-east4: 768,", "quota: {us-central1: 1024, us-east4: 512,")(
            spec.read_text()
        )
    )
    git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qam", "quota, not regenerated")
    out = tmp_path / "review.md"
    assert review_cli(repo, base, out) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: HEAD: the committed kustomize/ and argocd/ files are stale against its fleet.yaml (")
    assert "outdated: generated/registry.json" in line
    assert line.endswith("run `make generate` and commit the result")
    assert not out.exists()


def test_each_side_is_synthesized_with_its_own_infra_code(sandbox: Sandbox) -> None:
    # BASE and HEAD each change the same line of infra code, differently: neither this checkout's code nor the
    # environment's has either text, so the diff shows only if each side ran its own (scripts/run_checkout.py).
    repo, base, cache = sandbox
    reset(repo, base)
    code = repo / "infra/meridian_infra/global_stack.py"
    original = code.read_text()
    line = 'description="Meridian images: warden, trainer (pinned by digest in fleet.yaml)"'
    shas = []
    for text in ("as BASE has it", "as HEAD has it"):
        code.write_text(replace_once(line, f'description="{text}"')(original))
        git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qam", text)
        shas.append(git(repo, "rev-parse", "HEAD"))
    r = review(repo, shas[0], kubectl=KUBECTL, cache=cache)
    assert [
        (d.stack, x.action, x.address, [(c.path, c.before, c.after) for c in x.changes])
        for d in r.stacks
        for x in d.resources
    ] == [
        (
            "global",
            "update",
            "google_artifact_registry_repository.registry",
            [("description", "as BASE has it", "as HEAD has it")],
        )
    ]
    assert r.clusters == []


def test_adding_a_region_opens_every_region_to_its_pods(sandbox: Sandbox) -> None:
    region = """  - name: asia-south1
    zones: [asia-south1-a, asia-south1-b, asia-south1-c]
    cluster:
      maintenance_window: {days: [SA, SU], start_utc: "20:00", hours: 8}
    system_pool: {machine_type: n2-standard-32, nodes_per_zone: 2}
    gpu_pools:
      - name: h200-a
        machine_type: a3-ultragpu-8g
        zone: asia-south1-b
        nodes: 64
        capacity: {mode: flex_start}

teams:
"""
    r = scenario(sandbox, replace_once("\nteams:\n", "\n" + region))
    assert r.destructive == []  # widening who may reach the pods is expected, not destructive
    old_regions = ("us-central1", "us-east4", "europe-west1")
    assert sorted(d.stack for d in r.stacks) == sorted([*old_regions, "asia-south1"])
    assert {x.action for d in r.stacks if d.stack == "asia-south1" for x in d.resources} == {"create"}
    # Every other region's cross-region rules admit the new region's pods (infra cross_region.py): the only
    # Terraform change outside the new stack.
    pods = "10.48.0.0/13"  # the planner's fourth region block
    for d in (d for d in r.stacks if d.stack in old_regions):
        assert [(x.action, x.address, [(c.path, c.before, c.after) for c in x.changes]) for x in d.resources] == [
            ("update", f"google_compute_firewall.{rule}", [("source_ranges.2", None, pods)])
            for rule in ("fw_cross_region", "fw_lighthouse")
        ]
    # The review says so per region, naming whose range it is.
    for name in old_regions:
        for rule in ("cross-region", "lighthouse"):
            assert f"{name}: firewall rule meridian-{name}-{rule} now also admits {pods} (asia-south1 pods)" in r.access
    (new_rule,) = [
        line
        for line in r.access
        if line.startswith("asia-south1: new firewall rule meridian-asia-south1-cross-region ")
    ]
    assert new_rule.endswith(
        "allows tcp:29510,29520-29527,29528-29535,29600-29663 from 10.0.0.0/13 (us-central1 pods), 10.16.0.0/13 (us-east4 pods), "
        f"10.32.0.0/13 (europe-west1 pods) to {pods} (asia-south1 pods) on instances of nodes service account"
    )
    assert len(r.access) == 2 * 3 + 6  # two widened per other region; the new region's six rules
    report = markdown(r)
    assert "### Network access (who can reach what)" in report
    assert (
        f"- us-east4: firewall rule meridian-us-east4-cross-region now also admits {pods} (asia-south1 pods)" in report
    )
    new = [c for c in r.clusters if c.cluster == "meridian-asia-south1"]
    assert {o.action for c in new for o in c.objects} == {"added"}
    # The other clusters' registries now list the new region, and their team load balancers (a run's
    # Lighthouse) may admit its pod range: the only changes there.
    # and each team namespace's `run-across-regions` NetworkPolicy admits its pod range too.
    services = ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy", "", admission.SERVICES)
    policies = [
        (("networking.k8s.io", "NetworkPolicy", f"team-{team}", "run-across-regions"), "changed")
        for team in ("pretraining", "research", "evals")
    ]
    # A run across regions keeps one Secret per other region in its home namespace (fleet.objectquota):
    # each team's object-count quota grows with the region.
    quotas = [
        (("", "ResourceQuota", f"team-{team}", "team-limits"), "changed")
        for team in ("pretraining", "research", "evals")
    ]
    assert {c.cluster: sorted((o.key, o.action) for o in c.objects) for c in r.clusters if c not in new} == {
        f"meridian-{region}": sorted([(REGISTRY, "changed"), (services, "changed"), *policies, *quotas])
        for region in ("us-central1", "us-east4", "europe-west1")
    }
    # Those are security findings, the same in every cluster: one line each.
    assert any(f"{pods}" in line and "run-across-regions" in line for line in r.security), r.security
    assert [(d.name, d.before, d.after) for d in r.regions if d.before != d.after] == [("asia-south1", 0, 512)]


def test_cli_exit_codes_and_report(
    sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, base = at_base(sandbox)
    # What this checks is the command line; BASE is planned as every scenario plans it, once per session.
    monkeypatch.setattr(review_cli_module, "review", functools.partial(review, cache=sandbox[2]))
    out = tmp_path / "review.md"
    assert review_cli(repo, base, out) == 0
    assert "No destructive change." in out.read_text()
    assert "no change" in capsys.readouterr().out
    assert review_cli(repo, "no-such-ref", out) == 2
    assert capsys.readouterr().err.startswith("error: git rev-parse --verify no-such-ref^{commit}: ")


def _without_us_east4(text: str) -> str:
    """Remove the middle region and every team's quota in it."""
    start, end = text.index("  - name: us-east4\n"), text.index("  - name: europe-west1\n")
    text = text[:start] + text[end:]
    for quota in ("us-east4: 2048, ", "us-east4: 768, ", "us-east4: 256, "):
        assert text.count(quota) == 1, quota
        text = text.replace(quota, "")
    return text


def _no_reprs(text: str) -> None:
    """No Python repr in what people read: None, True, False, or a quoted repr of a value."""
    for word in ("None", "True", "False", "\\n", '\\"'):
        assert word not in text, word


def test_removing_a_middle_region_names_each_side_and_says_why_ranges_move(sandbox: Sandbox) -> None:
    r = scenario(sandbox, _without_us_east4)
    # BASE's rules name BASE's ranges: 10.16.0.0/13 was us-east4's pods, and is europe-west1's only in HEAD.
    cross = next(line for line in r.access if "meridian-europe-west1-cross-region" in line)
    now, was = cross.split(" (was: ")
    assert "10.16.0.0/13 (europe-west1 pods)" in now
    assert "10.16.0.0/13 (us-east4 pods)" in was
    assert "10.32.0.0/13 (europe-west1 pods)" in was
    assert any("10.16.0.0/13 (us-east4 pods)" in line for line in r.security)
    # Why europe-west1's ranges move, and the pin that keeps them (fleet.model.RegionNetwork's fields).
    (moved,) = r.moved_ranges
    assert moved.startswith("europe-west1: its planned control_plane, gvnic, nodes, pods, services and rdma ranges")
    assert "because us-east4, before it in fleet.yaml, was removed" in moved
    assert (
        "`regions[1].network: {control_plane: 10.40.176.0/28, gvnic: 10.40.160.0/20, nodes: 10.40.128.0/20, " in moved
    )
    assert "### Why address ranges move, and how to keep them" in summary(r)
    # A clause that repeats is said once: europe-west1's ten subnetworks are one line.
    assert sum("and with them the cluster in europe-west1" in line for line in r.destructive) == 1
    assert not any("and with it the cluster in europe-west1" in line for line in r.destructive)
    assert any(
        line.startswith("europe-west1: replaces 10 subnetworks (meridian-europe-west1-gvnic, ")
        for line in r.destructive
    )
    assert any(line.startswith("meridian-us-east4: 7 namespaces (") for line in r.destructive)
    # The checkpoint bucket and the teams' folders in it hold data: destructive, saying what data.
    assert (
        "us-east4: deletes bucket meridian-ckpt-us-east4 and every object in it (gs://meridian-ckpt-us-east4/): "
        "the apply fails while it holds objects"
    ) in r.destructive
    _no_reprs(markdown(r))
    _no_reprs(summary(r))


def test_removing_a_team_flags_its_checkpoints(sandbox: Sandbox) -> None:
    def without_evals(text: str) -> str:
        return text[: text.index("  - name: evals\n")]

    r = scenario(sandbox, without_evals)
    assert r.destructive == [
        *(
            f"{region}: deletes managed folder teams/evals/ of bucket meridian-ckpt-{region}, which holds team evals' "
            f"checkpoints (gs://meridian-ckpt-{region}/teams/evals/): the apply fails while it holds objects; "
            "copy or delete them first, and its access grants go with it"
            for region in ("europe-west1", "us-central1", "us-east4")
        ),
        # One line for the namespace removed in every cluster, not one per cluster.
        "meridian-europe-west1, meridian-us-central1, meridian-us-east4: namespace team-evals is deleted, "
        "and everything in it",
    ]
    assert (r.exit_code, "destructive" in r.labels) == (3, True)
    queue = next(o for c in r.clusters for o in c.objects if o.key[1:] == ("ClusterQueue", "", "evals"))
    assert queue.flags[0].startswith("Kueue quota of evals removed: cpu/cpu ")
    _no_reprs(markdown(r))


def test_the_registry_configmap_diff_is_semantic_and_shown_once(sandbox: Sandbox) -> None:
    r = scenario(
        sandbox,
        replace_once("        zone: us-east4-b\n        nodes: 384", "        zone: us-east4-b\n        nodes: 448"),
    )
    registry = [o for c in r.clusters for o in c.objects if o.key == REGISTRY]
    assert len(registry) == 3
    (changes,) = {tuple(o.changes) for o in registry}  # the same in every cluster
    assert changes[0] == "registry.json: regions[us-east4].pools[h200-a].nodes: 384 -> 448"
    # The teams' object counts in us-east4 follow its GPUs (fleet.objectquota); nothing else moves.
    assert changes[1:]
    assert all(c.startswith("registry.json: teams[") and ".objects.us-east4." in c for c in changes[1:])
    assert all(o.diff == "" for o in registry)  # nothing else in the ConfigMap changed
    report = markdown(r)
    assert report.count("regions[us-east4].pools[h200-a].nodes: 384 -> 448") == 1
    assert (
        report.count("`ConfigMap meridian-registry/meridian-registry`: the same change as in meridian-europe-west1")
        == 2
    )
    _no_reprs(report)
