"""Hostile YAML documents, and a way to run a program on them with bounded memory and time."""

from __future__ import annotations

import resource
import subprocess
from collections.abc import Sequence

# Each of these ran away or crashed before safeyaml: the laughs past 5 GB in `make plan`,
# the deep list with a RecursionError, the long numbers in int()'s quadratic loops.
LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 10) if prev else ', '.join(['lol'] * 10)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)
HOSTILE: dict[str, tuple[str, str]] = {
    # id: (document, words the one line must contain)
    "billion laughs": (LAUGHS, "refused: the document expands to more than 200,000 values"),
    "deep list": ("a: " + "[" * 1000 + "]" * 1000 + "\n", "refused: nested more than 64 levels deep"),
    "deep mapping": (
        "".join("  " * i + f"k{i}:\n" for i in range(100)) + "  " * 100 + "v\n",
        "refused: nested more than 64",
    ),
    "recursive alias": ("a: &a [1, *a]\n", "refused: alias *a is inside the node it names"),
    "too many aliases": ("a: &a 1\nb: [" + ", ".join(["*a"] * 101) + "]\n", "refused: more than 100 aliases"),
    "oversized": ("# " + "x" * (1024 * 1024) + "\na: 1\n", "refused: the document is larger than 1,048,576 bytes"),
    "long int": ("a: " + "7" * 50_000 + "\n", "refused: a number of 50,000 characters"),
    "base-60 int": ("a: 1" + ":1" * 20_000 + "\n", "refused: a number of 40,001 characters"),
    "python tag": (
        "a: !!python/object/apply:os.system [echo hi]\n",
        "not valid YAML: could not determine a constructor",
    ),
    "bad timestamp": ("a: !!timestamp yesterday\n", "not valid YAML: cannot read a value"),
    "two documents": ("a: 1\n---\nb: 2\n", "not valid YAML: a second document"),
    "control character": ("a: \x07\n", "not valid YAML: unacceptable character"),
}
# Warden's config is JSON (contract.warden): documents that must end in one line, exit 2.
_WARDEN = '{"schema": "meridian.warden/v1", '
HOSTILE_CONFIGS: dict[str, tuple[bytes, str]] = {
    "deep list": (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
    "deep object": (b'{"a": ' * 100_000 + b"1" + b"}" * 100_000, "not JSON"),
    "oversized": (b" " * (2 * 1024 * 1024) + b"{}", "larger than 1 MiB"),
    "long int": ((_WARDEN + '"max_per_pool": ' + "7" * 50_000 + "}").encode(), "not JSON"),
    "NaN": ((_WARDEN + '"drain_grace_s": NaN}').encode(), "drain_grace_s: nan is not a finite number"),
    "huge float": ((_WARDEN + '"window_s": 1e999}').encode(), "window_s: inf is not a finite number"),
    "forged xid code": ((_WARDEN + '"xid_actions": {"7_9": "none"}}').encode(), "key '7_9' is not an integer"),
    "unknown action": ((_WARDEN + '"xid_actions": {"79": "rm -rf"}}').encode(), "is not one of 'none'"),
    "unknown field": ((_WARDEN + '"dry_run": false, "yolo": true}').encode(), "yolo: unknown field"),
    "wrong type": ((_WARDEN + '"dry_run": "false"}').encode(), "dry_run: 'false' is not true or false"),
    "stale schema": (b'{"schema": "meridian.warden/v0"}', "schema 'meridian.warden/v0', this tool reads"),
    "the old YAML policy": (b"- cluster: meridian-us-central1\n  dry_run: false\n", "not JSON"),
    "billion laughs": (LAUGHS.encode(), "not JSON"),
    "not UTF-8": (b'{"cluster": "\xff"}', "not UTF-8"),
}
MEMORY_LIMIT = 1536 * 1024 * 1024  # far above a normal run (~150 MB), far below a runaway one
TIMEOUT_S = 60


def _limit() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def run_bounded(args: Sequence[str], cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a program with its address space and time bounded: a regression fails, it does not eat the machine."""
    return subprocess.run(
        list(args), capture_output=True, text=True, check=False, timeout=TIMEOUT_S, preexec_fn=_limit, cwd=cwd
    )
