"""Two teams using the same run name never share checkpoint state (issue 14).

gkr mounts only the team's folder (only-dir=teams/<team>) at /checkpoints and sets
MERIDIAN_CHECKPOINT_DIR=/checkpoints; the trainer writes under MERIDIAN_CHECKPOINT_DIR/<run.name>.
The object prefix a run writes to is therefore teams/<team>/<run.name>/.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from trainer.config import compose

from gkr.flags import as_flags
from gkr.submit import prepare
from tests.conftest import REPO
from tests.gkr.conftest import EXAMPLES, shipped

FLEET = shipped()
CONFIG = REPO / "platform" / "trainer" / "configs" / "config.yaml"


def bucket_prefix(team: str, run: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where in the bucket a run of `team` named `run` keeps its checkpoints, from what gkr renders."""
    _, objects = prepare(str(EXAMPLES / "pretrain-128-nodes.yaml"), as_flags({"team": team}), FLEET, None)
    (job,) = objects
    pod: dict[str, Any] = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "checkpoints")
    volume = next(v for v in pod["volumes"] if v["name"] == "checkpoints")
    options = dict(o.partition("=")[::2] for o in volume["csi"]["volumeAttributes"]["mountOptions"].split(","))
    monkeypatch.setenv("MERIDIAN_CHECKPOINT_DIR", env["MERIDIAN_CHECKPOINT_DIR"])
    local = Path(compose(CONFIG, [f"run.name={run}"]).checkpoint.dir)
    inside = local.relative_to(mount)  # raises if the trainer would write outside the mount
    return f"{options['only-dir']}/{inside}/"


def test_the_same_run_name_in_two_teams_lands_in_two_prefixes(monkeypatch: pytest.MonkeyPatch) -> None:
    research = bucket_prefix("research", "exp-1", monkeypatch)
    pretraining = bucket_prefix("pretraining", "exp-1", monkeypatch)
    assert research == "teams/research/exp-1/"
    assert pretraining == "teams/pretraining/exp-1/"
    assert not research.startswith(pretraining)
    assert not pretraining.startswith(research)
