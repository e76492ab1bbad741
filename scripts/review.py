"""Plan review entry point (make review BASE=<ref>): see platform/review/src/review/cli.py."""

from review.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
