"""Write the generated tree, or check that the committed one is current."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from fleet.gitops.tree import OWNED


def on_disk(root: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for owned in OWNED:
        for path in sorted((root / owned).rglob("*")):
            if path.is_file():
                files[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
    return files


def stale(root: Path, tree: dict[str, str]) -> list[str]:
    """What differs between the tree and the files on disk, one line per file."""
    current = on_disk(root)
    lines = [f"missing: {p}" for p in tree if p not in current]
    lines += [f"outdated: {p}" for p in tree if p in current and current[p] != tree[p]]
    lines += [f"not generated (remove it): {p}" for p in current if p not in tree]
    return sorted(lines, key=lambda line: line.split(": ", 1)[1])


def write(root: Path, tree: dict[str, str]) -> int:
    """Replace the owned folders with the tree; returns how many files changed.

    The new folders are written completely beside the old ones first, then
    swapped in, so an interrupted run leaves the old tree in place.
    """
    changed = len(stale(root, tree))
    with tempfile.TemporaryDirectory(dir=root, prefix=".generate-") as tmp:
        staging = Path(tmp)
        for rel, text in tree.items():
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        for owned in OWNED:
            (staging / owned).mkdir(parents=True, exist_ok=True)
            final = root / owned
            final.parent.mkdir(parents=True, exist_ok=True)
            old = staging / f"old-{owned.replace('/', '-')}"
            if final.exists():
                final.rename(old)
            (staging / owned).rename(final)
            shutil.rmtree(old, ignore_errors=True)
    return changed
