"""What the synchronization period buys across regions: tokens/s over a WAN link, and what it costs in loss.

1. measure: real runs of the reference task (the `tiny` model, Markov data, 2 replica groups on this CPU):
   DDP, DiLoCo at each --sync-every, streaming DiLoCo; each gives the compute time per inner step (median
   interval between commits / inner steps per commit), the bytes per sync (bytes handed to all-reduce /
   syncs) and the held-out loss after the same number of inner steps.
2. model (trainer/distributed/link.py): tokens/s of the run over links of --gbps x --rtt-ms; per sync the ring
   all-reduce takes (n-1) x RTT + 2(n-1)/n x bytes / bandwidth, all exposed (DDP, DiLoCo) or less the
   compute of the fragment_sync_delay inner steps it overlaps (streaming DiLoCo, as torchft does).
3. scaled: the same model for the `1b` and `8b` configurations' fp32 parameter bytes, with an ASSUMED
   H200 step time: tokens per step x FLOPs per token / (GPUs x MFU x 989 TFLOPS).
4. verify: DDP, DiLoCo at the first --sync-every and streaming DiLoCo, each run without and then with the
   link emulator (ft.link_rtt_ms, ft.link_gbps): measured time per inner step against the model's, given the
   unemulated run's compute time, within --tolerance.

It is a model of the link, not a measurement of GCP's network.

    .venv/bin/python scripts/bench_cross_region.py [--steps 1000] [--sync-every 10,50,100,500] [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trainer.config import compose
from trainer.distributed.link import inner_step_s
from trainer.model.flops import flops_per_token, parameters
from trainer.observe.runs import read_events

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "platform/trainer/train.py"
CONFIG = REPO / "platform/trainer/configs/config.yaml"
GROUPS = 2
H200_BF16_TFLOPS = 989.0  # dense bf16 peak per GPU, the fleet registry's figure
STREAMING = {"fragments": 2, "fragment_sync_delay": 5}  # tiny has 2 layers: at most 2 fragments


@dataclass(frozen=True)
class Setup:
    """One way to train: how often it syncs, how much of the model, and how much of it overlaps compute."""

    name: str
    overrides: tuple[str, ...]
    steps_per_sync: int  # inner steps per committed step
    fraction: float = 1.0  # of the model's bytes per sync
    overlap_steps: int = 0


def setups(sync_every: list[int], streaming_every: int) -> list[Setup]:
    out = [Setup("DDP", ("optim=ddp",), 1)]
    out += [Setup(f"DiLoCo H={h}", ("optim=diloco", f"optim.sync_every={h}"), h) for h in sync_every]
    f, d = STREAMING["fragments"], STREAMING["fragment_sync_delay"]
    out.append(
        Setup(
            f"streaming H={streaming_every} F={f} d={d}",
            (
                "optim=streaming_diloco",
                f"optim.sync_every={streaming_every}",
                f"optim.fragments={f}",
                f"optim.fragment_sync_delay={d}",
            ),
            streaming_every // f,
            1 / f,
            d,
        )
    )
    return out


@dataclass(frozen=True)
class Measured:
    compute_s: float  # per inner step
    bytes_per_sync: int
    loss: float
    inner_steps: int


def train(workdir: Path, name: str, steps: int, overrides: tuple[str, ...]) -> Path:
    command = [
        sys.executable, str(TRAIN), str(CONFIG), f"run.name={name}", f"run.steps={steps}",
        f"run.report_dir={workdir / 'runs'}", f"checkpoint.dir={workdir / 'ck' / name}", "checkpoint.every=100000",
        f"ft.replica_groups={GROUPS}", f"ft.min_replicas={GROUPS}", "run.log_every=1000000", *overrides,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench_cross_region: run {name} failed ({done.returncode}): {done.stdout[-400:]}")
    return workdir / "runs" / name


def measure(run_dir: Path, setup: Setup) -> Measured:
    """Compute per inner step, bytes per sync and held-out loss, from group 0's events."""
    events = read_events(run_dir, 0)
    commits = [e["time"] for e in events if e["event"] == "commit"]
    final = next(e for e in events if e["event"] == "final")
    intervals = [b - a for a, b in itertools.pairwise(commits)]
    return Measured(
        compute_s=statistics.median(intervals) / setup.steps_per_sync,
        bytes_per_sync=round(final["bytes_sent"] / len(commits)),
        loss=final["loss"],
        inner_steps=final["inner_steps"],
    )


