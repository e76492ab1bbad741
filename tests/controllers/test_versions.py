"""What was read from each upstream release names its version; a pin of another fails until it is re-read.

Kueue, KubeRay and Argo CD are pinned in fleet.yaml; Ray by contract.names.RAY_VERSION (the requirements lock
holds the same: tests/contract/test_single_sources.py).
"""

from __future__ import annotations

import re

import pytest

from contract import names
from contract.problem import Invalid
from fleet import upstream
from fleet.controllers import versions
from fleet.load import load_text
from fleet.model import Fleet
from tests.conftest import SHIPPED

NAMES = {"kueue": upstream.KUEUE.name, "kuberay": upstream.KUBERAY.name, "argocd": upstream.ARGOCD.name}


def test_what_was_read_is_what_is_pinned(fleet: Fleet) -> None:
    pinned = {field: str(getattr(fleet.versions, field)) for field in NAMES}
    assert {**pinned, "ray": names.RAY_VERSION} == dict(versions.READ_AT)
    assert versions.unread("kueue", "0.19.2") is None
    assert versions.unread("argocd", "3.5.2") is not None  # the runbooks' pause was read at 3.5.1


def _one_line(text: str) -> str:
    with pytest.raises(Invalid) as caught:
        load_text(text)
    (line,) = caught.value.lines  # with the missing commit (fleet.upstream), one line for the release
    return line


@pytest.mark.parametrize(("field", "pinned"), [("kueue", "0.20.0"), ("kuberay", "1.8.0"), ("argocd", "3.6.0")])
def test_a_fleet_copy_pinning_another_version_fails_in_one_line(field: str, pinned: str) -> None:
    read = versions.READ_AT[field]
    text = SHIPPED.read_text().replace(f"  {field}: {read}\n", f"  {field}: {pinned}\n")
    assert text != SHIPPED.read_text()
    line = _one_line(text)
    assert re.match(rf"fleet\.yaml:\d+: versions\.{field}: {NAMES[field]} {pinned}: ", line)
    assert f"read at {NAMES[field]} {read}; re-read the sources they cite at tag v{pinned}" in line
    assert "never just bump it" in line


def test_another_ray_fails_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(names, "RAY_VERSION", "2.61.0")
    line = _one_line(SHIPPED.read_text())
    assert re.match(r"fleet\.yaml:\d+: versions: Ray 2\.61\.0 \(contract\.names\.RAY_VERSION\): ", line)
    assert "health-check timings (fleet.goodput.costs) were read at Ray 2.60.0" in line
    assert "at tag ray-2.61.0" in line
    assert "never just bump it" in line
