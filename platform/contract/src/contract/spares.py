"""Spare replica groups a run holds (issues 28, 40): the one rule for how many, within what bounds, and
what they take, read by gkr (the job key `spare_groups`: checks, rendering, summary), the trainer
(`ft.spare_groups`) and fleet's goodput model (the shipped path), so each costs and accepts what the
others do. `tests/contract/test_spares.py` fails when a second copy of a bound or a count appears.

A spare is a replica group's worth of Ray workers admitted with the run (Kueue admits the whole RayJob
as one gang) and idle: when a group's node fails, the trainer's supervisor starts the replacement
group on it at once and torchft heals it from a live group, while Warden repairs the old node, which
comes back as the next spare. It costs its GPUs all the time; it saves the failed group's wait for
the repair (`meridian goodput` prints both), and it keeps the run at its full number of groups.
"""

from __future__ import annotations

from contract.words import count

MAX = 64  # more spares than this is not a spare, it is a second run
# The default, from `meridian goodput` on the shipped fleet (platform/fleet/README.md, "Spares"): with
# Warden repairing unambiguous faults within half an hour, a group waiting for its node costs less
# goodput than an idle spare (98.87% without, 98.59% with one per 384-group job), so a spare is
# insurance, not a gain: against the long waits (a fault only a person can judge: hours) and for
# runs that must keep their number of groups. Held where it costs little: from 256 groups (under
# 0.4% of the run), one more per 1,024 groups.
SPARE_FROM = 256
PER_SPARE = 1024


def default_spare_groups(groups: int) -> int:
    """Spares a run of `groups` replica groups holds unless its job says otherwise."""
    return 0 if groups < SPARE_FROM else min(MAX, 1 + groups // PER_SPARE)


def most(groups: int) -> int:
    """The most spares a run of `groups` replica groups may hold: more idle groups than training ones is a
    typo (the trainer would refuse it at start, after the whole gang was admitted and paid), and past MAX
    it is a second run."""
    return min(MAX, groups)


def problem(spares: int, groups: int) -> str | None:
    """Why a run of `groups` replica groups may not hold `spares` spares ("what; how to fix"), or None."""
    high = most(groups)
    if 0 <= spares <= high:
        return None
    if spares < 0:
        return f"must be at least 0 (got {spares:,}); use 0 to {high:,}"
    beyond = f"{MAX} spares" if high == MAX else f"the run's {count(groups, 'replica group')}"
    return f"{spares:,} is more than {beyond}; use 0 to {high:,}"


def problem_among(spares: int, nodes: int) -> str | None:
    """As `problem`, for spares among `nodes` nodes of one replica group each (fleet's goodput model)."""
    if problem(spares, nodes - spares) is None:
        return None
    fits = max(s for s in range(min(MAX, nodes) + 1) if problem(s, nodes - s) is None)
    left = count(max(0, nodes - spares), "group")
    return f"{spares:,} among {count(nodes, 'node')} leave {left} to train; use 0 to {fits:,}"


def pods(spares: int, group_gpus: int, gpus_per_pod: int) -> int:
    """Worker pods `spares` spares take: a group's GPUs each, in whole pods (a node fails whole, so a group
    inside one pod makes a spare one pod)."""
    return -(-spares * group_gpus // gpus_per_pod)


def held_by_default(nodes: int) -> int:
    """Of `nodes` nodes (one replica group each, as fleet's goodput model runs them), those not training when
    the largest run whose default spares fit takes them: its spares, and a node too few for one more group
    with its spare (256 nodes: 255 groups, which hold none, and one node idle)."""
    groups = next((g for g in range(nodes, 0, -1) if g + default_spare_groups(g) <= nodes), 0)
    return nodes - groups
