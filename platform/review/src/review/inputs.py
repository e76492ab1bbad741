"""What the plan review reads, so that what triggers it and who owns it derive from one list.

A change to any of these can change a plan, or how the plan is judged:

- the data each side is planned from and the trees Argo CD applies (`DATA`);
- the code that plans a side: the review's own distribution and every local
  distribution it depends on, read from the `pyproject.toml` files (today
  contract, safeyaml, fleet, infra; a new dependency joins by itself);
- the machinery that runs and judges it (`MACHINERY`): the launcher and the
  producer in `scripts/`, the locked third-party versions, the workflows and
  CODEOWNERS, and any distribution's `pyproject.toml` (a new folder under
  `platform/` puts its code on the launcher's path and may declare commands).

The workflow runs for every pull request (a path filter would leave a required
check pending on the others, and a pull request's own workflow file decides
its filter); the deciding side compares each change's files with this list
and CODEOWNERS must cover all of it (tests/review/test_inputs.py).
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

DATA = ("fleet.yaml", "kustomize/", "argocd/", "generated/")
MACHINERY = (
    "platform/review/",
    "scripts/",
    "requirements/",
    ".github/",
    "Makefile",
    "platform/*/pyproject.toml",
    "infra/pyproject.toml",
)
REVIEW = "meridian-review"
_NAME = re.compile(r"[A-Za-z0-9._-]+")


def distributions(root: Path) -> dict[str, tuple[str, list[str]]]:
    """Local distribution name -> (its folder, relative with a trailing slash; the names it depends on)."""
    out = {}
    for path in [*sorted(root.glob("platform/*/pyproject.toml")), root / "infra" / "pyproject.toml"]:
        if not path.is_file():
            continue
        project = tomllib.loads(path.read_text(encoding="utf-8")).get("project", {})
        requires = [m[0] for d in project.get("dependencies", []) if (m := _NAME.match(str(d)))]
        out[str(project.get("name"))] = (path.parent.relative_to(root).as_posix() + "/", requires)
    return out


def plan_code(root: Path) -> list[str]:
    """Folders of the review's distribution and of every local distribution it depends on."""
    local = distributions(root)
    seen, todo = set(), [REVIEW]
    while todo:
        name = todo.pop()
        if name in local and name not in seen:
            seen.add(name)
            todo += local[name][1]
    return sorted(local[n][0] for n in seen)


def plan_inputs(root: Path) -> list[str]:
    """Every path whose change the review must see: folders end in `/`, patterns as CODEOWNERS writes them
    (an entry inside a listed folder is left out: the folder covers it)."""
    every = {*DATA, *MACHINERY, *plan_code(root)}
    folders = [e for e in every if e.endswith("/")]
    return sorted(e for e in every if not any(e != f and e.startswith(f) for f in folders))


def matches(path: str, pattern: str) -> bool:
    """`path` (repository-relative) falls under `pattern` (a folder with `/`, a file, or a glob without `/**`)."""
    if pattern.endswith("/"):
        return path.startswith(pattern)
    return fnmatch.fnmatchcase(path, pattern) and path.count("/") == pattern.count("/")


def changed_inputs(inputs: list[str], paths: list[str]) -> list[str]:
    """The paths among `paths` that fall under `inputs` (a checkout's `plan_inputs`)."""
    return [p for p in paths if any(matches(p, i) for i in inputs)]


def machinery(paths: list[str]) -> list[str]:
    """The changed paths that run or judge the review: reported first, and a code owner must approve them."""
    return [p for p in paths if any(matches(p, m) for m in MACHINERY)]
