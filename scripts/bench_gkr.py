"""Benchmark: how fast gkr answers (target: dry-run median under 300 ms).

Runs `gkr --help` and `gkr submit -f <example> --dry-run` as a researcher
would (a fresh process each time) and prints medians over --runs runs.

    .venv/bin/python scripts/bench_gkr.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GKR = Path(sys.executable).parent / "gkr"
TARGET_MS = 300.0


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=REPO, capture_output=True, check=True)
    return (time.perf_counter() - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    cases = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "gkr --help": [str(GKR), "--help"],
        "gkr submit --dry-run (128-node RayJob)": [
            str(GKR), "submit", "--fleet", "fleet.yaml", "-f", "platform/gkr/examples/pretrain-128-nodes.yaml", "--dry-run",
        ],
    }  # fmt: skip
    medians = {}
    for name, command in cases.items():
        timed(command)  # warm the file cache
        runs = [timed(command) for _ in range(args.runs)]
        medians[name] = statistics.median(runs)
        print(f"{name:42} median {medians[name]:6.0f} ms  (min {min(runs):.0f}, max {max(runs):.0f}, {args.runs} runs)")
    dry_run = medians["gkr submit --dry-run (128-node RayJob)"]
    print(
        f"dry-run: {dry_run:.0f} ms = {dry_run / TARGET_MS:.2f} x the {TARGET_MS:.0f} ms target: {'met' if dry_run < TARGET_MS else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
