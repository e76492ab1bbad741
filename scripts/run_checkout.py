"""Run a command of this checkout with this checkout's own code.

    python scripts/run_checkout.py NAME [ARGS...]

NAME is a console script of this checkout, as its `pyproject.toml` files
declare it (`[project.scripts]` of `platform/*/` and `infra/`): for example
`meridian-synth --fleet fleet.yaml --outdir out` (infra's public entry point)
or `meridian plan --json`. Before anything of the project is imported, the
checkout's own package folders (each distribution's `src/`, and `infra/`) go
first on sys.path, ahead of what the environment has installed, which may be
another checkout's code, installed editable. Third-party packages still come
from the environment.

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


def entry_points() -> dict[str, str]:
    """Console script name -> `module:function`, from this checkout's pyproject.toml files."""
    scripts: dict[str, str] = {}
    for _, data in _projects():
        scripts |= data.get("project", {}).get("scripts", {})
    return scripts


def main(argv: list[str]) -> int:
    scripts = entry_points()
    if not argv or argv[0] not in scripts:
        names = ", ".join(sorted(scripts))
        print(f"usage: {Path(__file__).name} NAME [ARGS...]; NAME is one of this checkout's: {names}", file=sys.stderr)
        return 2
    module, _, function = scripts[argv[0]].partition(":")
    sys.path[:0] = code_paths()
    sys.argv = list(argv)  # as the installed console script sees them
    result = getattr(import_module(module), function)()
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
