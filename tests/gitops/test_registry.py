"""The registry as each cluster gets it: the ConfigMap holds generated/ byte for byte, small enough to apply."""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from contract import registry
from contract.problem import Invalid
from fleet.gitops import argocd
from fleet.gitops.check import ClusterTree
from fleet.gitops.registry import gzip_bytes
from fleet.gitops.schemas import KINDS
from fleet.gitops.validate import Finding
from fleet.load import load
from fleet.model import Fleet
from fleet.registry import registry_of
from tests.conftest import REPO, SHIPPED

Trees = dict[str, tuple[ClusterTree, list[Finding]]]
GENERATED = REPO / registry.GENERATED_DIR
# A ConfigMap holds at most 1 MiB; half of it leaves room for more kinds, regions and pools.
SIZE_BUDGET = 512 * 1024


def _configmap(tree: ClusterTree) -> dict[str, Any]:
    found = [
        o
        for o in tree.apps["registry"]
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == registry.REGISTRY_CONFIGMAP
    ]
    assert len(found) == 1
    assert found[0]["metadata"]["namespace"] == registry.REGISTRY_NAMESPACE
    return found[0]


def test_every_cluster_holds_the_generated_registry(trees: Trees) -> None:
    committed = (GENERATED / registry.FILE).read_text(encoding="utf-8")
    expected = registry_of(load(SHIPPED))
    assert registry.loads(committed, str(GENERATED / registry.FILE)) == expected
    for region, (tree, findings) in trees.items():
        assert findings == [], region
        text = _configmap(tree)["data"][registry.FILE]
        assert text == committed, region
        assert registry.loads(text, f"{region}: ConfigMap {registry.REGISTRY_CONFIGMAP}") == expected


def test_every_cluster_holds_the_generated_schemas_compressed(trees: Trees) -> None:
    files = {registry.schema_file(*kind) for kind in KINDS}
    assert {p.name for p in (GENERATED / registry.SCHEMAS_DIR).iterdir()} == files
    for region, (tree, _) in trees.items():
        binary = _configmap(tree)["binaryData"]
        assert set(binary) == {f"{name}{registry.GZIP}" for name in files}, region
        for name in files:
            text = gzip.decompress(base64.b64decode(binary[f"{name}{registry.GZIP}"], validate=True)).decode()
            assert text == (GENERATED / registry.SCHEMAS_DIR / name).read_text(encoding="utf-8"), (region, name)
            json.loads(text)


def test_the_configmap_stays_far_below_the_limits(trees: Trees) -> None:
    raw = sum(len(p.read_bytes()) for p in (GENERATED / registry.SCHEMAS_DIR).iterdir())
    assert raw > 256 * 1024  # uncompressed, the schemas alone would not fit a client-side apply's annotation
    for region, (tree, _) in trees.items():
        size = len(json.dumps(_configmap(tree), separators=(",", ":")))
        assert size < SIZE_BUDGET, f"{region}: the registry ConfigMap is {size:,} bytes"


def test_the_registry_application_applies_server_side(fleet: Fleet) -> None:
    for region in fleet.regions:
        apps = {a.name: a for a in argocd.cluster_apps(fleet, region)}
        app = apps["registry"]
        assert app.project == "platform"  # it binds a Role: only the platform project may grant rights
        assert app.namespace == registry.REGISTRY_NAMESPACE
        assert "ServerSideApply=true" in app.sync_options  # no last-applied annotation copies the ConfigMap
        assert app.source["path"] == argocd.overlay_path(fleet, region, "registry")


def test_compression_is_the_same_everywhere() -> None:
    text = '{"schema": "x"}\n' * 1000
    data = gzip_bytes(text)
    assert data[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # no time, no OS: the bytes depend on the text
    assert gzip.decompress(data).decode() == text
    assert zlib.decompress(data, 16 + zlib.MAX_WBITS).decode() == text  # what a reader without gzip's framing does
    assert gzip_bytes(text) == data
    assert len(data) < len(text) // 10


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace('"schema": "meridian.registry/v1"', '"schema": "meridian.registry/v0"'), "schema"),
        (lambda t: t.replace('"project"', '"projekt"', 1), "projekt"),
        (lambda t: t[: len(t) // 2], "not JSON"),
    ],
)
def test_a_tampered_registry_is_one_line(edit: Callable[[str], str], message: str) -> None:
    text = edit((GENERATED / registry.FILE).read_text(encoding="utf-8"))
    with pytest.raises(Invalid) as raised:
        registry.loads(text, "ConfigMap meridian-registry")
    assert len(raised.value.lines) == 1
    assert message in raised.value.lines[0]
