"""`meridian goodput`'s table and its JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from fleet.goodput import nodeloss
from fleet.goodput.failures import DAYS, GPUS, SOURCE, UNEXPECTED
from fleet.goodput.simulate import BUCKETS
from fleet.goodput.sweep import Estimate, FleetEstimate

GOAL = 0.97  # issue 20, and issue 28 for the shipped path: the goal this work is measured against
LOSSES = BUCKETS[1:]  # every bucket but productive, as shares of paid time in the table


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:,.0f} min"


def _row(row: str, e: Estimate) -> str:
    r = e.result
    shares = "  ".join(f"{r.buckets[b] / r.paid:>9.2%}" for b in LOSSES)
    return (
        f"{e.job.name:<13} {e.job.gpus:>6,} {e.interruptions_per_day:>6.2f}  {row:<9}"
        f"{r.goodput:>8.2%}  {_minutes(e.interval_s):>9} {_minutes(e.young_daly_s):>9}  {shares}"
    )


def render(est: FleetEstimate) -> str:
    head = "  ".join(f"{b:>9}" for b in LOSSES)
    lines = [
        f"Fleet goodput: {est.days:g} days, {len(est.seeds)} seeds from {est.seeds[0]}; failures per node-second"
        f" from {SOURCE} ({UNEXPECTED} unexpected interruptions on {GPUS:,} GPUs in {DAYS} days);"
        f" checkpoint blocks {est.costs.blocked_s:.1f} s, durable after {est.costs.durable_lag_s:.0f} s",
        "",
        f"{'job':<13} {'GPUs':>6} {'int/d':>6}  {'mode':<9}{'goodput':>8}  {'interval':>9} {'Young/Daly':>9}  {head}",
    ]
    names = [r.name for r in est.rows]
    for name in names:
        lines += [_row(name, e) for e in est.regional[name]]
    gpus = sum(e.job.gpus for e in est.regional[names[0]])
    for row in est.rows:
        g = est.goodput(row.name)
        verdict = "meets" if g >= GOAL else "misses"
        lines.append(
            f"{'fleet':<13} {gpus:>6,} {'':>6}  {row.name:<9}{g:>8.2%}  ({verdict} the goal of {GOAL:.0%})  {row.title}"
        )
    if est.cross:
        lines += ["", "instead of the regional jobs, one job across the regions' largest pools:"]
        lines += [_row(n, est.cross[n]) for n in names if n in est.cross]
    c = est.costs
    lines.append("")
    lines.append(
        f"shipped recovery: restart-to-heal {c.restart_to_heal_s:g} s (actor restart {c.actor_restart_s:g} s;"
        f" measured by scripts/bench_trainer.py on CPU) + GPU start {c.gpu_group_init_s:g} s (assumed)"
        f" + state transfer {c.transfer_s:.0f} s (assumed {c.heal_bytes_per_s * 8 / 1e9:g} Gb/s)"
    )
    lines += ["", *nodeloss.lines(est.node_loss)]
    return "\n".join(lines) + "\n"


def _node_loss(path: nodeloss.NodeLoss) -> dict[str, Any]:
    return asdict(path) | {
        "group_down_s": path.group_down_s,
        "group_down_without_spare_s": path.group_down_without_spare_s,
        "gang_down_s": path.gang_down_s,
    }


def _estimate(e: Estimate) -> dict[str, Any]:
    r = e.result
    return {
        "goodput": round(r.goodput, 5),
        "interval_s": round(e.interval_s, 1),
        "young_daly_s": round(e.young_daly_s, 1),
        "interruptions_per_day": round(e.interruptions_per_day, 3),
        "shares": {b: round(r.buckets[b] / r.paid, 5) for b in BUCKETS},
        "interruptions": dict(sorted(r.interruptions.items())),
    }


def _job(modes: Mapping[str, Estimate]) -> dict[str, Any]:
    job = next(iter(modes.values())).job
    return {
        "name": job.name,
        "pools": list(job.pools),
        "nodes": job.nodes,
        "gpus": job.gpus,
        "repair_slots": job.slots,
        "spares": {m: e.job.spares for m, e in modes.items()},
        "rows": {m: _estimate(e) for m, e in modes.items()},
    }


def as_json(est: FleetEstimate) -> dict[str, Any]:
    c = est.costs
    names = [r.name for r in est.rows]
    jobs = [_job({n: est.regional[n][i] for n in names}) for i in range(len(est.regional[names[0]]))]
    derived = {"blocked_s": c.blocked_s, "durable_lag_s": c.durable_lag_s, "heal_s": c.heal_s}
    return {
        "days": est.days,
        "seeds": list(est.seeds),
        "failures": {"source": SOURCE, "unexpected": UNEXPECTED, "gpus": GPUS, "days": DAYS},
        "costs": asdict(c) | derived | {"supervised_heal_s": c.supervised_heal_s, "transfer_s": c.transfer_s},
        "goal": GOAL,
        "rows": [{"name": r.name, "title": r.title, "mode": r.mode, "kueue": r.kueue} for r in est.rows],
        "fleet": {n: round(est.goodput(n), 5) for n in names},
        "node_loss": _node_loss(est.node_loss),
        "jobs": jobs,
        "cross_region": _job(est.cross) if est.cross else None,
    }
