"""NVIDIA Xid codes sorted into resolution buckets, and what to do for each.

From NVIDIA's Xid catalog. On cloud VMs an in-guest GPU reset is usually not
available, so "reset the GPU" means rebooting the node, and bus-level faults
mean replacing the host (reported to Google as faulty). Warden acts on these;
preflight uses them to decide which kernel-log events fail a job's start.
"""

from __future__ import annotations

from typing import Literal

Action = Literal["none", "restart_pods", "reboot", "replace", "review"]

BUCKETS: dict[str, tuple[tuple[int, ...], Action]] = {
    "restart_application": ((13, 31, 32, 39, 40, 41, 94), "restart_pods"),
    "informational": ((43, 63, 92), "none"),
    "needs_analysis": ((45, 48, 74, *range(144, 151)), "review"),
    "reset_gpu": ((46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158), "reboot"),
    "restart_machine": ((79, 160), "replace"),
    "restart_vm": ((151,), "reboot"),
}

UNKNOWN_ACTION: Action = "review"  # an Xid not in the table: quarantine and ask a person


def bucket_of(code: int) -> str | None:
    return next((name for name, (codes, _) in BUCKETS.items() if code in codes), None)


def action_of(code: int) -> Action:
    bucket = bucket_of(code)
    return BUCKETS[bucket][1] if bucket else UNKNOWN_ACTION


def default_actions() -> dict[int, Action]:
    return {code: action for codes, action in BUCKETS.values() for code in codes}