def tokens_per_s(
    setup: Setup, compute_s: float, payload: int, tokens_per_step: int, rtt_ms: float, gbps: float
) -> float:
    step = inner_step_s(compute_s, setup.steps_per_sync, payload, GROUPS, rtt_ms, gbps, setup.overlap_steps)
    return GROUPS * tokens_per_step / step


def link_table(
    rows: list[tuple[Setup, float, int]], tokens_per_step: int, gbps: list[float], rtts: list[float]
) -> list[list[str]]:
    """One row per setup: tokens/s with no link, then for every (bandwidth, RTT), as % of no link."""
    table = [["setup", "step s", "MB/sync", "no link tok/s", *[f"{g:g}G/{r:g}ms" for g in gbps for r in rtts]]]
    for setup, compute_s, payload in rows:
        free = tokens_per_s(setup, compute_s, payload, tokens_per_step, 0, 0)
        cells = [tokens_per_s(setup, compute_s, payload, tokens_per_step, r, g) / free for g in gbps for r in rtts]
        table.append(
            [setup.name, f"{compute_s:.3g}", f"{payload / 1e6:.3g}", f"{free:,.0f}", *[f"{c:.0%}" for c in cells]]
        )
    return table


def scaled_rows(
    model: str, setups_: list[Setup], gpus: int, mfu: float, batch_tokens: int
) -> list[tuple[Setup, float, int]]:
    """The ASSUMED H200 step time of one replica group of ``gpus`` GPUs, and the fp32 bytes it syncs."""
    m = compose(CONFIG, ["run.name=bench", f"model={model}"]).model
    step_s = batch_tokens * flops_per_token(m) / (gpus * mfu * H200_BF16_TFLOPS * 1e12)
    model_bytes = 4 * parameters(m).total  # fp32 gradients / pseudo-gradients: the parameters' dtype here
    return [(s, step_s, round(model_bytes * s.fraction)) for s in setups_]


def render(table: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    return "\n".join([lines[0], "-+-".join("-" * w for w in widths), *lines[1:]])


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="inner steps of each measured run")
    parser.add_argument("--sync-every", default="10,50,100,500")
    parser.add_argument("--streaming-every", type=int, default=100)
    parser.add_argument("--gbps", default="10,25,100")
    parser.add_argument("--rtt-ms", default="10,30,80")
    parser.add_argument("--verify-steps", type=int, default=200)
    parser.add_argument("--verify-link", default="80,0.1", help="RTT ms, Gbit/s of the emulated runs")
    parser.add_argument("--tolerance", type=float, default=0.25, help="measured vs modelled step time")
    parser.add_argument("--gpus", type=int, default=64, help="scaled: GPUs per replica group (one region)")
    parser.add_argument("--mfu", type=float, default=0.40, help="scaled: ASSUMED MFU on H200")
    parser.add_argument("--batch-tokens", type=int, default=2**21, help="scaled: tokens per step per group")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args()


def verify_link(work: Path, setup: Setup, index: int, steps: int, rtt_ms: float, gbps: float) -> dict[str, Any]:
    """Measured against modelled time per inner step over the emulated link.

    The setup runs without and then with the emulator, back to back: the model takes the compute time of
    the run just before (the load varies).
    """
    base = measure(train(work, f"b{index}", steps, setup.overrides), setup)
    link = (f"ft.link_rtt_ms={rtt_ms}", f"ft.link_gbps={gbps}")
    emulated = measure(train(work, f"v{index}", steps, (*setup.overrides, *link)), setup)
    modelled = inner_step_s(
        base.compute_s, setup.steps_per_sync, base.bytes_per_sync, GROUPS, rtt_ms, gbps, setup.overlap_steps
    )
    return {"setup": setup.name, "no_link_s": base.compute_s, "measured_s": emulated.compute_s,
            "modelled_s": modelled, "error": emulated.compute_s / modelled - 1}  # fmt: skip


