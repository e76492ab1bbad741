"""Benchmark: hostile input against the loaders and parsers (issue 15).

Prints, from one run: the largest document the YAML loader accepts (just under
its byte limit) with its load time and peak memory (resource.getrusage in a
fresh subprocess, less that subprocess's baseline), the time to refuse a
billion-laughs file and a 1,000-deep list, Warden's JSON config read and
hostile ones refused, and the kernel-log parser on hostile 1 MB lines.
Medians over --runs runs; ratios against the shipped fleet.yaml.

    .venv/bin/python scripts/bench_faults.py [--runs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Runs in a fresh interpreter: peak RSS after the load, less the peak after the imports alone.
_CHILD = """
import json, resource, sys, time
import safeyaml
from fleet.yamlsource import parse
text = open(sys.argv[1], encoding="utf-8").read()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
outcome = "accepted"
try:
    parse(text)
except Exception as exc:
    outcome = f"refused: {exc}"
took = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"s": took, "kib": peak - base, "outcome": outcome[:80]}))
"""


def largest_document(max_bytes: int, max_nodes: int) -> str:
    """A list of small mappings (5 nodes, 30 bytes each) filling the byte limit within the node limit."""
    item = "  - {n: 123456, v: abcdefghij}\n"
    count = min((max_bytes - 8) // len(item), (max_nodes - 2) // 5)
    return "items:\n" + item * count


def in_child(path: Path) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, check=True, cwd=REPO
    )
    data: dict[str, object] = json.loads(result.stdout)
    return data


def median_ms(action: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        with contextlib.suppress(Exception):  # refusing is what is measured
            action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def yaml_loads(runs: int) -> None:
    """The shipped fleet.yaml and the largest document the limits accept, each loaded in a fresh interpreter."""
    import safeyaml

    limits = safeyaml.DEFAULT
    tmp = REPO / ".bench_faults.yaml"
    try:
        rows = {}
        for name, text in {
            "shipped fleet.yaml": (REPO / "fleet.yaml").read_text(),
            "largest accepted": largest_document(limits.max_bytes, limits.max_nodes),
        }.items():
            tmp.write_text(text)
            children = [in_child(tmp) for _ in range(runs)]
            seconds = statistics.median(float(str(r["s"])) for r in children)
            kib = statistics.median(int(str(r["kib"])) for r in children)
            rows[name] = seconds
            print(
                f"{name:22} {len(text.encode()):>9,} bytes  load+lines median {seconds * 1000:8.1f} ms  "
                f"peak RSS +{kib / 1024:6.1f} MiB  ({children[0]['outcome']})"
            )
        print(f"largest / shipped: {rows['largest accepted'] / rows['shipped fleet.yaml']:.0f} x the time")
    finally:
        tmp.unlink(missing_ok=True)
    print(
        f"limits: {limits.max_bytes:,} bytes, depth {limits.max_depth}, {limits.max_aliases} aliases, {limits.max_nodes:,} values"
    )


def yaml_refusals(runs: int) -> None:
    import safeyaml
    from tests.faults.hostile import HOSTILE

    for case in ("billion laughs", "deep list", "oversized", "long int"):
        text = HOSTILE[case][0]
        print(f"refuse {case:16} median {median_ms(functools.partial(safeyaml.load, text), runs):8.2f} ms")


def warden_configs(runs: int) -> None:
    """Warden's config (contract.warden): the generated one read, hostile ones refused."""
    from contract import warden as warden_config
    from tests.faults.hostile import HOSTILE_CONFIGS

    generated = warden_config.dumps(warden_config.DEFAULTS)
    ms = median_ms(functools.partial(warden_config.loads, generated, "config.json"), runs)
    print(f"warden config {len(generated.encode()):>7,} bytes  load median {ms:8.2f} ms")
    for case in ("deep list", "long int", "NaN"):
        hostile = HOSTILE_CONFIGS[case][0].decode()
        ms = median_ms(functools.partial(warden_config.loads, hostile, "config.json"), runs)
        print(f"warden refuse {case:14} median {ms:8.2f} ms")


def kernel_log_lines(runs: int) -> None:
    """the kernel-log parser (contract.kernel_log) on 1 MB lines shaped to make a careless pattern backtrack."""
    from contract import kernel_log

    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."
    megabyte = 1024 * 1024
    lines = {
        "1 MB of 'x'": "x" * megabyte,
        "1 MB Xid with digits": "[12.5] " + xid + " " + "9" * megabyte,
        "1 MB of '[' (timestamp)": "[" * megabyte + "] " + xid,
        "1 MB of 'NVRM: Xid ('": "NVRM: Xid (" * (megabyte // 11),
    }
    for name, line in lines.items():
        ms = median_ms(functools.partial(kernel_log.parse, [line], year=2026), runs)
        print(f"kernel_log.parse {name:26} median {ms:8.2f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sys.path[:0] = [
        str(REPO / "platform/contract/src"),
        str(REPO / "platform/fleet/src"),
        str(REPO / "platform/preflight/src"),
        str(REPO),
    ]
    yaml_loads(args.runs)
    yaml_refusals(args.runs)
    warden_configs(args.runs)
    kernel_log_lines(args.runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
