"""What can be wrong with a GPU node, what each finding calls for, and NVIDIA's Xid codes sorted into buckets.

From NVIDIA's Xid catalog. On cloud VMs an in-guest GPU reset is usually not
available, so "reset the GPU" means rebooting the node, and bus-level faults
mean replacing the host (reported to Google as faulty). Warden acts on these;
preflight uses them to decide which kernel-log events fail a job's start; fleet
lets an operator override them per fleet (warden.xid_actions).
"""

from __future__ import annotations

from typing import Literal, get_args

Action = Literal["none", "restart_pods", "reboot", "replace", "review"]
ACTIONS: tuple[Action, ...] = get_args(Action)  # mildest first: escalation never steps back down
SEVERITY: dict[str, int] = {action: rank for rank, action in enumerate(ACTIONS)}

# Kinds of signal Warden acts on. `xid` is looked up in the Xid table; the others in SIGNAL_ACTIONS.
SignalKind = Literal["sxid", "preflight", "gpu_missing", "nccl_errors", "maintenance", "not_ready"]
Kind = Literal["xid", SignalKind]
KINDS: tuple[Kind, ...] = get_args(Kind)

# Signals other than Xids, and what they call for unless the fleet says otherwise.
SIGNAL_ACTIONS: dict[SignalKind, Action] = {
    "sxid": "review",  # NVSwitch faults: a person decides
    "preflight": "reboot",  # the machine failed its own checks
    "gpu_missing": "reboot",  # allocatable below capacity: a GPU fell off
    "nccl_errors": "review",  # could be the job, a NIC or the fabric
    "maintenance": "reboot",  # drain first, then the reboot performs the pending host maintenance
    "not_ready": "none",  # GKE's auto-repair owns NotReady nodes
}

BUCKETS: dict[str, tuple[tuple[int, ...], Action]] = {
    "restart_application": ((13, 31, 32, 39, 40, 41, 94), "restart_pods"),
    "informational": ((43, 63, 92), "none"),
    "needs_analysis": ((45, 48, 74, *range(144, 151)), "review"),
    "reset_gpu": ((46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158), "reboot"),
    "restart_machine": ((79, 160), "replace"),
    "restart_vm": ((151,), "reboot"),
}

UNKNOWN_ACTION: Action = "review"  # an Xid or a signal not in the table: quarantine and ask a person


def bucket_of(code: int) -> str | None:
    return next((name for name, (codes, _) in BUCKETS.items() if code in codes), None)


def action_of(code: int) -> Action:
    bucket = bucket_of(code)
    return BUCKETS[bucket][1] if bucket else UNKNOWN_ACTION


def default_actions() -> dict[int, Action]:
    return {code: action for codes, action in BUCKETS.values() for code in codes}
