"""gkr's summary names a job that makes more pods, Services, Secrets, ConfigMaps or PVCs than its team
namespace's ResourceQuota counts allow (issue 39, item 4); the counts are fleet's (fleet.objectquota),
read from the registry."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from click.testing import Result
from typer.testing import CliRunner

from gkr.commands.group import app
from gkr.objectcounts import made, over_quota
from tests.conftest import SHIPPED_SPEC
from tests.gkr.conftest import EXAMPLES, registry_folder

JOB = ("--team", "research", "--region", "us-east4", "--name", "exp", "--dry-run")


def _gkr(fleet: dict[str, Any], *args: str) -> Result:
    """`gkr submit ARGS` against the registry of `fleet`, with no user config."""
    folder = Path(tempfile.mkdtemp(prefix="gkr-objects-"))
    (folder / "fleet.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
    registry = registry_folder(folder / "fleet.yaml")
    env = {"XDG_CONFIG_HOME": str(folder), "XDG_CACHE_HOME": str(folder), "GKR_REGISTRY": None, "GKR_FLEET": None}
    return CliRunner().invoke(app, ["submit", "--registry", str(registry), *args], env=env)  # type: ignore[arg-type]  # None unsets


def _capped(**objects: int) -> dict[str, Any]:
    fleet = copy.deepcopy(SHIPPED_SPEC)
    fleet["teams"][1]["objects"] = objects  # research
    return fleet


def test_a_job_past_its_namespaces_pod_count_is_named_in_the_summary() -> None:
    # A RayJob of 16 workers: its head, its workers and KubeRay's submitter pod, 18 pods; research may hold 8.
    result = _gkr(_capped(pods=8), *JOB, "--pods", "16", "--", "python", "train.py")
    assert result.exit_code == 0, result.stderr
    (line,) = [x for x in result.stderr.splitlines() if "ResourceQuota" in x]
    assert line.startswith("warning: the job makes 18 pods (quota 8) in team-research in us-east4: ")
    assert "never runs whole" in line
    # The same job within the shipped fleet's counts: nothing to say.
    fits = _gkr(copy.deepcopy(SHIPPED_SPEC), *JOB, "--pods", "16", "--", "python", "train.py")
    assert fits.exit_code == 0, fits.stderr
    assert "ResourceQuota" not in fits.stderr


def test_a_run_across_regions_is_checked_in_each_namespace() -> None:
    # The home region holds the run's two TLS Secrets (Lighthouse and members); the other region one.
    result = _gkr(_capped(secrets=1, services=0), "-f", str(EXAMPLES / "cross-region.yaml"), "--dry-run")
    assert result.exit_code == 0, result.stderr
    home, other = [x for x in result.stderr.splitlines() if "ResourceQuota" in x]
    # Home: the Lighthouse's Service and KubeRay's head Service; the other region only the head Service.
    assert home.startswith(
        "warning: the job makes 2 Services (quota 0), 2 Secrets (quota 1) in team-research in us-central1"
    )
    assert other.startswith("warning: the job makes 1 Service (quota 0) in team-research in us-east4")


def test_what_a_job_makes_counts_kuberays_objects_too() -> None:
    result = _gkr(copy.deepcopy(SHIPPED_SPEC), "-f", str(EXAMPLES / "cross-region.yaml"), "--dry-run", "-o", "json")
    assert result.exit_code == 0, result.stderr
    home, other = json.loads(result.stdout).values()
    # Lighthouse pod + head + 5 workers + submitter; Lighthouse and head Services; one internal LB, one port.
    # The RayJob's own RayCluster and submitter Job are KubeRay's; the Lighthouse is a Deployment.
    ray = {"count/rayjobs.ray.io": 1, "count/rayclusters.ray.io": 1, "count/jobs.batch": 1}
    assert made(home) == {
        "pods": 8,
        "services": 2,
        "services.loadbalancers": 1,
        "services.nodeports": 1,
        "secrets": 2,
        "count/deployments.apps": 1,
        **ray,
    }
    assert made(other) == {"pods": 5, "services": 1, "secrets": 1, **ray}
    job = {
        "kind": "Job",
        "spec": {"parallelism": 4, "template": {"spec": {"volumes": [{"name": "s", "ephemeral": {}}]}}},
    }
    assert made([job]) == {"pods": 4, "persistentvolumeclaims": 4, "count/jobs.batch": 1}
    assert over_quota([job], {"persistentvolumeclaims": 0}, "team-x", "r") is not None
    assert over_quota([job], {}, "team-x", "r") is None  # a registry from before object quotas says nothing
