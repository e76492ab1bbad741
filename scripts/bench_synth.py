"""Benchmark: wall time and peak memory to synthesize fleets of 1, 3 and 8 regions.

Each run is a fresh process, as `make plan` and `cdktn synth` are: it pays for
importing CDK Terrain and starting the jsii Node.js runtime once, then builds
and writes every stack. Prints medians over --repeats runs and the cost of
each added region as a share of the one-region time (target: at most 10%).

    .venv/bin/python scripts/bench_synth.py [--repeats 3] [--sizes 1,3,8]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from fleet.catalog import REGIONS

REPO = Path(__file__).resolve().parent.parent
TARGET = 0.10

# Regions for the generated fleets, each with a zone that offers its GPU machine.
REGION_ZONES = [
    ("us-central1", "us-central1-b", "a3-ultragpu-8g"),
    ("us-east4", "us-east4-b", "a3-ultragpu-8g"),
    ("europe-west1", "europe-west1-b", "a3-ultragpu-8g"),
    ("us-west1", "us-west1-c", "a3-ultragpu-8g"),
    ("asia-south1", "asia-south1-b", "a3-ultragpu-8g"),
    ("asia-southeast1", "asia-southeast1-b", "a3-ultragpu-8g"),
    ("us-east5", "us-east5-a", "a3-megagpu-8g"),
    ("europe-west4", "europe-west4-b", "a3-megagpu-8g"),
]

# Runs in the child: time the import and the synthesis, then read the peak
# resident memory of this process and of the jsii Node.js process it started.
CHILD = """
import json, os, sys, time
t0 = time.perf_counter()
from meridian_infra.synth import synth
t1 = time.perf_counter()
synth(sys.argv[1], __import__("pathlib").Path(sys.argv[2]))
t2 = time.perf_counter()
def peak(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0
def descendants(pid):
    kids = open(f"/proc/{pid}/task/{pid}/children").read().split()
    return [k for kid in kids for k in (kid, *descendants(kid))]
me = os.getpid()
# jsii's runtime starts a second Node.js process for its kernel: count them all.
node = sum(peak(pid) for pid in descendants(me))
print(json.dumps({"import_s": t1 - t0, "synth_s": t2 - t1, "python_mb": peak(me), "node_mb": node}))
"""


def fleet_of(regions: int) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((REPO / "fleet.yaml").read_text())
    template = spec["regions"][0]
    spec["regions"] = []
    for name, zone, machine in REGION_ZONES[:regions]:
        region = copy.deepcopy(template)
        region["name"] = name
        region["zones"] = list(REGIONS[name][:3]) if zone in REGIONS[name][:3] else [zone, *REGIONS[name][:2]]
        region["gpu_pools"] = [
            {
                "name": "gpu-a",
                "machine_type": machine,
                "zone": zone,
                "nodes": 128,
                "capacity": {"mode": "reservation", "reservation": f"{name}-a"},
            },
            {
                "name": "gpu-flex",
                "machine_type": machine,
                "zone": zone,
                "nodes": 64,
                "capacity": {"mode": "flex_start"},
            },
        ]
        spec["regions"].append(region)
    spec["teams"] = [{**spec["teams"][0], "quota": {name: 512 for name, _, _ in REGION_ZONES[:regions]}}]
    return spec


def run_once(spec_path: Path, workdir: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(spec_path), str(workdir / "cdktf.out")],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"synthesis of {spec_path.name} failed:\n{out.stderr[-2000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", default="1,3,8")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    rows: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            spec_path = Path(tmp) / f"fleet-{size}.yaml"
            spec_path.write_text(yaml.safe_dump(fleet_of(size), sort_keys=False))
            runs = [run_once(spec_path, Path(tmp)) for _ in range(args.repeats)]
            rows[size] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
            rows[size]["total_s"] = statistics.median(r["import_s"] + r["synth_s"] for r in runs)

    print(f"synthesis of every stack, fresh process each run, median of {args.repeats}")
    print(f"{'regions':>7}  {'total s':>8}  {'import s':>8}  {'synth s':>8}  {'python MB':>9}  {'node MB':>8}")
    for size, row in rows.items():
        print(
            f"{size:>7}  {row['total_s']:>8.2f}  {row['import_s']:>8.2f}  {row['synth_s']:>8.2f}  "
            f"{row['python_mb']:>9.0f}  {row['node_mb']:>8.0f}"
        )
    first = sizes[0]
    base = rows[first]["total_s"]
    met = True
    for size in sizes[1:]:
        per_region = (rows[size]["total_s"] - base) / (size - first)
        share = per_region / base
        met &= share <= TARGET
        print(
            f"each region added from {first} to {size}: {per_region:.3f} s = {share:.1%} of the {first}-region time (target <= {TARGET:.0%})"
        )
    print("target met" if met else "target NOT met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
