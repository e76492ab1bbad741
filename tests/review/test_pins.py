"""Issue 36's attempts on what is fetched and which image runs, on the shared sandbox, and the review's image rules.

- a remote resource in kustomize/base/warden/kustomization.yaml, reviewed as what the URL served that day;
- an upstream chart by version, which can be re-published under the same number;
- the images workflow's digest-pin pull request, reviewed exit 0 while the code in the new image went unseen.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.pins import pin_image
from review import review as review_module
from review.images import changed_paths_note, dockerfile_sources, registries
from review.review import changed_files, review
from review.side import FORMAT
from review.snapshot import ReviewError, Snapshot
from review.versions import VersionChange
from tests.conftest import REPO
from tests.review.conftest import KUBECTL, Sandbox, commit, git, reset, review_cli
from tests.review.test_attempts import change_files

REGISTRY = "us-docker.pkg.dev/meridian-train-prod/meridian"
WARDEN = f"{REGISTRY}/warden"
DIGEST = "sha256:" + "5e" * 32  # a test's digest: no registry is reachable here
WARDEN_CODE = "platform/warden/src/warden/__init__.py"


def _forged_head_plan(sandbox: Sandbox, out: Path) -> Path:
    """HEAD's plan document as a lying producer writes it: BASE's plan and stacks, the tree "current".

    The deciding side must refuse on its own what HEAD's code could hide (in GitHub HEAD's document
    comes from the pull request's own job)."""
    repo, base, cache = sandbox
    if base not in cache:
        reset(repo, base)
        review(repo, base, kubectl=KUBECTL, cache=cache)  # plans BASE once, for every scenario
    before, _ = cache[base]
    document = {
        "format": FORMAT,
        "plan": before.plan,
        "generate_check": {"returncode": 0, "stderr": ""},
        "stacks": before.stacks,
    }
    out.write_text(json.dumps(document))
    return out


@pytest.mark.scenario
def test_a_remote_resource_in_wardens_base_is_refused_in_one_line_and_never_fetched(
    sandbox: Sandbox, served: tuple[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, asked = served
    head_plan = _forged_head_plan(sandbox, tmp_path / "head-plan.json")
    repo, base, _ = sandbox
    reset(repo, base)
    base_file = repo / "kustomize/base/warden/kustomization.yaml"
    base_file.write_text(
        base_file.read_text().replace("  - networkpolicy.yaml\n", f"  - networkpolicy.yaml\n  - {url}\n")
    )
    commit(repo, "warden: one more resource")
    assert review_cli(repo, base, tmp_path / "review.md", "--head-plan", str(head_plan)) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: HEAD: kustomize/base/warden/kustomization.yaml: resources[7]: {url} is fetched when kustomize "
        "builds, so what is reviewed is not what Argo CD applies later; commit what it names into the repository "
        "and list its relative path"
    ]
    assert asked == []  # refused before anything was built


@pytest.mark.scenario
def test_a_chart_by_version_is_refused_in_one_line(sandbox: Sandbox, tmp_path: Path) -> None:
    # The generator's old source, written back into the committed tree: a chart version can be re-published.
    head_plan = _forged_head_plan(sandbox, tmp_path / "head-plan.json")
    repo, base, cache = sandbox
    reset(repo, base)
    for file in sorted(repo.glob("argocd/clusters/*/apps/applications.yaml")):
        apps = list(yaml.safe_load_all(file.read_text()))
        for app in apps:
            if app["metadata"]["name"] == "kueue":
                source = app["spec"]["source"]
                source.pop("path", None)
                source |= {"repoURL": "registry.k8s.io/kueue/charts", "chart": "kueue", "targetRevision": "0.19.2"}
        file.write_text(yaml.safe_dump_all(apps, sort_keys=False))
    commit(repo, "kueue from its chart registry")
    with pytest.raises(ReviewError) as caught:
        review(repo, base, kubectl=KUBECTL, cache=cache, head_plan=head_plan)
    assert str(caught.value) == (
        "HEAD: argocd/clusters/meridian-europe-west1/apps: Application kueue: chart kueue at 0.19.2 from "
        "registry.k8s.io/kueue/charts can be re-published under the same version; render it from git at a full "
        "commit SHA or pin an OCI digest (sha256:...)"
    )


@pytest.mark.scenario
def test_the_digest_pin_pull_request_needs_an_owner_and_names_what_changed(sandbox: Sandbox) -> None:
    # The images workflow's pull request: `meridian pin-image` and `make generate` after a change to Warden's
    # code merged. The new digest runs that code in every cluster.
    spec = (REPO / "fleet.yaml").read_text()
    old = f"  warden_image: {WARDEN}:0.1.0\n"
    pinned = pin_image(spec, "warden_image", f"{WARDEN}:0.1.0@{DIGEST}")
    new = next(line + "\n" for line in pinned.splitlines() if line.startswith("  warden_image:"))
    r = change_files(
        sandbox,
        [(WARDEN_CODE, '"""Warden:', '"""Warden (acting on every node):')],
        (old, new),
    )
    (line,) = [u for u in r.upgrades if u.startswith("image warden ")]
    assert line.startswith(
        f"image warden of meridian-europe-west1, meridian-us-central1, meridian-us-east4: 0.1.0 -> 0.1.0@{DIGEST} "
        f"({WARDEN}; a new digest: new content; changed in platform/contract, "
        "platform/telemetry, platform/warden, requirements/warden.lock since "
    )
    assert line.endswith(f", which set the previous pin: {WARDEN_CODE})")
    assert "upgrade" in r.labels
    assert r.exit_code == 4
    # The trainer is still pinned by version: accepted while the registry's tags are immutable, and said so.
    assert any(n.startswith(f"not yet pinned by digest: {REGISTRY}/trainer:0.1.0;") for n in r.notes)


# The rules underneath, on small inputs


def test_what_an_image_is_built_from_is_read_from_its_dockerfile() -> None:
    text = (REPO / "platform/warden/Dockerfile").read_text()
    assert sorted(set(dockerfile_sources(text))) == [
        "platform/contract",
        "platform/telemetry",
        "platform/warden",
        "requirements/warden.lock",
    ]  # not `COPY --from=build`
    assert dockerfile_sources('COPY --chown=1:1 ["./a/", "b", "/dst/"]\nADD . /src\nRUN COPY x y\n') == ["a", "b", ""]


def test_the_fleet_registry_and_its_immutable_tags_come_from_the_stacks(stacks: dict[str, Any]) -> None:
    assert registries(stacks) == {REGISTRY: True}
    mutable = json.loads(json.dumps(stacks))
    del mutable["global"]["resource"]["google_artifact_registry_repository"]["registry"]["docker_config"]
    assert registries(mutable) == {REGISTRY: False}


def _deployment(image: str) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "warden", "image": image}]}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "warden"},
        "spec": {"template": template},
    }


