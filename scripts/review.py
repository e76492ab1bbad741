"""Plan review entry point (make review BASE=<ref>): see fleet/review/cli.py."""

from fleet.review.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
