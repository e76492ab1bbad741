"""Which checkpoint a run starts from: the newest one that verifies, of any replica group and any region, or none.

``start_refusal`` is train.py's check before anything starts; ``newest_verified`` is what each group
loads. A newer checkpoint that fails verification is skipped with its reason, never loaded.

The candidates are every group's directory in ``checkpoint.dir`` (this run's own, the only one it writes)
and in each of ``checkpoint.resume_from`` (other regions' directories of the same run, read only): a
region that starts again, or for the first time, takes up where the run got furthest. Another region's
directory that cannot be listed (its bucket unreachable, no permission) is one warning and skipped: a
region must be able to start while another is down.

Every location (``checkpoint.dir`` and each ``resume_from``) must be one the run may trust at all
(``location_problem``, checked first): in the fleet, gkr sets ``$MERIDIAN_CHECKPOINT_ROOTS`` to the
team's folder of each fleet checkpoint bucket (``gs://<bucket>/teams/<team>/``, writable by the team's
identity only) and ``$MERIDIAN_CHECKPOINT_DIR`` to this region's one, mounted; nothing else is read.
Without them (a laptop, CI) only local directories are.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from contract.names import CHECKPOINT_DIR_ENV, CHECKPOINT_ROOTS_ENV, is_bucket_name
from trainer.checkpoint.store import StepStore
from trainer.config import Config

if TYPE_CHECKING:  # imported where a step is verified: a run with nothing saved starts without torch's DCP
    from trainer.checkpoint.checkpointer import Checkpointer

log = logging.getLogger("trainer")
_GROUP_DIR = re.compile(r"group-(\d{1,6})")


class Root(NamedTuple):
    """One group's checkpoints: ``group-<group>`` under ``base`` (a checkpoint.dir, this run's or another region's)."""

    base: str
    group: int

    @property
    def url(self) -> str:
        return f"{self.base.rstrip('/')}/group-{self.group}"


def group_roots(cfg: Config) -> list[Root]:
    return [Root(cfg.checkpoint.dir, g) for g in range(cfg.ft.replica_groups)]


def other_regions(cfg: Config) -> list[Root]:
    """Every group directory found in each of ``checkpoint.resume_from`` (other regions may have other shapes)."""
    import fsspec  # type: ignore[import-untyped]

    own = cfg.checkpoint.dir.rstrip("/")
    roots = []
    for base in dict.fromkeys(d for d in cfg.checkpoint.resume_from if d.rstrip("/") != own):
        try:
            fs, path = fsspec.core.url_to_fs(base)
            fs.invalidate_cache(path)
            found = fs.glob(f"{path.rstrip('/')}/group-*")
        except Exception as error:  # unreachable or unreadable: this region starts without it
            log.warning("checkpoint.resume_from %s: not readable, skipped (%s: %s)", base, type(error).__name__, error)
            continue
        groups = sorted(
            {int(m.group(1)) for p in found if (m := _GROUP_DIR.fullmatch(p.rstrip("/").rsplit("/", 1)[-1]))}
        )
        roots += [Root(base, g) for g in groups]
    return roots


def newest_verified(cfg: Config, on_skip: Callable[[Root, int, str], None]) -> tuple[Checkpointer, int, Root] | None:
    """The newest checkpoint of any group and region that verifies; ``on_skip(root, step, reason)`` for newer ones that do not.

    The caller closes the Checkpointer it gets.
    """
    from trainer.checkpoint.checkpointer import Checkpointer

    roots = group_roots(cfg) + other_regions(cfg)
    checkpointers = [Checkpointer(root.url) for root in roots]
    candidates = sorted(((s, i) for i, c in enumerate(checkpointers) for s in _committed(c, roots[i])), reverse=True)
    found = None
    for step, i in candidates:
        reason = checkpointers[i].verify(step)
        if reason is None:
            found = (checkpointers[i], step, roots[i])
            break
        on_skip(roots[i], step, reason)
    for c in checkpointers:
        if found is None or c is not found[0]:
            c.close()
    return found


def _committed(checkpointer: Checkpointer, root: Root) -> list[int]:
    try:
        return checkpointer.committed()
    except Exception as error:  # another region's bucket went away between listing and reading
        log.warning("checkpoint.resume_from %s: not readable, skipped (%s: %s)", root.url, type(error).__name__, error)
        return []


def start_refusal(cfg: Config) -> str | None:
    """Why a run must not start on checkpoint.dir, as one line; None when it may (``start_state``'s first half)."""
    return start_state(cfg)[0]


