"""The rules name the versions they were read at; a fleet.yaml that pins another fails until they are re-read."""

from __future__ import annotations

import re

import pytest

from contract.problem import Invalid
from fleet import upstream
from fleet.controllers import versions
from fleet.load import load_text
from fleet.model import Fleet
from tests.conftest import SHIPPED


def test_the_rules_were_read_at_the_pinned_versions(fleet: Fleet) -> None:
    assert {field: str(getattr(fleet.versions, field)) for field in versions.READ_AT} == dict(versions.READ_AT)
    assert versions.unread("kueue", "0.19.2") is None
    assert versions.unread("argocd", "9.9.9") is None  # no rule reads Argo CD yet


@pytest.mark.parametrize(("field", "pinned"), [("kueue", "0.20.0"), ("kuberay", "1.8.0")])
def test_a_fleet_copy_pinning_another_version_fails_in_one_line(field: str, pinned: str) -> None:
    read = versions.READ_AT[field]
    text = SHIPPED.read_text().replace(f"  {field}: {read}\n", f"  {field}: {pinned}\n")
    assert text != SHIPPED.read_text()
    with pytest.raises(Invalid) as caught:
        load_text(text)
    (line,) = caught.value.lines  # with the missing commit (fleet.upstream), one line for the release
    assert re.match(rf"fleet\.yaml:\d+: versions\.{field}: ", line)
    name = {"kueue": upstream.KUEUE.name, "kuberay": upstream.KUBERAY.name}[field]
    assert (
        f"the rules in fleet.controllers were read at {name} {read}; re-read the sources they cite at tag v{pinned}"
        in line
    )
    assert "never just bump it" in line
