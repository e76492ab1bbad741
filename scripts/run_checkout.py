"""Run a command of this checkout with this checkout's own code.

    python scripts/run_checkout.py NAME [ARGS...]
    python scripts/run_checkout.py --module MODULE:FUNCTION PROG [ARGS...]
    python scripts/run_checkout.py --root CHECKOUT ...   (another checkout's code, this launcher's rules)
    python scripts/run_checkout.py --check               (the module and command rules only: make setup)

NAME is a console script of this checkout, as its `pyproject.toml` files
declare it (`[project.scripts]` of `platform/*/` and `infra/`): for example
`meridian-synth --fleet fleet.yaml --outdir out` (infra's public entry point)
or `meridian plan --json`. Before anything of the project is imported, the
checkout's own package folders (each distribution's `src/`, and `infra/`) go
first on sys.path, ahead of what the environment has installed, which may be
another checkout's code, installed editable. Third-party packages still come
from the environment. A console script that two `pyproject.toml` files declare
is refused (a new folder must not redefine a command).

`--module` names the function itself instead of a console script, so nothing a
checkout declares decides what runs: scripts/plan_side.py, which the plan
review runs in each checkout, calls its commands this way.

Every top-level module name must be defined by exactly one distribution: the
folders go on sys.path one after the other, so a `safeyaml/` dropped into
`platform/gkr/src` would shadow the real one for every command (issue 36: it
rewrote fleet.yaml in memory, only under `cdktn deploy`). A name defined twice,
or one that shadows the standard library, is refused before anything of the
checkout is imported, in one line, exit 2.

This is how the plan review runs BASE with BASE's code and HEAD with HEAD's,
without setting PYTHONPATH: it runs each checkout's copy of this file. `--root`
runs another checkout's code under this copy's rules: the plan job of the
deciding workflow runs the default branch's launcher over the pull request's
tree, so the pull request cannot change the rules its own plan is made under.
Standard library only; it must keep working for older checkouts too.
"""

from __future__ import annotations

import sys
import tomllib
from importlib import import_module
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _projects(root: Path = ROOT) -> list[tuple[Path, dict[str, Any]]]:
    files = [*sorted(root.glob("platform/*/pyproject.toml")), root / "infra" / "pyproject.toml"]
    return [(f.parent, tomllib.loads(f.read_text(encoding="utf-8"))) for f in files if f.is_file()]


def _code_folders(root: Path = ROOT) -> list[tuple[Path, Path]]:
    """(distribution folder, package folder) pairs: `packages.find.where` (`src`), else the distribution's folder."""
    pairs = []
    for folder, data in _projects(root):
        found = data.get("tool", {}).get("setuptools", {}).get("packages", {})
        where = found.get("find", {}).get("where", ["."]) if isinstance(found, dict) else ["."]
        pairs += [(folder, (folder / w).resolve()) for w in where]
    return pairs


def code_paths(root: Path = ROOT) -> list[str]:
    """Each distribution's package folders, in the order they go on sys.path."""
    return [str(path) for _, path in _code_folders(root)]


def _importable(entry: Path) -> str | None:
    """The top-level module name `entry` (in a folder on sys.path) can be imported as, or None."""
    name = entry.name
    if entry.is_file():
        stem = name.split(".", 1)[0]
        return stem if name.endswith((".py", ".pyc", ".so", ".pyd")) and stem.isidentifier() else None
    if not entry.is_dir() or not name.isidentifier() or name == "__pycache__":
        return None
    # A regular package, or a namespace package holding modules of its own.
    return name if any(p.suffix == ".py" for p in entry.iterdir() if p.is_file()) else None


def module_owners(root: Path = ROOT) -> dict[str, list[str]]:
    """Top-level module name -> the distribution folders (relative to `root`) that define it."""
    owners: dict[str, list[str]] = {}
    for folder, path in _code_folders(root):
        for entry in sorted(path.iterdir()) if path.is_dir() else []:
            if (name := _importable(entry)) is not None:
                where = folder.relative_to(root).as_posix()
                if where not in owners.setdefault(name, []):
                    owners[name].append(where)
    return owners


class Redefined(Exception):
    """Two distributions of this checkout declare the same console script or define the same module."""


def check_modules(root: Path = ROOT) -> None:
    """Refuse (Redefined) a top-level module that two distributions define, or that shadows the standard library."""
    for name, where in sorted(module_owners(root).items()):
        if len(where) > 1:
            raise Redefined(
                f"top-level module {name} is defined by {' and '.join(where)}: every module has exactly one owner "
                "(the first on sys.path would shadow the other); rename or remove one of them"
            )
        if name in sys.stdlib_module_names:
            raise Redefined(f"top-level module {name} of {where[0]} shadows the standard library: rename it")


def entry_points(root: Path = ROOT) -> dict[str, str]:
    """Console script name -> `module:function`, from the checkout's pyproject.toml files."""
    scripts: dict[str, str] = {}
    declared: dict[str, Path] = {}
    for folder, data in _projects(root):
        for name, target in data.get("project", {}).get("scripts", {}).items():
            if name in declared:
                raise Redefined(
                    f"{(folder / 'pyproject.toml').relative_to(root)}: console script {name} is already declared by "
                    f"{(declared[name] / 'pyproject.toml').relative_to(root)}; rename one of them"
                )
            scripts[name], declared[name] = target, folder
    return scripts


def _call(target: str, argv: list[str], root: Path = ROOT) -> int:
    module, _, function = target.partition(":")
    try:
        check_modules(root)
    except Redefined as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.path[:0] = code_paths(root)
    sys.argv = list(argv)  # as the installed console script sees them
    result = getattr(import_module(module), function)()
    return result if isinstance(result, int) else 0


def main(argv: list[str]) -> int:
    root = ROOT
    if argv[:1] == ["--root"] and len(argv) >= 2:
        root, argv = Path(argv[1]).resolve(), argv[2:]
    if argv == ["--check"]:
        try:
            check_modules(root)
            entry_points(root)
        except Redefined as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    if argv[:1] == ["--module"] and len(argv) >= 3 and ":" in argv[1]:
        return _call(argv[1], argv[2:], root)
    try:
        scripts = entry_points(root)
    except Redefined as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not argv or argv[0] not in scripts:
        names = ", ".join(sorted(scripts))
        print(f"usage: {Path(__file__).name} NAME [ARGS...]; NAME is one of this checkout's: {names}", file=sys.stderr)
        return 2
    return _call(scripts[argv[0]], argv, root)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