def start_state(cfg: Config) -> tuple[str | None, int | None]:
    """(why a run must not start on checkpoint.dir, as one line, or None; the newest verified step, or None).

    A location outside what the run may trust (``location_problem``) is refused before anything is listed.
    Step data with nothing that verifies (markers deleted, every checkpoint corrupt) would otherwise
    restart at step 0 and overwrite that history without a word. The step tells train.py whether a run
    that is started again has anything left to do.
    """
    outside = location_problem(cfg, os.environ)
    if outside is not None:
        return outside, None
    if not _saved_anywhere(cfg):
        return None, None  # nothing to verify, and nothing to refuse
    skipped: list[str] = []
    found = newest_verified(cfg, lambda root, s, r: skipped.append(f"{_label(cfg, root)} step {s}: {r}"))
    if found is not None:
        found[0].close()
        return None, found[1]
    if cfg.checkpoint.start_over or not any(_has_step_data(root.url) for root in group_roots(cfg)):
        return None, None
    why = skipped[0] if skipped else "no COMMITTED marker"
    return (
        f"checkpoint.dir {cfg.checkpoint.dir}: step-* directories but no checkpoint that verifies ({why}); "
        "move the directory away to keep it, or set checkpoint.start_over=true to train from step 0 there"
    ), None


def _label(cfg: Config, root: Root) -> str:
    """group-<n> in this run's checkpoint.dir, the full URL in another region's."""
    return f"group-{root.group}" if root.base == cfg.checkpoint.dir else root.url


def _has_step_data(root: str) -> bool:
    """Whether any step directory exists under ``root``, committed or not."""
    return bool(StepStore(root).step_dirs())


def _saved_anywhere(cfg: Config) -> bool:
    """Whether any group directory, this run's or another region's, may hold a checkpoint: a listing needs no
    torch, a verification does. One that cannot be listed counts (newest_verified warns and skips it)."""
    for root in group_roots(cfg) + other_regions(cfg):
        try:
            if _has_step_data(root.url):
                return True
        except Exception:
            return True
    return False


_ROOT = re.compile(r"gs://([^/]+)/(?:[A-Za-z0-9_.-]+/)+")  # a bucket (contract.names' rule), then whole folders


def _is_root(root: str) -> bool:
    found = _ROOT.fullmatch(root)
    return found is not None and is_bucket_name(found[1]) and not _dots(root.removeprefix("gs://"))


def location_problem(cfg: Config, environ: Mapping[str, str]) -> str | None:
    """Why a checkpoint location of this run is not one it may resume from, as one line; None when all are. Pure.

    With ``$MERIDIAN_CHECKPOINT_ROOTS`` (the fleet): a URL under one of its folders, or a local path under
    ``$MERIDIAN_CHECKPOINT_DIR``. Without it: local paths only; no URL can be told to be the fleet's.
    """
    raw = environ.get(CHECKPOINT_ROOTS_ENV, "")
    roots = [r.strip() for r in raw.split(",") if r.strip()]
    bad = next((r for r in roots if not _is_root(r)), None)
    if bad is not None:
        return f"${CHECKPOINT_ROOTS_ENV}: {bad[:120]!r} is not a gs:// folder (gs://<bucket>/<prefix>/); fix the job's environment"
    mount = environ.get(CHECKPOINT_DIR_ENV, "").strip()
    keys = [("checkpoint.dir", cfg.checkpoint.dir)]
    keys += [(f"checkpoint.resume_from[{i}]", d) for i, d in enumerate(cfg.checkpoint.resume_from)]
    for key, location in keys:
        why = _untrusted(location.strip(), roots, mount)
        if why is not None:
            return f"{key}: {location[:200]!r} {why}"
    return None


def _untrusted(location: str, roots: list[str], mount: str) -> str | None:
    scheme, sep, rest = location.partition("://")
    local = not sep or scheme == "file"
    path = rest if sep else location
    if _dots(path):
        return "has a '.' or '..' segment; write the location plainly"
    where = f"under {', '.join(roots)}" + (f" or {mount}" if mount else "")
    if local:
        if not roots or (mount and _under(posixpath.normpath(path), posixpath.normpath(mount))):
            return None  # a local run's own disk, or the mount of the team's folder in this region's bucket
        return f"is a local directory outside the checkpoint mount; this run resumes only from {where}"
    if not roots:
        return (
            f"is not a local directory, and this run has no fleet checkpoint locations (${CHECKPOINT_ROOTS_ENV}, "
            "which gkr sets); resume from a local directory here, or submit the run with gkr"
        )
    if any(f"{location.rstrip('/')}/".startswith(root) for root in roots):
        return None
    return f"is outside the team's checkpoint folders; this run resumes only from {where}"


def _dots(path: str) -> bool:
    """Whether a path has a '.' or '..' segment: a prefix check means nothing once one may climb out."""
    return any(segment in (".", "..") for segment in path.split("/"))


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")
