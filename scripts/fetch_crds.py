"""Fill .cache/crds with the pinned upstream CRDs, for machines without ../shared/crds.

    .venv/bin/python scripts/fetch_crds.py [--fleet fleet.yaml]

Validation (make test) looks in $MERIDIAN_CRDS, ../shared/crds, then .cache/crds.
Needs network access to GitHub; CI uses ../shared/crds instead.
"""

from __future__ import annotations

import argparse
import urllib.request
from pathlib import Path

from contract.problem import Invalid, report
from fleet.gitops.crd_sources import crd_sources
from fleet.load import load

CACHE = Path(__file__).resolve().parent.parent / ".cache" / "crds"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fleet", default="fleet.yaml")
    args = parser.parse_args()
    try:
        fleet = load(args.fleet).fleet
    except Invalid as exc:
        return report(exc)
    for relative, url in crd_sources(fleet):
        target = CACHE / relative
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=60) as response:
            body = response.read()
        partial = target.with_suffix(".part")
        partial.write_bytes(body)
        partial.rename(target)
        print(f"fetched {relative}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
