"""The commit table Argo CD's upstream sources are pinned by (fleet.upstream) matches fleet.yaml's versions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contract.problem import Invalid
from fleet import upstream
from fleet.gitops.validate import crd_roots
from fleet.load import load_text
from fleet.model import Fleet
from tests.conftest import REPO, SHIPPED

_ROW = re.compile(r"^\| `[^`]+` \| (https://github\.com/\S+) \| `([^`]+)` \| `([0-9a-f]{40})` \|", re.MULTILINE)


def test_the_table_holds_a_full_commit_for_exactly_the_pinned_versions(fleet: Fleet) -> None:
    # One entry per release fleet.yaml pins: no stale version a later bump could silently fall back to.
    for release in upstream.UPSTREAMS:
        assert set(release.commits) == {upstream.version(release, fleet)}, release.name
        assert all(re.fullmatch(r"[0-9a-f]{40}", c) for c in release.commits.values()), release.name


def _shared_crds_readme() -> Path:
    found = next((root / "README.md" for root in crd_roots(REPO) if (root / "README.md").is_file()), None)
    if found is None:
        pytest.skip("no ../shared/crds/README.md here: its tag -> commit table is the offline record compared with")
    return found


def test_each_commit_is_the_one_its_tag_names_where_the_pinned_crds_were_copied_from(fleet: Fleet) -> None:
    # ../shared/crds holds the CRDs the tests validate against, each copied from the tag with the commit it
    # names written down: the content Argo CD installs must be the content the tests checked.
    recorded = {(repo, tag): commit for repo, tag, commit in _ROW.findall(_shared_crds_readme().read_text())}
    for release in upstream.UPSTREAMS:
        version = upstream.version(release, fleet)
        key = (release.repo.removesuffix(".git"), release.tag(version))
        assert recorded.get(key) == release.commits[version], key


def test_a_version_without_a_commit_is_refused_in_one_line() -> None:
    text = SHIPPED.read_text().replace("  kueue: 0.19.2\n", "  kueue: 0.20.0\n")
    with pytest.raises(Invalid) as caught:
        load_text(text)
    (line,) = caught.value.lines
    assert re.match(
        r"fleet\.yaml:\d+: versions\.kueue: Kueue 0\.20\.0: the commit its tag v0\.20\.0 names is not in ", line
    )
    assert "fleet.upstream.KUEUE; add it as `git ls-remote --tags https://github.com/kubernetes-sigs/kueue.git" in line
