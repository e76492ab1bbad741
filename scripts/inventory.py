"""Write, or check, the inventories the plan tests compare with (tests/inventory.py has the layout).

For the shipped fleet.yaml and each example fleet in platform/fleet/examples/: the facts of its
synthesized stacks (tests/infra/inventory/<fleet>.yaml) and of each cluster's built Argo CD tree
(tests/gitops/inventory/<fleet>/<cluster>.yaml). A change that alters a plan fails those tests until
the inventories are rewritten; commit them with the change, so the reviewer reads what moved.

    .venv/bin/python scripts/inventory.py --write   # rewrite them (and drop those no fleet makes)
    .venv/bin/python scripts/inventory.py           # check: print each difference, exit 1 if any
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # this file's folder comes first; the layout is the tests' own

from contract.problem import Invalid, report  # noqa: E402
from tests import inventory  # noqa: E402


def write(files: dict[Path, str], orphans: set[Path]) -> int:
    changed = 0
    for path, text in sorted(files.items()):
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed += 1
    for path in sorted(orphans):
        path.unlink()
    print(f"{len(files)} inventories, {changed} rewritten, {len(orphans)} removed")
    return 0


def check(files: dict[Path, str], orphans: set[Path]) -> int:
    problems = [d for path, text in sorted(files.items()) if (d := inventory.difference(path, text))]
    problems += [f"{inventory.relative(p)}: no fleet makes this inventory; remove it" for p in sorted(orphans)]
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"{len(files)} inventories are current")
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/inventory.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the inventories instead of checking them")
    args = parser.parse_args(argv)
    files: dict[Path, str] = {}
    try:
        for fleet in inventory.fleets():
            files |= inventory.expected(fleet)
    except Invalid as exc:
        return report(exc)
    orphans = inventory.committed() - set(files)
    return write(files, orphans) if args.write else check(files, orphans)


if __name__ == "__main__":
    raise SystemExit(main())
