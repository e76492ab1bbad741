"""gkr's shape: one module per command loaded only when used, no import cycle (sizes: tests/test_sizes.py)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from gkr.cli import COMMANDS
from tests.conftest import REPO
from tests.gkr.conftest import EXAMPLES, registry_folder

SOURCE = REPO / "platform" / "gkr" / "src"


def _modules() -> dict[str, Path]:
    return {
        ".".join(p.relative_to(SOURCE).with_suffix("").parts).removesuffix(".__init__"): p for p in SOURCE.rglob("*.py")
    }


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The gkr modules a module imports, anywhere in it (a function-local import is an edge too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found & set(known)


def test_no_import_cycle() -> None:
    known = _modules()
    graph = {name: _imports(path, known) - {name} for name, path in known.items()}
    done: set[str] = set()

    def visit(name: str, trail: tuple[str, ...]) -> None:
        if name in trail:
            pytest.fail(f"import cycle: {' -> '.join((*trail[trail.index(name) :], name))}")
        if name not in done:
            for other in sorted(graph[name]):
                visit(other, (*trail, name))
            done.add(name)

    for name in sorted(graph):
        visit(name, ())


def test_only_the_keys_module_reads_the_declarations() -> None:
    """contract.codec decodes; gkr.keys derives tables. A module walking dataclass fields besides would be a second decoder."""
    readers = set()
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module == "dataclasses"
                and "fields" in {a.name for a in node.names}
            ):
                readers.add(name)
            if isinstance(node, ast.Attribute) and (node.attr, getattr(node.value, "id", "")) in (
                ("fields", "dataclasses"),
                ("declared", "codec"),
            ):
                readers.add(name)
    assert readers == {"gkr.keys"}


def _loaded(*args: str) -> list[str]:
    """The command modules (and the Kubernetes client) a fresh gkr process loads for `args`."""
    script = (
        "import sys\nfrom gkr.cli import app\ntry:\n    app(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('gkr.commands.') or m == 'kubernetes'))"
    )
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True, cwd=REPO)
    return list(ast.literal_eval(done.stdout.splitlines()[-1]))


def test_commands_load_only_when_used() -> None:
    assert _loaded("--help") == ["gkr.commands.group"]
    job = str(EXAMPLES / "pretrain-128-nodes.yaml")
    dry_run = _loaded("submit", "--registry", str(registry_folder()), "-f", job, "--dry-run")
    # No other command's module, and not the Kubernetes client: a dry run applies nothing.
    assert dry_run == ["gkr.commands.common", "gkr.commands.group", "gkr.commands.job_options", "gkr.commands.submit"]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listing_says_what_each_command_says(name: str) -> None:
    module, summary = COMMANDS[name]
    command = importlib.import_module(module).command
    assert (command.help or "").splitlines()[0] == summary
