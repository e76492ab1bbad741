"""Benchmark: Warden's decision speed and how fast a fault gets a node out of service.

Drives the real policy, state machine and round logic over the simulated
1,280-node cluster (10,240 H200): the median time of one full round
(decisions per second), and simulated seconds from a fault's first signal to
the cordon, for a lone fault and for a 30% correlated failure of one pool.

    .venv/bin/python scripts/bench_warden.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

from warden.policy import Policy, Signal
from warden.simulate import SimCluster
from warden.state import Record

POOLS = {"a": 768, "b": 384, "c": 128}


def cordon_delays(sim: SimCluster, names: list[str], rounds: int) -> list[float]:
    start = sim.now
    seen: dict[str, float] = {}
    for _ in range(rounds):
        sim.step()
        for name in names:
            if name not in seen and sim.nodes[name].cordoned:
                seen[name] = sim.now - start
    return sorted(seen.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    policy = Policy(dry_run=False)

    sim = SimCluster.build(POOLS, policy)
    for i in range(0, 1280, 64):  # 20 faulty nodes spread over the cluster, the rest healthy
        name = list(sim.nodes)[i]
        sim.inject(name, Signal("xid", 79), needs_new_machine=True)
    timings = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        sim.step()
        timings.append(time.perf_counter() - start)
    per_round = statistics.median(timings)
    print(
        f"one round over {len(sim.nodes):,} nodes: median {per_round * 1000:.1f} ms = {len(sim.nodes) / per_round:,.0f} node decisions/s"
    )

    lone = SimCluster.build(POOLS, policy)
    lone.inject("a-0100", Signal("xid", 48))
    (delay,) = cordon_delays(lone, ["a-0100"], 10)
    print(f"lone fault: signal to cordon in {delay:.0f} s of simulated time (rounds every {lone.step_s:.0f} s)")

    burst = SimCluster.build(POOLS, policy)
    names = [f"c-{i:04d}" for i in range(38)]
    for name in names:
        burst.inject(name, Signal("xid", 79), needs_new_machine=True)
    delays = cordon_delays(burst, names, 800)
    phases = {Record.from_annotations(burst.nodes[n].annotations).phase for n in names}
    print(
        f"30% of pool c (38 nodes) at once: first cordon after {delays[0]:.0f} s, median {statistics.median(delays):.0f} s, "
        f"last {delays[-1]:.0f} s; at most {burst.max_out_share_seen['c']:.1%} of the pool out at a time "
        f"(limit {policy.unhealthy_share_limit:.0%}); all back: {phases == {'healthy'}}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
