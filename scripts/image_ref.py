"""Print versions.FIELD of fleet.yaml without its digest: the image the workflow builds or resolves.

python scripts/image_ref.py warden_image [--fleet fleet.yaml]
"""

from __future__ import annotations

import argparse
import sys

from contract.problem import Invalid, report
from fleet.load import load
from fleet.pins import PINNABLE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("field", choices=PINNABLE)
    parser.add_argument("--fleet", default="fleet.yaml")
    args = parser.parse_args(argv)
    try:
        fleet = load(args.fleet).fleet
    except Invalid as exc:
        return report(exc)
    image: str = getattr(fleet.versions, args.field)
    print(image.split("@", 1)[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