def test_a_version_only_image_is_refused_when_the_registry_lets_tags_move(stacks: dict[str, Any]) -> None:
    clusters = {"c": [_deployment(f"{WARDEN}:0.1.0")]}
    before = Snapshot(None, stacks=stacks, clusters=clusters)
    known, notes = review_module.image_pins_accepted(before, Snapshot(None, stacks=stacks, clusters=clusters))
    assert known == {REGISTRY}
    assert notes == [
        f"not yet pinned by digest: {WARDEN}:0.1.0; accepted while {REGISTRY} keeps its tags immutable, until the "
        "images workflow proposes the digests"
    ]
    mutable = json.loads(json.dumps(stacks))
    mutable["global"]["resource"]["google_artifact_registry_repository"]["registry"].pop("docker_config")
    with pytest.raises(ReviewError) as caught:
        review_module.image_pins_accepted(before, Snapshot(None, stacks=mutable, clusters=clusters))
    assert str(caught.value).startswith(f"HEAD: image {WARDEN}:0.1.0 is pinned by version only and registry ")
    pinned = {"c": [_deployment(f"{WARDEN}:0.1.0@{DIGEST}")]}
    assert review_module.image_pins_accepted(before, Snapshot(None, stacks=mutable, clusters=pinned))[1] == []


def test_changed_paths_are_counted_from_the_commit_that_set_the_previous_pin(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()

    def run(*args: str) -> str:
        return git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", *args)

    def write(path: str, text: str) -> None:
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)

    run("init", "-q", "-b", "main")
    write("platform/warden/Dockerfile", "FROM x AS build\nCOPY platform/contract platform/contract\n")
    write("platform/warden/a.py", "a\n")
    write("platform/contract/c.py", "c\n")
    write("fleet.yaml", f"warden_image: {WARDEN}:0.1.0@sha256:{'0' * 64}\n")
    run("add", "-A")
    run("commit", "-qm", "before the pin")
    write("fleet.yaml", f"warden_image: {WARDEN}:0.1.0@{DIGEST}\n")
    run("commit", "-qam", "pin")
    setter = run("rev-parse", "HEAD")
    write("docs.md", "unrelated\n")
    run("add", "-A")
    run("commit", "-qm", "docs")
    write("platform/warden/a.py", "b\n")
    write("platform/contract/c.py", "d\n")
    run("commit", "-qam", "code")
    base = run("rev-parse", "HEAD")
    write("fleet.yaml", f"warden_image: {WARDEN}:0.1.0@sha256:{'1' * 64}\n")  # HEAD: the next pin, uncommitted

    change = VersionChange("image warden", ("c",), None, None, repository=WARDEN)
    note = changed_paths_note(
        change,
        [f"0.1.0@{DIGEST}"],
        base,
        run,
        lambda since: changed_files(repo, since),
        (repo / "platform/warden/Dockerfile").read_text(),
    )
    assert note == (
        f"changed in platform/contract, platform/warden since {setter[:10]}, which set the previous pin: "
        "platform/contract/c.py, platform/warden/a.py"
    )
    unknown = changed_paths_note(change, ["9.9.9"], base, run, lambda s: [], None)
    assert (
        unknown == f"the commit that set {WARDEN}:9.9.9 is not in fleet.yaml's history: its changes since are unknown"
    )


def test_the_images_workflow_never_moves_a_tag() -> None:
    workflow = yaml.safe_load((REPO / ".github/workflows/images.yaml").read_text())
    run = next(s["run"] for s in workflow["jobs"]["build"]["steps"] if s.get("id") == "push")
    build = run.split("docker buildx build", 1)[1].split("--metadata-file", 1)[0]
    assert "push-by-digest=true" in build
    assert "--tag" not in build  # pushed without a name
    assert "--push" not in build
    # The version tag is created only where none exists (the registry refuses to move one anyway).
    assert 'if ! docker buildx imagetools inspect "$IMAGE"' in run
    assert subprocess.run(["bash", "-n"], input=run, text=True, check=False).returncode == 0
