"""meridian-twin: build the project's images as CPU twins (`build`), list them (`images`).

The rendered pods run in the twin's scenarios (`make twin` runs `pytest -m twin tests/twin`).
A problem is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from twin import images
from twin.engine import TwinError

REPO = Path(__file__).resolve().parents[4]


def _log(line: str) -> None:
    print(f"twin: {line}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="meridian-twin", description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the base stand-ins and every Dockerfile under platform/")
    build.add_argument("--only", action="append", metavar="NAME", help="build only this image (repeatable)")
    sub.add_parser("images", help="list each Dockerfile, its upstream base and its stand-in")
    args = parser.parse_args(argv)
    try:
        if args.command == "images":
            for d in images.dockerfiles(REPO):
                print(f"{d.name:<10} {d.path}  base {d.base}  twin {d.stand_in.image}")
            return 0
        start = time.monotonic()
        built = images.build_all(REPO, _log, set(args.only) if args.only else None)
        _log(f"{len(built)} images in {time.monotonic() - start:.0f} s: {', '.join(d.image for d in built)}")
        return 0
    except TwinError as exc:
        print(str(exc).splitlines()[0] if "\n" not in str(exc) else str(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
