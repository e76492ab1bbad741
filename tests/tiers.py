"""Which tests start live runs or scenarios, read from their source: the facts tests/test_tiers.py checks the
markers against, without timing anything.

A test needs a tier's marker when its body, a fixture it takes or a module function it calls (in its module or imported from
another test module) uses what starts such a run:

- live: the trainer's driver started by tests/trainer/conftest.py (``start``, ``run``, ``kill_and_finish``,
  ``wait_for``), a local Ray (``ray.init``, ``ray.cluster_utils``), an in-process GRPO learning run;
- scenario: the review's ``sandbox`` (a git repository planned on both sides), a ``make`` subprocess.

A live test is marked through its module's ``pytestmark = pytest.mark.live``: live runs stay out of the modules
that hold unit tests. A scenario may be marked on the test (``@pytest.mark.scenario``) or on its module.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

TIERS = ("live", "scenario")
# (module, name) imported by a test module -> the tier whose run it starts
STARTERS = {
    ("tests.trainer.conftest", "start"): "live",
    ("tests.trainer.conftest", "run"): "live",
    ("tests.trainer.conftest", "kill_and_finish"): "live",
    ("tests.trainer.conftest", "wait_for"): "live",
    ("ray.cluster_utils", "Cluster"): "live",
    ("trainer.rl.loop", "run"): "live",
}
FIXTURES = {"sandbox": "scenario"}  # conftest fixtures that start a run

# Live modules run two at a time (make live: --dist loadgroup), a module's tests on one worker. Runs that would
# collide if two ran at once share a worker: a local Ray each (Ray's session directory and ray_current_cluster
# file), and runs across regions or with the run's TLS, whose ports contract.names fixes (HEAL_TLS_PORTS,
# MANAGER_PORTS, RING_TLS_PORTS). tests/test_tiers.py fails on a live module that needs a group and is not in it.
SHARED_LIVE_GROUPS = {
    "ray": (
        "tests/trainer/test_ray.py",
        "tests/trainer/test_ray_groups_recovery.py",
        "tests/trainer/test_ray_subblocks.py",
        "tests/preflight/test_ray_collective.py",
    ),
    "fixed-ports": ("tests/trainer/test_cross_region.py", "tests/trainer/test_strangers.py"),
}
_NEEDS_GROUP = {
    "ray": re.compile(r"\bray\.init\(|ray\.cluster_utils|\blocal_cluster\(|launcher=ray"),
    "fixed-ports": re.compile(r"lighthouse_tls=|trainer\.distributed\.(mtls|tls_ring)|trainer\.ft\.heal_tls"),
}


def live_group(module: str) -> str:
    """The xdist group of a live module (its path relative to the repository): a shared one, else its own."""
    return next((group for group, modules in SHARED_LIVE_GROUPS.items() if module in modules), module)


def missing_live_groups(module: str, source: str) -> list[str]:
    """The shared groups a live module's source needs and is not in."""
    return [g for g, pattern in _NEEDS_GROUP.items() if pattern.search(source) and live_group(module) != g]


@dataclass(frozen=True)
class Unmarked:
    path: Path
    test: str
    tier: str

    def __str__(self) -> str:
        if self.tier == "live":  # live runs stay out of the modules that hold unit tests
            return (
                f"{self.path}::{self.test} starts a live run: move it to a module marked pytestmark = pytest.mark.live"
            )
        return f"{self.path}::{self.test} starts a {self.tier} run: mark it pytest.mark.{self.tier}"


def _marks(decorators: list[ast.expr]) -> set[str]:
    """The tiers named by ``pytest.mark.<tier>`` in a decorator list or a ``pytestmark`` value."""
    return {
        node.attr
        for decorator in decorators
        for node in ast.walk(decorator)
        if isinstance(node, ast.Attribute) and node.attr in TIERS and ast.unparse(node.value) == "pytest.mark"
    }


def _direct(node: ast.AST, imported: dict[str, str]) -> set[str]:
    """The tiers a function's own code starts: an imported starter, ``ray.init(...)``, a ``make`` command."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in imported:
            found.add(imported[sub.id])
        elif isinstance(sub, ast.Call) and ast.unparse(sub.func) == "ray.init":
            found.add("live")
        elif isinstance(sub, ast.Call) and any(_is_make(arg) for arg in sub.args):
            found.add("scenario")
    return found


def _is_make(node: ast.expr) -> bool:
    """A command line ``["make", ...]`` handed to a call (subprocess.run, Popen...)."""
    return isinstance(node, ast.List | ast.Tuple) and bool(node.elts) and ast.unparse(node.elts[0]) == "'make'"


class Module:
    """One test module's functions, what each starts, and the tiers it is marked with."""

    def __init__(self, root: Path, path: Path) -> None:
        self.path = path.relative_to(root)
        tree = ast.parse(path.read_text())
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        self.marked: set[str] = set()
        for statement in tree.body:
            if isinstance(statement, ast.Assign) and any(ast.unparse(t) == "pytestmark" for t in statement.targets):
                self.marked |= _marks([statement.value])
        self.starters: dict[str, str] = {}  # a name in this module -> the tier of the run it starts
        self.local_imports: dict[str, tuple[str, str]] = {}  # a name -> (tests module, its name there)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    tier = STARTERS.get((node.module, alias.name))
                    if tier:
                        self.starters[alias.asname or alias.name] = tier
                    elif node.module.startswith("tests."):
                        self.local_imports[alias.asname or alias.name] = (node.module, alias.name)


class Suite:
    """Every test module under ``root``/tests, read once; ``tiers(module, function)`` follows calls and fixtures."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._read: dict[str, Module | None] = {}

    def module(self, dotted: str) -> Module | None:
        if dotted not in self._read:
            path = self.root / (dotted.replace(".", "/") + ".py")
            self._read[dotted] = Module(self.root, path) if path.is_file() else None
        return self._read[dotted]

    def tiers(self, module: Module, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> set[str]:
        key = (str(module.path), name)
        if key in seen:
            return set()
        seen = seen | {key}
        if name in module.local_imports:
            other = self.module(module.local_imports[name][0])
            return self.tiers(other, module.local_imports[name][1], seen) if other else set()
        function = module.functions.get(name)
        if function is None:
            return set()
        found = _direct(function, module.starters)
        found |= {FIXTURES[a.arg] for a in function.args.args if a.arg in FIXTURES}
        used = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)} | {a.arg for a in function.args.args}
        for callee in sorted(used - {name}):
            if callee in module.functions or callee in module.local_imports:
                found |= self.tiers(module, callee, seen)
        return found

    def unmarked(self, dotted: str) -> list[Unmarked]:
        """The tests of one module that start a run of a tier they are not marked with."""
        module = self.module(dotted)
        assert module is not None, dotted
        problems = []
        for name, function in module.functions.items():
            if name.startswith("test_"):
                # A live test is marked with its module; a scenario may be marked on its own.
                marked = module.marked | (_marks(function.decorator_list) - {"live"})
                needed = self.tiers(module, name) | (_marks(function.decorator_list) & {"live"})
                problems += [Unmarked(module.path, name, t) for t in sorted(needed - marked)]
        return problems


def modules_of(root: Path) -> list[str]:
    """Every test module of the suite (the twin's included: it has its own marker), dotted."""
    paths = sorted((root / "tests").rglob("test_*.py"))
    return [".".join(p.relative_to(root).with_suffix("").parts) for p in paths]
