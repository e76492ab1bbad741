"""Benchmark: how fast gkr answers (target: dry-run median at most 250 ms on an idle machine).

Runs `gkr --help` and `gkr submit -f <example> --dry-run` as a researcher
would (a fresh process each time, from the checkout, so gkr finds
generated/registry.json upward) and prints medians over --runs runs. Without a
generated/ folder (before `make generate`), the registry is built into a
temporary folder from fleet.yaml and passed with --registry.

    .venv/bin/python scripts/bench_gkr.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GKR = Path(sys.executable).parent / "gkr"
TARGET_MS = 250.0


def timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=REPO, capture_output=True, check=True)
    return (time.perf_counter() - start) * 1000


def registry_args(scratch: Path) -> list[str]:
    """Nothing when the checkout has its generated registry; else --registry, built here from fleet.yaml."""
    from contract import registry as contract

    if (REPO / contract.GENERATED_DIR / contract.FILE).is_file():
        return []
    from fleet.gitops.schemas import crd_schemas
    from fleet.load import load
    from fleet.registry import registry_of

    loaded = load(REPO / "fleet.yaml")
    (scratch / contract.SCHEMAS_DIR).mkdir(parents=True)
    (scratch / contract.FILE).write_text(contract.dumps(registry_of(loaded)), encoding="utf-8")
    for path, text in crd_schemas(loaded.fleet, REPO).items():
        (scratch / contract.SCHEMAS_DIR / Path(path).name).write_text(text, encoding="utf-8")
    return ["--registry", str(scratch)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-gkr-") as scratch:
        return run(args.runs, registry_args(Path(scratch)))


def run(runs: int, registry: list[str]) -> int:
    cases = {
        "python -c pass (floor)": [sys.executable, "-c", "pass"],
        "gkr --help": [str(GKR), "--help"],
        "gkr submit --dry-run (128-node RayJob)": [
            str(GKR), "submit", *registry, "-f", "platform/gkr/examples/pretrain-128-nodes.yaml", "--dry-run",
        ],
    }  # fmt: skip
    medians = {}
    for name, command in cases.items():
        timed(command)  # warm the file cache
        times = [timed(command) for _ in range(runs)]
        medians[name] = statistics.median(times)
        print(f"{name:42} median {medians[name]:6.0f} ms  (min {min(times):.0f}, max {max(times):.0f}, {runs} runs)")
    dry_run = medians["gkr submit --dry-run (128-node RayJob)"]
    print(
        f"dry-run: {dry_run:.0f} ms = {dry_run / TARGET_MS:.2f} x the {TARGET_MS:.0f} ms target: {'met' if dry_run <= TARGET_MS else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
