"""What train.py decides before it starts anything: a run with nothing saved decides it without torch's DCP.

The launcher checks its checkpoint directories before it starts the forkserver (the processes' imports): an
import of torch.distributed.checkpoint there held the whole start back by 2 s on one core (issue 41: start-up).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.trainer.conftest import CONFIG

DECIDE = """
import json, sys
from trainer.checkpoint.resume import start_state
from trainer.config import compose
cfg = compose(sys.argv[1], ["run.name=x", "checkpoint.dir=" + sys.argv[2], "ft.replica_groups=2"])
decided = start_state(cfg)
print(json.dumps({"decided": decided, "dcp": sorted(m for m in sys.modules if m.startswith("torch.distributed.checkpoint"))}))
"""


def _decide(root: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", DECIDE, str(CONFIG), str(root)], capture_output=True, text=True, check=True, timeout=120
    )
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def test_a_run_with_nothing_saved_starts_without_importing_torchs_checkpointing(tmp_path: Path) -> None:
    assert _decide(tmp_path / "new") == {"decided": [None, None], "dcp": []}


def test_a_run_with_step_data_is_still_checked(tmp_path: Path) -> None:
    (tmp_path / "old" / "group-1" / "step-000000010").mkdir(parents=True)  # no marker: nothing verifies
    answer = _decide(tmp_path / "old")
    refusal, newest = answer["decided"]
    assert newest is None
    assert str(refusal).startswith(
        f"checkpoint.dir {tmp_path / 'old'}: step-* directories but no checkpoint that verifies"
    )
