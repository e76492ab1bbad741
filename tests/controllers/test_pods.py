"""A pod's requests as Kueue counts them (fleet.controllers.pods)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from contract.quantity import parse as quantity
from fleet.controllers.pods import pod_requests


def test_quantities_as_the_rules_read_them() -> None:  # contract.quantity, shared with the twin
    assert quantity("500m") == Fraction(1, 2)
    assert quantity("32Gi") == 32 * 2**30
    assert quantity("1G") == 10**9
    assert quantity(8) == 8
    assert quantity("1e3") == 1000
    assert quantity("0.5") == Fraction(1, 2)
    for bad in ("", "Gi", "1.2.3", "12 Gi", "1Q", True, None, [1]):
        with pytest.raises(ValueError, match="is not a quantity"):
            quantity(bad)


def _container(
    requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: str
) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}, **extra}


def test_limits_fill_missing_requests_after_the_limit_range_defaults() -> None:
    # resources.go AdjustResources: LimitRange defaultRequest first, then limits; zeros need no quota.
    spec = {"containers": [_container({"cpu": "2"}, {"memory": "8Gi", "nvidia.com/gpu": "8", "cpu": "4"})]}
    assert pod_requests(spec) == {"cpu": 2, "memory": 8 * 2**30, "nvidia.com/gpu": 8}
    defaults = {"cpu": "100m", "memory": "256Mi"}
    assert pod_requests(spec, defaults) == {"cpu": 2, "memory": 256 * 2**20, "nvidia.com/gpu": 8}
    assert pod_requests({"containers": [_container({"cpu": "0"})]}) == {}


def test_init_containers_count_at_their_largest_and_sidecars_add_up() -> None:
    spec = {
        "containers": [_container({"cpu": "1", "memory": "1Gi"})],
        "initContainers": [
            _container({"cpu": "3"}),  # runs alone: the pod needs at least 3 CPUs
            _container({"cpu": "500m"}, restartPolicy="Always"),  # a sidecar: runs beside the containers
            _container({"cpu": "3"}),  # runs beside the sidecar: 3.5
        ],
        "overhead": {"cpu": "100m"},
    }
    assert pod_requests(spec) == {"cpu": Fraction(36, 10), "memory": 2**30}
