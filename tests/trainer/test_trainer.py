"""The Trainer's one state_dict (healing and checkpoints), the no-op fault tolerance, and torchft's public API only."""

from __future__ import annotations

import ast
import copy
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer.checkpoint import Checkpointer
from trainer.config import Config, compose
from trainer.ft.manager import NoFaultTolerance
from trainer.loop.trainer import Trainer

from tests.conftest import REPO
from tests.trainer.conftest import CONFIG, assert_same, overrides

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

SOURCE = REPO / "platform/trainer/src/trainer"


def config(tmp_path: Path, *extra: str) -> Config:
    return compose(CONFIG, overrides(tmp_path, "unit", "ft.enabled=false", "ft.replica_groups=1", *extra))


def trained(cfg: Config, steps: int, ft: NoFaultTolerance | None = None) -> Trainer:
    trainer = Trainer(cfg, 0, ft or NoFaultTolerance())
    for _ in range(steps):
        trainer.train_step()
    return trainer


def healed(source: Trainer, target: Trainer, tmp_path: Path) -> None:
    # What torchft does: the peer's state_dict (ft/manager.py hands out a deep copy), applied with load_state_dict.
    target.load_state_dict(copy.deepcopy(source.state_dict()))


def resumed(source: Trainer, target: Trainer, tmp_path: Path) -> None:
    # What a resume does: a DCP checkpoint of the state_dict, loaded in place into the target's.
    with Checkpointer(str(tmp_path / "ck")) as checkpoints:
        checkpoints.save(source.step, source.state_dict())
        checkpoints.wait()
        state = target.state_dict()
        checkpoints.load(source.step, state)
    target.load_state_dict(state)


@pytest.mark.parametrize("transfer", [healed, resumed])
@pytest.mark.parametrize("algorithm", ["ddp", "diloco"])
def test_state_dict_round_trip_restores_an_identical_trainer(tmp_path: Path, transfer: Any, algorithm: str) -> None:
    extra = ("optim=streaming_diloco", "ft.enabled=true") if algorithm == "diloco" else ()
    a = trained(config(tmp_path, *extra), 5)
    if algorithm == "diloco":  # an outer step, so the outer optimizers have momentum to carry
        for fragment, outer in zip(a.fragments, a.outer, strict=True):
            for p in fragment.parameters():
                p.grad = torch.full_like(p, 1e-3)
            outer.step()
        assert a.outer
        assert all(outer.state for outer in a.outer)
    b = Trainer(config(tmp_path, "run.seed=7", *extra), 0, NoFaultTolerance())
    assert b.weights_digest() != a.weights_digest()

    transfer(a, b, tmp_path)
    assert b.weights_digest() == a.weights_digest()
    assert_same(b.inner.state_dict(), a.inner.state_dict(), "inner")
    for i, (x, y) in enumerate(zip(b.outer, a.outer, strict=True)):
        assert_same(x.state_dict(), y.state_dict(), f"outer[{i}]")
    assert (b.step, b.next_batch) == (a.step, a.next_batch) == (5, 5)
    assert_same(b.state_dict(), a.state_dict())
    # From here on they are the same trainer: the same batches, the same updates.
    steps = [(a.train_step(), b.train_step()) for _ in range(3)]
    losses = [(x.loss, y.loss) for x, y in steps if x is not None and y is not None]
    assert len(losses) == 3
    assert all(x == y for x, y in losses)
    assert b.weights_digest() == a.weights_digest()


class EveryFourth(NoFaultTolerance):
    """A stand-in for DiLoCo's schedule: four inner steps per committed step."""

    inner_steps_per_commit = 4

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        optimizer.step()
        self.calls += 1
        if self.calls % self.inner_steps_per_commit == 0:
            self.step_count += 1
        return True


def test_the_data_position_inside_a_sync_period_travels_with_the_state(tmp_path: Path) -> None:
    a = trained(config(tmp_path), 6, EveryFourth())
    assert (a.step, a.since_sync, a.next_batch) == (1, 2, 6)
    b = Trainer(config(tmp_path), 0, EveryFourth())
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert (b.step, b.since_sync, b.next_batch) == (1, 2, 6)


# -- torchft's public API only ----------------------------------------------------------------------


