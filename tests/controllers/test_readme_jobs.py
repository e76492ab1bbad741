"""The jobs the READMEs show with flags (no job file), through the CLI as a researcher runs them, under the rules.

`gkr submit --dry-run -o json` prints what would be applied (one object, a List, or one per cluster for a run
across regions) and says on stderr which cluster and pool each object goes to; every object then passes
Kueue's rules in that cluster's tree and KubeRay's (fleet.controllers). The job-file examples are in
test_shipped.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from click.testing import Result

from fleet.controllers import kuberay, kueue
from fleet.controllers.kueue import Cluster
from tests.controllers.test_shipped import clusters  # noqa: F401 (a fixture)
from tests.gkr.conftest import gkr  # noqa: F401 (a fixture)

Obj = dict[str, Any]
COMMAND = ["--", "python", "train.py", "configs/config.yaml", "run.name=exp-1"]
# Each as its README writes it (platform/gkr/README.md: the quickstart's "Without a file", the command table's
# --kind, "gkr preflight", the run across regions' "or with flags"), with --dry-run -o json added.
JOBS = {
    "quickstart": ["submit", "--name", "exp-1", "--team", "research", "--pods", "2", "--gpus-per-pod", "8", *COMMAND],
    "raycluster": ["submit", "--kind", "raycluster", "--name", "exp-1", "--team", "research", "--pods", "2"],
    "job": ["submit", "--kind", "job", "--name", "exp-1", "--team", "research", "--pods", "2", *COMMAND],
    "preflight": ["preflight", "--team", "research"],
    "cross-region": [
        "submit",
        "--name",
        "x",
        "--team",
        "research",
        "--region",
        "us-central1=4",
        "--region",
        "us-east4=2",
        "--",
        "python",
        "train.py",
        "configs/config.yaml",
        "optim=diloco",
        "run.name=x",
    ],
}
_CONTEXT = re.compile(r"-> gke_[^_]+_([a-z0-9-]+)_\S+ \(.*?(?:pool ([a-z0-9-]+))?\)$", re.MULTILINE)


def _objects(printed: Obj | list[Obj]) -> list[Obj]:
    if isinstance(printed, list):
        return printed
    return list(printed["items"]) if printed.get("kind") == "List" else [printed]


def _by_region(result: Result) -> dict[str, tuple[list[Obj], str | None]]:
    """Region -> (its objects, the GPU pool gkr chose there), from the dry run's stdout and stderr."""
    documents = list(yaml.safe_load_all(result.stdout))  # JSON is YAML; `gkr preflight --dry-run` prints YAML
    printed = documents[0] if len(documents) == 1 else documents
    pools = {m.group(1): m.group(2) for m in _CONTEXT.finditer(result.stderr) if m.group(2)}
    if isinstance(printed, list) or "kind" in printed:  # one cluster
        (region,) = {m.group(1) for m in _CONTEXT.finditer(result.stderr)}
        return {region: (_objects(printed), pools.get(region))}
    by_context = {re.split(r"_", context)[2]: _objects(part) for context, part in printed.items()}
    return {region: (objects, pools.get(region)) for region, objects in by_context.items()}


@pytest.mark.parametrize("job", sorted(JOBS))
def test_every_job_the_readmes_show_is_admitted(
    job: str,
    gkr: Callable[..., Result],  # noqa: F811
    clusters: dict[str, Cluster],  # noqa: F811
) -> None:
    output = [] if job == "preflight" else ["-o", "json"]  # gkr preflight prints YAML only
    result = gkr(*JOBS[job][:1], "--dry-run", *output, *JOBS[job][1:])
    assert result.exit_code == 0, result.output
    found = []
    for region, (objects, pool) in _by_region(result).items():
        for o in objects:
            found += [
                f"{region}: {f}" for f in [*kueue.job_findings(clusters[region], o, pool), *kuberay.job_findings(o)]
            ]
    assert found == []
