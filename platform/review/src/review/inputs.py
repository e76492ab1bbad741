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

Build hooks anywhere in the tree (`setup.py`, `setup.cfg`, a `.pth` file,
`sitecustomize.py`) are machinery too: they run at `make setup`, before any
code of the project is asked anything, on every machine that builds the
environment (issue 36: a `platform/telemetry/setup.py` put BASE's infra code
back before the plan was taken).

The workflow runs for every pull request (a path filter would leave a required
check pending on the others, and a pull request's own workflow file decides
its filter); the deciding side compares each change's files with this list.
CODEOWNERS covers more (`OWNED`): everything that runs at plan or deploy time
or in a cluster, including what the review does not compare (gkr, Warden, the
trainer, the images they ship in, CI and the tests that keep this list and
CODEOWNERS in step; tests/test_codeowners.py).
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
    ".ci/",
)
# File names that run when the environment is built, wherever they are (see above).
BUILD_HOOKS = ("setup.py", "setup.cfg", "*.pth", "sitecustomize.py", "usercustomize.py")
# What CODEOWNERS covers beyond what the review reads: all that runs at plan or deploy time or in a cluster.
OWNED = (
    "platform/",
    "infra/",
    "scripts/",
    "kustomize/",
    "argocd/",
    "generated/",
    "requirements/",
    ".github/",
    ".ci/",
    "tests/",
    "fleet.yaml",
    "Makefile",
    "pyproject.toml",
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
    return _folded({*DATA, *MACHINERY, *plan_code(root)})


def _folded(every: set[str]) -> list[str]:
    folders = [e for e in every if e.endswith("/")]
    return sorted(e for e in every if not any(e != f and e.startswith(f) for f in folders))


def matches(path: str, pattern: str) -> bool:
    """`path` (repository-relative) falls under `pattern` (a folder with `/`, a file, or a glob without `/**`)."""
    if pattern.endswith("/"):
        return path.startswith(pattern)
    return fnmatch.fnmatchcase(path, pattern) and path.count("/") == pattern.count("/")


def build_hook(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path.rpartition("/")[2], h) for h in BUILD_HOOKS)


def changed_inputs(inputs: list[str], paths: list[str]) -> list[str]:
    """The paths among `paths` that fall under `inputs` (a checkout's `plan_inputs`), and build hooks."""
    return [p for p in paths if build_hook(p) or any(matches(p, i) for i in inputs)]


def owned(root: Path) -> list[str]:
    """Every path CODEOWNERS must give to a platform owner: what the review reads, and `OWNED`."""
    return _folded({*plan_inputs(root), *OWNED})


def machinery(paths: list[str]) -> list[str]:
    """The changed paths that run or judge the review: reported first, and a code owner must approve them."""
    return [p for p in paths if build_hook(p) or any(matches(p, m) for m in MACHINERY)]