def print_models(
    args: argparse.Namespace, measured: dict[str, Measured], all_setups: list[Setup], tokens_per_step: int
) -> None:
    """Held-out loss per setup, then tokens/s over the links for tiny as measured and for 1b and 8b as assumed."""
    gbps = [float(g) for g in args.gbps.split(",")]
    rtts = [float(r) for r in args.rtt_ms.split(",")]
    ddp_loss = measured["DDP"].loss
    print(f"measured: tiny, {GROUPS} groups, {args.steps} inner steps each, this CPU (gloo)")
    loss = [["setup", "held-out loss", "vs DDP"]]
    loss += [
        [s.name, f"{measured[s.name].loss:.4f}", f"{measured[s.name].loss / ddp_loss - 1:+.1%}"] for s in all_setups
    ]
    print(render(loss))
    rows = [(s, measured[s.name].compute_s, measured[s.name].bytes_per_sync) for s in all_setups]
    print("\nmodel, tiny at this CPU's measured step time: tokens/s over the link, % of no link")
    print(render(link_table(rows, tokens_per_step, gbps, rtts)))
    for model in ("1b", "8b"):
        print(
            f"\nmodel, {model} fp32 bytes, ASSUMED H200 step: {args.gpus} GPUs per group at {args.mfu:.0%} MFU of "
            f"{H200_BF16_TFLOPS:g} TFLOPS, {args.batch_tokens:,} tokens per step per group"
        )
        scaled = scaled_rows(model, all_setups, args.gpus, args.mfu, args.batch_tokens)
        print(render(link_table(scaled, args.batch_tokens, gbps, rtts)))


def print_verification(args: argparse.Namespace, verified: list[dict[str, Any]], rtt_ms: float, gbps: float) -> None:
    print(
        f"\nverify: emulated link {rtt_ms:g} ms, {gbps:g} Gbit/s, {args.verify_steps} inner steps; tolerance ±{args.tolerance:.0%}"
    )
    verify = [["setup", "no link s/step", "measured s/step", "modelled s/step", "error", ""]]
    for v in verified:
        ok = "ok" if abs(v["error"]) <= args.tolerance else "OUTSIDE"
        verify.append(
            [
                v["setup"],
                f"{v['no_link_s']:.4f}",
                f"{v['measured_s']:.4f}",
                f"{v['modelled_s']:.4f}",
                f"{v['error']:+.1%}",
                ok,
            ]
        )
    print(render(verify))


def main() -> int:
    args = _arguments()
    sync_every = [int(h) for h in args.sync_every.split(",")]
    rtt_v, gbps_v = (float(x) for x in args.verify_link.split(","))
    all_setups = setups(sync_every, args.streaming_every)
    cfg = compose(CONFIG, ["run.name=bench"])
    tokens_per_step = cfg.data.batch_size * cfg.model.seq_len
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    results: dict[str, Any] = {"load_before": load_before, "setups": {}, "verify": []}
    with tempfile.TemporaryDirectory(prefix="bench-xr-") as tmp:
        work = Path(tmp)
        measured: dict[str, Measured] = {}
        for i, setup in enumerate(all_setups):
            measured[setup.name] = measure(train(work, f"m{i}", args.steps, setup.overrides), setup)
            results["setups"][setup.name] = asdict(measured[setup.name])
        # Verification: DDP, the shortest DiLoCo period and streaming.
        for i, setup in enumerate([all_setups[0], all_setups[1], all_setups[-1]]):
            results["verify"].append(verify_link(work, setup, i, args.verify_steps, rtt_v, gbps_v))
    results["seconds"] = time.monotonic() - started
    results["load_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print_models(args, measured, all_setups, tokens_per_step)
    print_verification(args, results["verify"], rtt_v, gbps_v)
    print(f"\n{results['seconds']:.0f} s; load average {load_before:.1f} -> {results['load_after']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
