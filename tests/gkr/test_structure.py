"""gkr's shape: one module per command loaded only when used, no import cycle (sizes: tests/test_sizes.py)."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gkr.commands import COMMANDS
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
        "import sys\nfrom gkr.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('gkr.commands.') or m == 'kubernetes'))"
    )
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True, cwd=REPO)
    return list(ast.literal_eval(done.stdout.splitlines()[-1]))


def test_commands_load_only_when_used() -> None:
    assert _loaded("--help") == ["gkr.commands.group"]
    job = str(EXAMPLES / "pretrain-128-nodes.yaml")
    dry_run = _loaded("submit", "--registry", str(registry_folder()), "-f", job, "--dry-run")
    # No other command's module, and not the Kubernetes client: a dry run applies nothing.
    assert dry_run == ["gkr.commands.common", "gkr.commands.job_args", "gkr.commands.submit"]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listing_says_what_each_command_says(name: str) -> None:
    module = importlib.import_module(COMMANDS[name][0])
    # A command that parses its own arguments (argparse) or a click command.
    text = module.parser().description if hasattr(module, "main") else module.command.help
    assert (text or "").splitlines()[0] == COMMANDS[name][1]


# What a dry run never loads: the command-line stack of the other commands (click, typer, rich and what rich
# brings), the Kubernetes and Google clients, what --workdir and runs across regions use, and what only
# `gkr registry fetch` needs. Each was on the path once (issue 40: typer and rich were two thirds of it).
NOT_FOR_A_DRY_RUN = {
    "click", "typer", "rich", "markdown_it", "pygments", "shellingham", "jinja2", "markupsafe",
    "kubernetes", "google", "pathspec", "cryptography", "jsonschema", "pydantic", "tempfile",
    "gkr.commands.group", "gkr.commands.options", "gkr.workdir", "gkr.multiregion", "gkr.launch",
}  # fmt: skip
GKR = Path(sys.executable).parent / "gkr"  # the installed entry point, as a researcher runs it


def _imported(tmp_path: Path, *args: str) -> set[str]:
    """Every module (and its top package) a fresh `gkr ARGS` imports, from `python -X importtime`'s lines."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(GKR), *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = {line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return names | {name.split(".")[0] for name in names}


@pytest.mark.parametrize(
    "args",
    [
        ["submit", "-f", str(EXAMPLES / "pretrain-128-nodes.yaml")],
        ["submit", "--name", "exp-1", "--team", "research", "--pods", "2", "--", "python", "train.py"],
        ["preflight", "--team", "research"],
    ],
    ids=["submit -f", "submit flags", "preflight"],
)
def test_a_dry_run_loads_only_what_it_needs(tmp_path: Path, args: list[str]) -> None:
    imported = _imported(tmp_path, args[0], "--registry", str(registry_folder()), "--dry-run", *args[1:])
    assert {"gkr.commands.job_args", "gkr.render", "yaml"} <= imported  # the dry run ran, and was seen
    assert sorted(imported & NOT_FOR_A_DRY_RUN) == []


def test_the_import_count_sees_what_the_other_commands_load(tmp_path: Path) -> None:
    assert {"typer", "click", "rich", "gkr.commands.group"} <= _imported(tmp_path, "--help")
