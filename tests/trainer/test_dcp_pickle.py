"""A crafted checkpoint folder with a valid COMMITTED marker cannot run code on load (issue 27).

DCP unpickles ``.metadata`` with ``pickle.load`` and non-tensor values with ``torch.load(weights_only=False)``;
the attacker here writes a step directory by hand, including the marker (it only proves the bytes are the
ones it lists, not who wrote them). Every payload would create ``ran``; none may.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import random
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer.checkpoint import MARKER, Checkpointer, CheckpointError, step_dir
from trainer.cli import main

from tests.trainer.conftest import CONFIG, assert_same

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


class Payload:
    """Unpickling it calls ``call(*args)``: what an attacker's pickle does."""

    def __init__(self, call: Any, *args: Any) -> None:
        self.call, self.args = call, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.call, self.args


def payloads(ran: Path) -> dict[str, Payload]:
    return {
        "os.system": Payload(os.system, f"touch {ran}"),
        "builtins.eval": Payload(eval, f"open({str(ran)!r}, 'w').close()"),
        "builtins.exec": Payload(exec, f"open({str(ran)!r}, 'w').close()"),
    }


def trainer_like_state() -> dict[str, Any]:
    """What the Trainer's state_dict holds, in kind: tensors of several dtypes, optimizer state, plain values."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    return {
        "model": model.state_dict(),
        "inner": optimizer.state_dict(),
        "manager": {"step": 7, "batches_committed": 14},
        "data": {"group": 0, "next_batch": 28},
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        "bf16": torch.ones(3, dtype=torch.bfloat16),
    }


def commit_by_hand(folder: Path, step: int) -> None:
    """The attacker's COMMITTED marker: valid, with every file's size and sha256."""
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != MARKER}
    record = {
        "schema": 1,
        "step": step,
        "time": 1.0,
        "bytes": sum(len(d) for d in files.values()),
        "files": {n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in files.items()},
    }
    (folder / MARKER).write_text(json.dumps(record))


def crafted_metadata(root: Path, payload: Payload, step: int = 5) -> Path:
    """A real checkpoint whose .metadata is replaced by the payload's pickle, then committed by hand."""
    with Checkpointer(str(root)) as checkpoints:
        checkpoints.save(step, {"w": torch.ones(4)})
    folder = root / step_dir(step)
    (folder / ".metadata").write_bytes(pickle.dumps(payload))
    commit_by_hand(folder, step)
    return folder


@pytest.mark.parametrize("name", ["os.system", "builtins.eval", "builtins.exec"])
def test_a_crafted_metadata_is_refused_in_one_line_and_never_runs(tmp_path: Path, name: str) -> None:
    ran = tmp_path / "ran"
    crafted_metadata(tmp_path / "ckpt", payloads(ran)[name])
    checkpoints = Checkpointer(str(tmp_path / "ckpt"))
    module, function = ("posix" if os.name == "posix" else "nt", "system") if name == "os.system" else name.split(".")
    reason = checkpoints.verify(5)
    assert reason == f".metadata refers to {module}.{function}, which is not part of DCP's metadata"
    assert checkpoints.latest() is None
    with pytest.raises(CheckpointError, match=r"^step 5 under .* does not verify: \.metadata refers to") as caught:
        checkpoints.load(5, {"w": torch.zeros(4)})
    assert "\n" not in str(caught.value)
    checkpoints.close()
    assert not ran.exists()


def crafted_value(root: Path, payload: Payload, step: int = 5) -> Path:
    """A real checkpoint whose non-tensor value ``note`` is replaced by the payload, torch.save'd as DCP does.

    (Saving the payload in the state would not do: DCP's stager deep-copies the state, which calls it.)
    """
    with Checkpointer(str(root)) as checkpoints:
        checkpoints.save(step, {"w": torch.ones(4), "note": 0})
    folder = root / step_dir(step)
    metadata = pickle.loads((folder / ".metadata").read_bytes())  # this test's own checkpoint
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    old = (folder / "__0_0.distcp").read_bytes()
    parts, offset = [], 0
    for index, info in sorted(metadata.storage_data.items(), key=lambda item: item[1].offset):
        data = buffer.getvalue() if index.fqn == "note" else old[info.offset : info.offset + info.length]
        info.offset, info.length = offset, len(data)
        parts.append(data)
        offset += len(data)
    (folder / "__0_0.distcp").write_bytes(b"".join(parts))
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    commit_by_hand(folder, step)
    return folder


