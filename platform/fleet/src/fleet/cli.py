"""`meridian`: the platform engineer's command for the fleet spec.

    meridian plan [--fleet FILE] [--json]

Exit codes: 0 success, 2 invalid input (one line per problem on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from fleet.load import load
from fleet.problems import SpecError
from fleet.summary import as_json, render


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="meridian", description="Plan and inspect the Meridian GPU fleet.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for unexpected errors")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan", help="validate the fleet spec, plan address ranges, print the summary")
    plan.add_argument("--fleet", default="fleet.yaml", help="fleet spec to read (default: fleet.yaml)")
    plan.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        loaded = load(args.fleet)
    except SpecError as exc:
        for line in exc.lines:
            print(f"error: {line}", file=sys.stderr)
        return 2
    except Exception as exc:
        if args.debug:
            raise
        print(f"internal error: {exc!r}; rerun with --debug and report it", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(as_json(loaded.fleet, loaded.addresses), indent=2))
    else:
        sys.stdout.write(render(loaded.fleet, loaded.addresses))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
