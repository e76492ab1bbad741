"""Run a command of this checkout with this checkout's own code.

    python scripts/run_checkout.py NAME [ARGS...]
    python scripts/run_checkout.py --module MODULE:FUNCTION PROG [ARGS...]

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

This is how the plan review runs BASE with BASE's code and HEAD with HEAD's,
without setting PYTHONPATH: it runs each checkout's copy of this file.
Standard library only; it must keep working for older checkouts too.
"""

from __future__ import annotations

import sys
import tomllib
from importlib import import_module
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _projects() -> list[tuple[Path, dict[str, Any]]]:
    files = [*sorted(ROOT.glob("platform/*/pyproject.toml")), ROOT / "infra" / "pyproject.toml"]
    return [(f.parent, tomllib.loads(f.read_text(encoding="utf-8"))) for f in files if f.is_file()]


def code_paths() -> list[str]:
    """Each distribution's package folders: `packages.find.where` (`src`), else the distribution's own folder."""
    paths = []
    for folder, data in _projects():
        found = data.get("tool", {}).get("setuptools", {}).get("packages", {})
        where = found.get("find", {}).get("where", ["."]) if isinstance(found, dict) else ["."]
        paths += [str((folder / w).resolve()) for w in where]
    return paths


class Redefined(Exception):
    """Two distributions of this checkout declare the same console script."""


def entry_points() -> dict[str, str]:
    """Console script name -> `module:function`, from this checkout's pyproject.toml files."""
    scripts: dict[str, str] = {}
    declared: dict[str, Path] = {}
    for folder, data in _projects():
        for name, target in data.get("project", {}).get("scripts", {}).items():
            if name in declared:
                raise Redefined(
                    f"{(folder / 'pyproject.toml').relative_to(ROOT)}: console script {name} is already declared by "
                    f"{(declared[name] / 'pyproject.toml').relative_to(ROOT)}; rename one of them"
                )
            scripts[name], declared[name] = target, folder
    return scripts


def _call(target: str, argv: list[str]) -> int:
    module, _, function = target.partition(":")
    sys.path[:0] = code_paths()
    sys.argv = list(argv)  # as the installed console script sees them
    result = getattr(import_module(module), function)()
    return result if isinstance(result, int) else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--module"] and len(argv) >= 3 and ":" in argv[1]:
        return _call(argv[1], argv[2:])
    try:
        scripts = entry_points()
    except Redefined as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not argv or argv[0] not in scripts:
        names = ", ".join(sorted(scripts))
        print(f"usage: {Path(__file__).name} NAME [ARGS...]; NAME is one of this checkout's: {names}", file=sys.stderr)
        return 2
    return _call(scripts[argv[0]], argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