def _torchft_names() -> tuple[set[str], set[str]]:
    """torchft's private attribute names and its method names, read from its installed source."""
    spec = importlib.util.find_spec("torchft")
    assert spec is not None
    assert spec.submodule_search_locations
    private, methods = set(), set()
    for path in Path(spec.submodule_search_locations[0]).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                private.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                methods.add(node.name)
    return private, methods


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def torchft_misuse(source: str, private: set[str], methods: set[str]) -> list[str]:
    """Reads of torchft's private fields and assignments over its methods in ``source``, one line each.

    ``X._name`` is allowed only on ``self`` in a class that does not derive from a torchft class: our own
    private fields. Assigning ``X.name = ...`` over a torchft method name on anything but ``self`` is a patch.
    """
    tree = ast.parse(source)
    torchft_names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torchft"
        for alias in node.names
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and _imports_private_torchft(node):
            found.append(f"line {node.lineno}: imports a private part of torchft")
        if isinstance(node, ast.ClassDef) and any(
            isinstance(b, ast.Name) and b.id in torchft_names for b in node.bases
        ):
            found += [
                f"line {n.lineno}: .{n.attr} in a subclass of a torchft class"
                for n in ast.walk(node)
                if isinstance(n, ast.Attribute) and _is_private(n.attr)
            ]
        if isinstance(node, ast.Attribute) and node.attr in private and not _on_self(node, ("self", "cls")):
            found.append(f"line {node.lineno}: reads torchft's private field .{node.attr}")
        for target in _assigned(node):
            if isinstance(target, ast.Attribute) and target.attr in methods and not _on_self(target, ("self",)):
                found.append(f"line {target.lineno}: assigns over the method .{target.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            found.append(f"line {node.lineno}: setattr")
    return sorted(set(found))


def _imports_private_torchft(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        parts = [*(node.module or "").split("."), *(a.name for a in node.names)]
        return parts[0] == "torchft" and any(_is_private(p) for p in parts)
    return any(a.name.split(".")[0] == "torchft" and any(map(_is_private, a.name.split("."))) for a in node.names)


def _on_self(node: ast.Attribute, names: tuple[str, ...]) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in names


def _assigned(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    return []


def test_the_trainer_uses_only_torchfts_public_api() -> None:
    private, methods = _torchft_names()
    assert {"_local_step", "_manager", "_use_async_quorum", "_step"} <= private
    assert {"allreduce", "should_commit", "start_quorum"} <= methods
    misuse = {
        path.name: problems
        # rl/ stays out, as when the package was flat (its weight_sync sets torch's own Options._timeout)
        for path in sorted(set(SOURCE.rglob("*.py")) - set(SOURCE.glob("rl/*.py")))
        if (problems := torchft_misuse(path.read_text(), private, methods))
    }
    assert misuse == {}


def test_the_api_check_catches_what_the_worker_used_to_do() -> None:
    private, methods = _torchft_names()
    before = """
from torchft import ProcessGroupGloo
from torchft._torchft import ManagerClient

def next_batch(manager, context, per_sync):
    return int(manager.current_step()) * per_sync + int(context._local_step)

def count(manager, counted):
    manager.allreduce = counted

class Peek(ProcessGroupGloo):
    def errored(self):
        return self._pg
"""
    assert set(torchft_misuse(before, private, methods)) == {
        "line 3: imports a private part of torchft",
        "line 6: reads torchft's private field ._local_step",
        "line 9: assigns over the method .allreduce",
        "line 13: ._pg in a subclass of a torchft class",
    }


def test_a_fragment_digest_covers_its_fragment_only(tmp_path: Path) -> None:
    # Streaming DiLoCo's groups agree fragment by fragment (loop/worker.py reports each at its last sync).
    a = Trainer(config(tmp_path, "optim=streaming_diloco", "ft.enabled=true"), 0, NoFaultTolerance())
    before = [a.fragment_digest(i) for i in range(len(a.fragments))]
    assert len(set(before)) == len(a.fragments) == 2
    with torch.no_grad():
        next(a.fragments[1].parameters()).add_(1.0)
    assert [a.fragment_digest(i) for i in range(2)] == [before[0], a.fragment_digest(1)]
    assert a.fragment_digest(1) != before[1]
