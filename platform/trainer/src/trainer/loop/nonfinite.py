"""The non-finite guard: a NaN or infinite loss or gradient norm is never committed, and does not loop forever."""

from __future__ import annotations

import math


class NonFiniteError(RuntimeError):
    """A step's loss or gradient norm is NaN or infinite: what torchft is told, so the step does not commit."""


class NonFiniteStop(NonFiniteError):
    """Non-finite for run.max_nonfinite_steps attempts in a row: the group stops (EXIT_NONFINITE)."""


class NonFiniteGuard:
    """Counts attempts in a row whose loss or total gradient norm is not finite (pure, no I/O)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_a_row = 0

    def check(self, step: int, loss: float, grad_norm: float) -> NonFiniteError | None:
        """None for a finite attempt; otherwise the error to report (NonFiniteStop once it persisted)."""
        if math.isfinite(loss) and math.isfinite(grad_norm):
            self.in_a_row = 0
            return None
        self.in_a_row += 1
        what = f"non-finite loss {loss} / gradient norm {grad_norm} at step {step}"
        if self.in_a_row >= self.limit:
            return NonFiniteStop(
                f"{what}, {self.in_a_row} attempts in a row (run.max_nonfinite_steps={self.limit}): stopping; "
                "the last durable checkpoint is untouched; lower optim.lr or fix the data, then resume"
            )
        return NonFiniteError(f"{what} ({self.in_a_row} in a row): not committed, retrying")
