"""The cross-pod all-reduce for RayJobs, on a local Ray instance (one rank per placement-group bundle)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from preflight.collective import CollectiveSettings
from preflight.ray_collective import run

pytestmark = pytest.mark.live  # a local Ray


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    import ray

    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_all_reduce_across_ray_placed_ranks(local_ray: None) -> None:
    result = run(2, 0, CollectiveSettings(min_busbw_gbps=1e-6, sizes=(65536, 1 << 20), iterations=3), timeout_s=120)
    assert result.status == "pass", result
    assert result.summary.startswith("2 ranks over gloo: busbw ")
    _header, *rows = result.evidence
    assert [int(row.split()[0]) for row in rows] == [65536, 1 << 20]
    assert all(float(row.split()[-1]) > 0 for row in rows)


def test_a_threshold_it_cannot_meet_fails(local_ray: None) -> None:
    result = run(2, 0, CollectiveSettings(min_busbw_gbps=1e9, sizes=(65536,), iterations=2), timeout_s=120)
    assert result.status == "fail"
    assert "below 1e+09 GB/s" in result.summary


def test_one_pod_has_nothing_to_test() -> None:
    assert run(1, 8, CollectiveSettings(None)).status == "skip"
