"""Plan review entry point (`make review BASE=<ref>`, the plan-review workflow): this checkout's
`meridian-review` (platform/review), run with this checkout's code by scripts/run_checkout.py.

Not `from review.cli import main`: this file's folder comes first on sys.path, and this file is
named `review` too.
"""

import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.argv = [str(Path(__file__).with_name("run_checkout.py")), "meridian-review", *sys.argv[1:]]
    runpy.run_path(sys.argv[0], run_name="__main__")
