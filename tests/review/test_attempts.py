"""Issue 26's attempts to get a change past the plan review, each on a throwaway commit of a copy of this
repository: what Terraform will do, versions, hand-written objects, the shared contract, a huge change.

The two attempts on the deciding code itself run through the workflow's own steps (test_workflow.py); these
change only what HEAD's code plans, so the review is called as the deciding side calls it, with HEAD planned
by its own scripts/plan_side.py in a process of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from fleet.gitops.validate import crd_roots
from review.report import COMMENT_LIMIT, summary
from review.review import Review, review
from tests.conftest import REPO
from tests.review.conftest import KUBECTL, Sandbox, commit, regenerate, replace_once, reset

pytestmark = pytest.mark.scenario  # each test plans both sides of a change in the review's sandbox

CLUSTERS = ("meridian-europe-west1", "meridian-us-central1", "meridian-us-east4")


Edit = tuple[str, str, str]  # file, old text (found once), new text


def change_files(
    sandbox: Sandbox, edits: list[Edit], fleet_edit: tuple[str, str] | None = None, generate: bool = False
) -> Review:
    """HEAD = BASE with `edits` and, when given, fleet.yaml edited and regenerated. `generate`: regenerate with
    the checkout's own code (edits to the generator), as its author's `make generate` does."""
    repo, base, cache = sandbox
    reset(repo, base)
    for path, old, new in edits:
        file = repo / path
        file.write_text(replace_once(old, new)(file.read_text()))
    if fleet_edit is not None:
        regenerate(repo, replace_once(*fleet_edit))
    if generate:  # where this checkout finds the pinned CRDs, as the review's producer does (snapshot.produce)
        env = {**os.environ, "MERIDIAN_CRDS": os.pathsep.join(map(str, crd_roots(REPO)))}
        own = [sys.executable, "scripts/run_checkout.py", "--module", "fleet.cli:main", "meridian", "generate"]
        subprocess.run([*own, "--fleet", "fleet.yaml", "--root", "."], cwd=repo, env=env, check=True)
    commit(repo)
    return review(repo, base, kubectl=KUBECTL, cache=cache)


def lost_gpus(lines: list[str]) -> int:
    return sum(int(m[1].replace(",", "")) for line in lines if (m := re.search(r"\(-([\d,]+) H200", line)))


def test_node_counts_changed_in_infra_code_are_destructive(sandbox: Sandbox) -> None:
    # fleet.yaml untouched: 384 -> 1, 256 -> 0, 128 -> 0 nodes in the pools' code. Capacity used to come from
    # fleet.yaml (+0) and the pools were a plain "update".
    r = change_files(
        sandbox,
        [
            (
                "infra/meridian_infra/gpu_pools.py",
                "node_count=None if flex else pool.nodes,",
                "node_count=None if flex else {384: 1, 256: 0, 128: 0}[pool.nodes],",
            )
        ],
    )
    assert lost_gpus(r.destructive) == 9_200  # (383 * 2 + 256 + 128) nodes of 8 H200
    assert "us-east4: node pool h200-a in us-east4-b: 384 nodes, 3,072 H200 -> 1 node, 8 H200 (-3,064 H200)" in (
        r.destructive
    )
    assert {(d.name, d.before, d.after) for d in r.regions if d.before != d.after} == {
        ("us-central1", 4096, 1032),
        ("us-east4", 3072, 8),
        ("europe-west1", 3072, 0),
    }
    assert (r.exit_code, r.labels) == (3, ["destructive"])


def test_moving_a_pool_to_another_zone_is_destructive(sandbox: Sandbox) -> None:
    r = change_files(
        sandbox,
        [
            (
                "infra/meridian_infra/gpu_pools.py",
                "node_locations=[pool.zone],",
                'node_locations=[pool.zone[:-1] + "c"],',
            )
        ],
    )
    assert "us-east4: node pool h200-a moves from us-east4-b to us-east4-c: 384 nodes, 3,072 H200 -> " in "\n".join(
        r.destructive
    )
    assert r.exit_code == 3


def test_a_kubernetes_version_change_is_shown_and_needs_an_owner(sandbox: Sandbox) -> None:
    # It used to read "No change in any stack": the version moves only a data source's version_prefix.
    r = change_files(sandbox, [], ('  kubernetes: "1.35"\n', '  kubernetes: "1.36"\n'))
    control = [v for v in r.versions if v.what == "control plane"]
    assert [(v.where, v.before, v.after) for v in control] == [(CLUSTERS, "1.35", "1.36")]
    assert r.destructive == []
    assert (r.exit_code, r.labels) == (4, ["upgrade"])
    assert "control plane of meridian-europe-west1, meridian-us-central1, meridian-us-east4: 1.35 -> 1.36" in summary(r)


def test_a_privileged_hand_written_daemonset_is_flagged_in_every_cluster(sandbox: Sandbox) -> None:
    daemonset = "kustomize/base/image-prepull/daemonset.yaml"
    r = change_files(
        sandbox,
        [
            (
                daemonset,
                "          securityContext:\n            allowPrivilegeEscalation: false\n",
                "          volumeMounts: [{name: host, mountPath: /host}]\n"
                "          securityContext:\n            privileged: true\n            allowPrivilegeEscalation: false\n",
            ),
            (
                daemonset,
                "      terminationGracePeriodSeconds: 1\n",
                "      terminationGracePeriodSeconds: 1\n      volumes: [{name: host, hostPath: {path: /}}]\n",
            ),
        ],
    )
    assert {f.scope for f in r.findings if "trainer-image-prepull" in f.what} == set(CLUSTERS)
    # The same change in every cluster: one line in the comment, naming them.
    assert r.security == [
        f"{', '.join(CLUSTERS)}: DaemonSet.apps meridian-images/trainer-image-prepull container trainer becomes "
        "privileged; mounts host path / read-write"
    ]
    assert (r.exit_code, r.labels) == (4, ["security"])


def test_the_lighthouse_port_in_the_contract_opens_a_firewall_port(sandbox: Sandbox) -> None:
    # platform/contract was outside the workflow's paths: now every pull request is reviewed, and the
    # firewall rule it widens is a security finding. The port is also in each team's `run-across-regions`
    # NetworkPolicy, so the author regenerates the tree too (a stale tree is refused before any finding).
    r = change_files(
        sandbox,
        [("platform/contract/src/contract/names.py", "LIGHTHOUSE_PORT = 29510", "LIGHTHOUSE_PORT = 22")],
        generate=True,
    )
    assert "platform/contract/src/contract/names.py" in r.changed
    assert {f.scope for f in r.findings if "tcp:22" in f.what} >= {"us-central1", "us-east4", "europe-west1"}
    # ... and so is each team's NetworkPolicy that now admits the port from the other regions' pods.
    widened = [line for line in r.security if "run-across-regions now admits" in line and "on TCP 22" in line]
    assert len(widened) == 3 * 3  # three teams in each of three clusters
    assert r.exit_code == 4


TEAM = """  - name: team{n:02d}
    group: team{n:02d}@meridian.example.com
    priority: standard
    quota: {{us-central1: 0, us-east4: 0, europe-west1: 0}}
