"""Which checkpoint a run starts from: the newest one of any replica group that verifies, or none.

``start_refusal`` is train.py's check before anything starts; ``newest_verified`` is what each group
loads. A newer checkpoint that fails verification is skipped with its reason, never loaded.
"""

from __future__ import annotations

from collections.abc import Callable

from trainer.checkpoint import Checkpointer
from trainer.config import Config


def group_roots(cfg: Config) -> list[str]:
    return [f"{cfg.checkpoint.dir.rstrip('/')}/group-{g}" for g in range(cfg.ft.replica_groups)]


def newest_verified(cfg: Config, on_skip: Callable[[int, int, str], None]) -> tuple[Checkpointer, int] | None:
    """The newest checkpoint of any group that verifies; ``on_skip(group, step, reason)`` for newer ones that do not.

    The caller closes the Checkpointer it gets.
    """
    checkpointers = [Checkpointer(root) for root in group_roots(cfg)]
    candidates = sorted(((s, g) for g, c in enumerate(checkpointers) for s in c.committed()), reverse=True)
    found = None
    for step, g in candidates:
        reason = checkpointers[g].verify(step)
        if reason is None:
            found = (checkpointers[g], step)
            break
        on_skip(g, step, reason)
    for c in checkpointers:
        if found is None or c is not found[0]:
            c.close()
    return found


def start_refusal(cfg: Config) -> str | None:
    """Why a run must not start on checkpoint.dir, as one line; None when it may.

    Step data with nothing that verifies (markers deleted, every checkpoint corrupt) would otherwise
    restart at step 0 and overwrite that history without a word.
    """
    skipped: list[str] = []
    found = newest_verified(cfg, lambda g, s, r: skipped.append(f"group-{g} step {s}: {r}"))
    if found is not None:
        found[0].close()
        return None
    if cfg.checkpoint.start_over:
        return None
    if not any(_has_step_data(root) for root in group_roots(cfg)):
        return None
    why = skipped[0] if skipped else "no COMMITTED marker"
    return (
        f"checkpoint.dir {cfg.checkpoint.dir}: step-* directories but no checkpoint that verifies ({why}); "
        "move the directory away to keep it, or set checkpoint.start_over=true to train from step 0 there"
    )


def _has_step_data(root: str) -> bool:
    with Checkpointer(root) as checkpointer:
        return checkpointer.has_step_data()
