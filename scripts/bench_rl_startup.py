"""Benchmark: an RL run's start-up, from the command to its first committed step, and where it goes.

`train.py configs/grpo.yaml` at its defaults (two trainer groups, two generators, the controller in the
launcher), run.steps 1, --runs times; the phases from the run's own records (`rl.jsonl`, `events-<g>.jsonl`),
medians over the runs (issue 41's target: the first committed step under 15 s on this 2-core machine):

- launcher: the command starting to the generators being started (imports, configuration, the controller,
  the Lighthouse);
- generator ready: to each generator's first ask (its imports and engine), the slower of them;
- group started: to each trainer group's `started` event (imports, process group, torchft, model, optimizer),
  the slower one;
- first commit: to step 1's record (the first weight sync, the first batch generated, one step trained).

    .venv/bin/python scripts/bench_rl_startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "platform/trainer/train.py"
GRPO = REPO / "platform/trainer/configs/grpo.yaml"
TARGET_S = 15.0
PHASES = ("launcher", "generator ready", "group started", "first commit")


def rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def one(folder: Path, name: str) -> dict[str, float]:
    """Seconds from the command's start to each phase's end, from one run's records."""
    command = [sys.executable, str(TRAIN), str(GRPO), f"run.name={name}", "run.steps=1", f"run.report_dir={folder}",
               f"checkpoint.dir={folder / 'ckpt' / name}"]  # fmt: skip
    began = time.time()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: the run exited {done.returncode}: {(done.stdout + done.stderr)[-500:]}")
    rl = rows(folder / name / "rl.jsonl")
    groups = [r for g in (0, 1) for r in rows(folder / name / f"events-{g}.jsonl") if r["event"] == "started"]

    def last(found: list[dict[str, object]]) -> float:
        """The slowest one's seconds; NaN when the run has no such record (a checkout before it was added)."""
        return max((float(r["time"]) for r in found), default=float("nan")) - began  # type: ignore[arg-type]

    return {
        "launcher": min(float(r["time"]) for r in rl if r["event"] == "generator_started") - began,  # type: ignore[arg-type]
        "generator ready": last([r for r in rl if r["event"] == "generator_ready"]),
        "group started": last(groups),
        "first commit": last([r for r in rl if r["event"] == "step" and r["step"] == 1]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.runs < 1:
        raise SystemExit("error: --runs must be at least 1")
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-rl-startup-") as scratch:
        for run in range(args.runs):
            runs.append(one(Path(scratch), f"start-{run}"))
            print(f"run {run + 1}/{args.runs}  " + "  ".join(f"{p} {runs[-1][p]:.1f} s" for p in PHASES), flush=True)
    medians = {p: statistics.median(r[p] for r in runs) for p in PHASES}
    print("median  " + "  ".join(f"{p} {medians[p]:.1f} s" for p in PHASES))
    first = medians["first commit"]
    print(
        f"first committed step: median {first:.1f} s, target {TARGET_S:.0f} s: {'met' if first <= TARGET_S else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
