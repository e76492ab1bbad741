"""How a trainer process ends: everything it writes is written by then, so Python's final garbage collection
is skipped.

At exit Python collects every object left in a reference cycle; after importing torch (and what it pulls in)
that took about 3 seconds of one core per process, after the run's last event: a rank, then its launcher
waiting for it, then the generators of an RL run. ``gc.freeze()`` moves what is alive into the permanent
generation, which that collection leaves alone; files are closed and logs flushed as before (atexit and the
standard streams do not depend on it).
"""

from __future__ import annotations

import gc
import sys
from typing import NoReturn

# Exit codes of a replica-group (or generator) process that the launchers treat as final (never restarted):
# restarting would only repeat them.
EXIT_REFUSED = 2  # checkpoint.dir has step data but nothing that verifies (also train.py's own exit)
EXIT_NONFINITE = 3  # non-finite loss or gradient norm for run.max_nonfinite_steps attempts in a row
EXIT_STOPPED = 4  # the launcher's: an RL run that cannot go on (no batch can be formed: rl/controller.py)


def exit_process(code: int | None) -> NoReturn:
    """``sys.exit(code)`` without the final collection of this process's objects."""
    gc.freeze()
    sys.exit(code)