"""


def test_a_huge_change_still_fits_a_comment_with_its_destructive_lines(sandbox: Sandbox) -> None:
    teams = "".join(TEAM.format(n=n) for n in range(40))
    repo, base, cache = sandbox
    reset(repo, base)
    regenerate(repo, lambda text: replace_once("      - name: h200-flex\n", "      - name: h200-flex2\n")(text) + teams)
    commit(repo, "40 teams and a pool rename")
    r = review(repo, base, kubectl=KUBECTL, cache=cache)
    comment = summary(r, "https://ci.example/run/1")
    assert len(comment) < COMMENT_LIMIT
    # Each new team's namespace is one security line (its role bindings and policies are in the full report).
    assert sum(line.startswith("new namespace team") for line in r.security) == 40
    assert "us-central1: deletes node pool h200-flex in us-central1-b: 128 nodes, 1,024 H200" in comment
    assert comment.index("### Destructive") < comment.index("### Changes per region and cluster")
    assert "[the full report](https://ci.example/run/1)" in comment
    assert r.exit_code == 3


def test_the_summary_folds_what_does_not_fit(sandbox: Sandbox) -> None:
    # A budget far below the real one: every section still starts, and says how much the full report adds.
    r = change_files(sandbox, [], ('  kubernetes: "1.35"\n', '  kubernetes: "1.36"\n'))
    small = summary(r, budget=900)
    assert len(small) < 1_400
    assert "more in the full report" in small
    assert small.index("**Outcome: a code owner must approve** (exit 4; labels: upgrade)") < small.index("### ")
