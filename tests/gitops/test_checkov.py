"""checkov's Kubernetes checks over every cluster's built objects: no failure without a written reason."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.gitops.check import ClusterTree
from fleet.gitops.validate import Finding
from tests.conftest import REPO

CHECKOV = Path(sys.executable).parent / "checkov"
CONFIG = REPO / "kustomize/checkov.yaml"
SKIP = re.compile(r"checkov\.io/skip\d+")


def _scan(folder: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(CHECKOV), "--config-file", str(CONFIG), "-d", str(folder), "-o", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert result.stdout, result.stderr[-2000:]
    reports = json.loads(result.stdout)
    return reports if isinstance(reports, list) else [reports]


@pytest.mark.scenario
def test_checkov_finds_nothing_unexplained_in_any_cluster(
    trees: dict[str, tuple[ClusterTree, list[Finding]]], tmp_path: Path
) -> None:
    for region, (tree, _) in trees.items():
        objects = [o for _, o in tree.objects()]
        (tmp_path / f"{region}.yaml").write_text(yaml.safe_dump_all(objects, sort_keys=False))
    reports = _scan(tmp_path)
    failed = [
        f"{f['check_id']} {f['resource']} ({Path(f['file_path']).name})"
        for r in reports
        for f in r["results"]["failed_checks"]
    ]
    assert failed == []
    assert sum(r["summary"]["passed"] for r in reports) > 300  # it really scanned the objects
    assert sum(r["summary"]["resource_count"] for r in reports) >= 3 * 60


def test_every_skip_says_why() -> None:
    for path in sorted((REPO / "kustomize/base").rglob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            annotations = (document or {}).get("metadata", {}).get("annotations", {})
            for key, value in annotations.items():
                if SKIP.fullmatch(key):
                    check, _, reason = value.partition("=")
                    assert re.fullmatch(r"CKV2?_K8S_\d+", check), (path, value)
                    assert len(reason.split()) >= 3, (path, value)  # a reason, not a shrug
    for line in CONFIG.read_text().splitlines():
        if line.strip().startswith("- CKV"):
            _, _, reason = line.partition("#")
            assert len(reason.split()) >= 5, line


@pytest.mark.scenario
def test_checkov_would_catch_a_privileged_pod(tmp_path: Path) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x", "namespace": "team-research"},
        "spec": {"containers": [{"name": "x", "image": "x:1.0", "securityContext": {"privileged": True}}]},
    }
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    failed = {f["check_id"] for r in _scan(tmp_path) for f in r["results"]["failed_checks"]}
    assert "CKV_K8S_16" in failed
