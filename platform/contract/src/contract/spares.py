"""Spare replica groups a run holds (issue 28): one rule, read by gkr (the job key `spare_groups`) and by
fleet's goodput model (the shipped path), so the model costs what gkr renders.

A spare is a replica group's worth of Ray workers admitted with the run (Kueue admits the whole RayJob
as one gang) and idle: when a group's node fails, the trainer's supervisor starts the replacement
group on it at once and torchft heals it from a live group, while Warden repairs the old node, which
comes back as the next spare. It costs its GPUs all the time; it saves the failed group's wait for
the repair (`meridian goodput` prints both), and it keeps the run at its full number of groups.
"""

from __future__ import annotations

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