def test_a_crafted_non_tensor_value_is_refused_and_never_runs(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    crafted_value(tmp_path / "ckpt", payloads(ran)["os.system"])
    with Checkpointer(str(tmp_path / "ckpt")) as checkpoints:
        reason = checkpoints.verify(5)
        assert reason is not None
        assert (
            reason
            == "note is not a plain value or tensor (unsupported GLOBAL posix.system whose module posix is blocked)"
        )
        assert checkpoints.latest() is None
    assert not ran.exists()


def test_the_loader_refuses_a_crafted_value_itself(tmp_path: Path) -> None:
    """Verification aside, DCP's load of the value goes through torch's restricted unpickler."""
    ran = tmp_path / "ran"
    folder = crafted_value(tmp_path / "ckpt", payloads(ran)["os.system"])
    target: dict[str, Any] = {"w": torch.zeros(4), "note": None}
    with Checkpointer(str(tmp_path / "ckpt")) as checkpoints:
        checkpoints._verified[5] = (folder / MARKER).read_bytes()  # as if it had verified before the swap
        with pytest.raises(CheckpointError, match=r"note is not a plain value or tensor"):
            checkpoints.load(5, target)
    assert not ran.exists()


def test_a_restricted_load_cannot_be_bypassed_by_loading_after_verify(tmp_path: Path) -> None:
    """The loader itself is restricted: a .metadata swapped after verification still runs nothing."""
    ran = tmp_path / "ran"
    root = tmp_path / "ckpt"
    with Checkpointer(str(root)) as checkpoints:
        checkpoints.save(5, {"w": torch.ones(4)})
        checkpoints.wait()
        assert checkpoints.verify(5) is None  # remembered as verified by its marker's bytes
        folder = root / step_dir(5)
        (folder / ".metadata").write_bytes(pickle.dumps(payloads(ran)["os.system"]))
        with pytest.raises(CheckpointError, match=r"not part of DCP's metadata"):
            checkpoints.load(5, {"w": torch.zeros(4)})
    assert not ran.exists()


def test_the_trainers_kind_of_state_still_round_trips(tmp_path: Path) -> None:
    state = trainer_like_state()
    with Checkpointer(str(tmp_path)) as checkpoints:
        checkpoints.save(3, state)
        checkpoints.wait()
    target = trainer_like_state()
    target["manager"] = {"step": 0, "batches_committed": 0}
    target["data"] = {"group": 0, "next_batch": 0}
    target["rng"] = {"torch": torch.zeros_like(torch.get_rng_state()), "python": None}
    with Checkpointer(str(tmp_path)) as checkpoints:
        assert checkpoints.latest() == 3
        checkpoints.load(3, target)
    assert_same(target, state)


def test_train_py_refuses_to_start_on_a_crafted_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The run's only checkpoint is crafted: train.py exits 2 with one line and the payload never runs."""
    ran = tmp_path / "ran"
    checkpoint_dir = tmp_path / "checkpoints" / "c"
    crafted_metadata(checkpoint_dir / "group-0", payloads(ran)["os.system"])
    code = main([str(CONFIG), "run.name=c", f"checkpoint.dir={checkpoint_dir}", f"run.report_dir={tmp_path / 'runs'}"])
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    (line,) = err.splitlines()
    assert line.startswith(
        f"train.py: checkpoint.dir {checkpoint_dir}: step-* directories but no checkpoint that verifies"
    )
    assert "group-0 step 5: .metadata refers to posix.system, which is not part of DCP's metadata" in line
    assert not ran.exists()
