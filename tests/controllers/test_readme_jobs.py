"""The jobs the READMEs show with flags (no job file), through the CLI as a researcher runs them, under the rules.

`gkr submit --dry-run` prints what would be applied and, on stderr, which cluster and pool each part goes to
(tests/gkr/conftest.py `dry_run`, as the runbook tests read it too); every object then passes
Kueue's rules in that cluster's tree and KubeRay's (fleet.controllers). The job-file examples are in
test_shipped.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleet.controllers import kuberay, kueue
from fleet.controllers.kueue import Cluster
from tests.controllers.test_shipped import clusters  # noqa: F401 (a fixture)
from tests.gkr.conftest import dry_run, shipped

Obj = dict[str, Any]
COMMAND = ["--", "python", "train.py", "configs/config.yaml", "run.name=exp-1"]
# Each as its README writes it (platform/gkr/README.md: the quickstart's "Without a file", the command table's
# --kind, "gkr preflight", the run across regions' "or with flags"), with --dry-run -o yaml added.
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


@pytest.mark.parametrize("job", sorted(JOBS))
def test_every_job_the_readmes_show_is_admitted(job: str, clusters: dict[str, Cluster]) -> None:  # noqa: F811
    output = [] if job == "preflight" else ["-o", "yaml"]  # gkr preflight prints YAML only
    run = dry_run(JOBS[job][0], *output, *JOBS[job][1:])
    found_registry = shipped().registry
    regions = {found_registry.context(r): r.name for r in found_registry.regions}
    found = []
    for context, o in run.objects:
        c = clusters[regions[context]]
        found += [
            f"{regions[context]}: {f}" for f in [*kueue.job_findings(c, o, run.pool(context)), *kuberay.job_findings(o)]
        ]
    assert found == []
