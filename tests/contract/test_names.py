"""Each shared name is spelled once: in contract/names.py, and nowhere else in the code that ships.

A second spelling is how the components drifted apart before (the preflight
annotation, the NCCL Event reason, two different "pool labels"). Names that
are plain words ("warden", "trainer") are left out: they mean many things.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from contract import names
from tests.conftest import REPO

SHIPPED_CODE = (
    "platform/*/src/**/*.py",
    "platform/*/src/**/templates/**/*",
    "infra/meridian_infra/*.py",
    "scripts/*.py",
)
DEFINED_IN = REPO / "platform/contract/src/contract/names.py"


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, tuple | list):
        return [s for v in value for s in _strings(v)]
    return []  # a dict (a toleration) is built from the constants above it


def _distinctive(value: str) -> bool:
    """A label/annotation/taint key or a CamelCase reason or condition (metric names: test_single_sources.py)."""
    camel = bool(re.fullmatch(r"[A-Z][A-Za-z]+", value)) and not value.isupper() and sum(map(str.isupper, value)) > 1
    return "/" in value or camel


SHARED = sorted({s for key, value in vars(names).items() if key.isupper() for s in _strings(value) if _distinctive(s)})


def _shipped_files() -> list[Path]:
    files = {p for pattern in SHIPPED_CODE for p in REPO.glob(pattern) if p.is_file()}
    return sorted(files - {DEFINED_IN})


def test_there_are_shared_names_to_check() -> None:
    assert {names.POOL_LABEL, names.NCCL_FAILURE_REASON, names.PREFLIGHT_FAILURE_ANNOTATION} <= set(SHARED)


@pytest.mark.parametrize("value", SHARED)
def test_spelled_once(value: str) -> None:
    quoted = re.compile(rf"[\"']{re.escape(value)}[\"']")
    again = [str(p.relative_to(REPO)) for p in _shipped_files() if quoted.search(p.read_text(errors="replace"))]
    assert not again, f"{value!r} is spelled again in {again}; use contract.names"
