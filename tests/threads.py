"""This process's threads by name (Linux: /proc/self/task), for tests that check a backend's threads are gone."""

from __future__ import annotations

from pathlib import Path


def gloo_threads() -> int:
    """This process's gloo worker threads (torch names them pt_gloo_runloop): a gloo group's, while it lives. A
    thread names itself once it runs: just after a group is made, wait for the count (tests/waiting.until)."""
    return sum((task / "comm").read_text().strip() == "pt_gloo_runloop" for task in Path("/proc/self/task").iterdir())
