"""The pinned upstream CRDs that validation reads: checked where this machine provides them, else downloaded.

    .venv/bin/python scripts/fetch_crds.py                          # make setup, plan, generate, review and unit run it
    .venv/bin/python scripts/fetch_crds.py --write-lock ../shared/crds [--fleet fleet.yaml]

Validation looks in $MERIDIAN_CRDS, ../shared/crds, then .cache/crds. A pinned folder found in one of the
first two must hold every file requirements/crds.lock.json lists for it, with that sha256; one found in
neither is downloaded into .cache/crds from the lock's URLs (GitHub), each body checked against its sha256
before any is written. Any problem is one line and exit 2, with nothing half-written. `--write-lock DIR`
rewrites the lock from the files in DIR for the versions the fleet pins (after a version bump).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from contract.problem import Invalid, report
from fleet.gitops import crd_fetch, crd_lock
from fleet.gitops.validate import crd_roots

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "crds"
# Upstream's scheme and host replaced by this one (the tests' local server); every byte is still checked.
BASE_URL = "MERIDIAN_CRDS_BASE_URL"


def _write_lock(folder: Path, fleet_path: str) -> int:
    from fleet.gitops.crd_sources import crd_sources
    from fleet.load import load

    lock = crd_lock.lock_of(crd_sources(load(fleet_path).fleet), folder)
    (REPO / crd_lock.LOCK).write_text(crd_lock.dumps(lock))
    print(f"wrote {crd_lock.LOCK}: {len(lock.files)} files from {folder}")
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Invalid(
            [f"{crd_lock.LOCK}: cannot be read ({exc}); restore it with `git checkout -- {crd_lock.LOCK}`"]
        ) from None


def _where(path: Path) -> str:
    return os.path.relpath(path, REPO) if path.is_relative_to(REPO.parent) else str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write-lock", type=Path, metavar="DIR", help="rewrite the lock from the CRDs in DIR")
    parser.add_argument("--fleet", default="fleet.yaml", help="with --write-lock: the spec whose versions to lock")
    args = parser.parse_args()
    try:
        if args.write_lock:
            return _write_lock(args.write_lock, args.fleet)
        lock = crd_lock.loads(_read(REPO / crd_lock.LOCK), str(crd_lock.LOCK))
        found = crd_fetch.ensure(lock, crd_roots(REPO), CACHE, os.environ.get(BASE_URL) or None)
    except Invalid as exc:
        return report(exc)
    roots = sorted({_where(root) for root in found.provided.values()})
    print(
        f"pinned CRDs: {len(lock.files)} files checked against {crd_lock.LOCK}: "
        f"{len(lock.files) - len(found.cached) - len(found.fetch)} provided ({', '.join(roots) or 'none'}), "
        f"{len(found.cached)} already in .cache/crds, {len(found.fetch)} downloaded into it"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
