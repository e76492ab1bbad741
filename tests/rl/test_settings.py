from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from trainer.rl.settings import RL, from_dict

from contract.problem import Invalid
from tests.conftest import REPO


def test_the_shipped_settings_are_valid() -> None:
    for path in sorted((REPO / "platform/trainer/configs/rl").glob("*.yaml")):
        assert isinstance(from_dict(yaml.safe_load(path.read_text()), str(path)), RL)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"group_size": 1}, "rl: group_size: must be at least 2 (got 1)"),
        ({"max_policy_age": -1}, "rl: max_policy_age: must be at least 0"),
        ({"temperature": 0}, "rl: temperature: must be greater than 0"),
        ({"clip_low": 1.0}, "rl: clip_low: must be less than 1"),
        ({"grup_size": 8}, "rl: grup_size"),
        ({"allowed": "letters"}, "rl: allowed: 'letters' is not a token set"),
        ({"stop": ["\n", ""]}, "rl.stop: an empty string ends every completion at once; remove it"),
        ({"stop": ["\n"]}, "rl.stop: '\\n' is never sampled with allowed=digits; remove it or set rl.allowed=''"),
        ({"stop": "\n"}, "rl: stop:"),
        ({"engine": "sglang"}, "rl.engine: 'sglang' is not an engine; set rl.engine to torch or vllm"),
        ({"gpu_memory_utilization": 1.0}, "rl: gpu_memory_utilization: must be less than 1"),
        ({"clip_dual": 1.0}, "rl: clip_dual: must be greater than 1"),
        (
            {"loss_agg": "mean"},
            "rl.loss_agg: 'mean' is not a loss aggregation; set rl.loss_agg to seq-mean-token-mean, token-mean or seq-",
        ),
    ],
)
def test_bad_settings_are_one_line(data: dict[str, object], expected: str) -> None:
    with pytest.raises(Invalid) as error:
        from_dict(data)
    assert error.value.lines[0].startswith(expected), error.value.lines


def test_every_setting_has_a_default() -> None:
    assert from_dict({}) == RL()


# --- Each key read by the run that lists it (issue 40) ------------------------------------------------------
# `train.py --help` lists every rl.* key for `run.mode=rl`; rl.steps, rl.lr and four more were read only by the
# single-process loop (trainer/rl/loop.py) and silently ignored by that run. The run is its three kinds of
# process, read as syntax with every trainer module they import: a key is read where an expression holding the
# RL settings (`cfg.rl`, an alias of it, a parameter or attribute typed or assigned RL) has it as an attribute.
SOURCE = REPO / "platform/trainer/src"
RUN = ("trainer.rl.launch", "trainer.rl.policy", "trainer.rl.generator_main")  # controller, trainer groups, generators
CHECKS = {"trainer.config", "trainer.rl.settings", "trainer.preconditions"}  # checking a key at start is not using it
LOOP = "trainer.rl.loop"


def _path(module: str) -> Path | None:
    base = SOURCE.joinpath(*module.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _imported(module: str, tree: ast.Module) -> set[str]:
    """The trainer modules `module` imports, anywhere in it (a function's import counts)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}  # a name may be a submodule
    return {m for m in found if m.split(".")[0] == "trainer" and _path(m) is not None}


def _the_run() -> dict[str, ast.Module]:
    trees: dict[str, ast.Module] = {}
    todo = list(RUN)
    while todo:
        module = todo.pop()
        path = _path(module)
        if module in trees or path is None:
            continue
        trees[module] = ast.parse(path.read_text(), str(path))
        todo += sorted(_imported(module, trees[module]))
    return trees


def _holds_rl(node: ast.AST, names: set[str]) -> bool:
    """`<x>.rl`, a name bound to the settings, or `self.<attribute>` bound to them."""
    if isinstance(node, ast.Attribute):
        return node.attr == "rl" or (isinstance(node.value, ast.Name) and f"self.{node.attr}" in names)
    return isinstance(node, ast.Name) and node.id in names


def _bindings(tree: ast.AST) -> set[str]:
    """Names and `self.` attributes that hold the RL settings: annotated RL, or assigned an expression that holds
    them (`s = cfg.rl`; `s, engine = cfg.rl, built`; `self.settings, self.task = settings, task`)."""
    names = {
        a.arg
        for a in ast.walk(tree)
        if isinstance(a, ast.arg) and isinstance(a.annotation, ast.Name) and a.annotation.id == "RL"
    }
    pairs: list[tuple[ast.AST, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs += zip(target.elts, node.value.elts, strict=False)
                else:
                    pairs.append((target, node.value))
    while True:
        more = {ast.unparse(t) for t, v in pairs if _holds_rl(v, names) and isinstance(t, ast.Name | ast.Attribute)}
        if more <= names:
            return names
        names |= more


def _keys_read(tree: ast.AST) -> set[str]:
    names = _bindings(tree)
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and _holds_rl(node.value, names)
    }


def test_the_run_is_its_processes_without_the_loop() -> None:
    run = _the_run()
    assert {*RUN, "trainer.rl.controller", "trainer.rl.engines", "trainer.rl.grpo"} <= set(run)
    assert LOOP not in run  # the loop's own settings are loop.Loop, not the run's


def test_every_rl_key_is_read_by_the_distributed_run() -> None:
    read = set().union(*(_keys_read(tree) for module, tree in _the_run().items() if module not in CHECKS))
    keys = {f.name for f in fields(RL)}
    assert sorted(keys - read) == [], "rl.* keys the run never reads: read them where the run needs them, or drop them"


def test_the_check_sees_reads_and_their_absence() -> None:
    source = (
        "class C:\n"
        "    def __init__(self, settings: RL, cfg):\n"
        "        self.settings, self.task = settings, None\n"
        "        s, engine = cfg.rl, None\n"
        "        x = self.settings.lease_prompts + s.temperature + cfg.rl.engine + cfg.run.steps + settings.seed\n"
        "        cfg2 = replace(cfg, rl=replace(cfg.rl, controller='x'))\n"  # written, not read
    )
    assert _keys_read(ast.parse(source)) == {"lease_prompts", "temperature", "engine", "seed"}
    # The keys issue 40 dropped were never read by the run (its run.steps and optim.lr are other settings): had
    # they stayed in RL, the test above would have listed them. max_rollouts came back in issue 41 as the
    # controller's bound on a step that cannot form its batch, and the run reads it.
    read = set().union(*(_keys_read(tree) for module, tree in _the_run().items() if module not in CHECKS))
    assert not {"steps", "lr", "weight_decay", "grad_clip", "staleness"} & read
    assert {"max_rollouts", "max_restarts"} <= read
