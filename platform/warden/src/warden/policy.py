"""Warden's policy: which action each signal calls for, and the safety limits.

Read from the `policy.yaml` the GitOps generator puts in the `warden-policy`
ConfigMap (fleet/gitops/warden.py), so the table is data, per cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from preflight.xid import UNKNOWN_ACTION, default_actions

Action = Literal["none", "restart_pods", "reboot", "replace", "review"]
# How far an action goes: escalation never steps back down.
SEVERITY: dict[str, int] = {"none": 0, "restart_pods": 1, "reboot": 2, "replace": 3, "review": 4}


@dataclass(frozen=True)
class Signal:
    """Something seen about a node: an Xid from the agent, a preflight failure, missing GPUs, NCCL errors..."""

    kind: str  # xid, sxid, preflight, gpu_missing, nccl_errors, or anything new
    code: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class Policy:
    dry_run: bool = True
    unhealthy_share_limit: float = 0.05
    window_s: float = 3600.0
    max_per_pool: int = 2
    max_per_cluster: int = 8
    repeat_count: int = 3
    repeat_window_s: float = 7 * 86400.0
    drain_grace_s: float = 600.0
    remediate_timeout_s: float = 1800.0  # a reboot or replacement that shows no sign of happening is asked again
    xid_actions: dict[int, str] = field(default_factory=lambda: dict(default_actions()))
    unknown_action: str = UNKNOWN_ACTION

    def action_for(self, signal: Signal) -> Action:
        if signal.kind == "xid" and signal.code is not None:
            return _action(self.xid_actions.get(signal.code, self.unknown_action))
        fixed: dict[str, Action] = {
            "sxid": "review",  # NVSwitch faults: a person decides
            "preflight": "reboot",  # the machine failed its own checks
            "gpu_missing": "reboot",  # allocatable below capacity: a GPU fell off
            "nccl_errors": "review",  # could be the job, a NIC or the fabric
        }
        return fixed.get(signal.kind, _action(self.unknown_action))


def _action(value: str) -> Action:
    if value not in SEVERITY:
        return "review"
    return value  # type: ignore[return-value]


def from_config(data: dict[str, Any]) -> Policy:
    """The policy from the ConfigMap's policy.yaml (see fleet.gitops.warden.policy)."""
    breaker = data.get("circuit_breaker", {})
    concurrency = data.get("concurrency", {})
    repeat = data.get("repeat_offender", {})
    return Policy(
        dry_run=bool(data.get("dry_run", True)),
        unhealthy_share_limit=float(breaker.get("unhealthy_share_limit", 0.05)),
        window_s=float(breaker.get("window_minutes", 60)) * 60,
        max_per_pool=int(concurrency.get("per_pool", 2)),
        max_per_cluster=int(concurrency.get("per_cluster", 8)),
        repeat_count=int(repeat.get("count", 3)),
        repeat_window_s=float(repeat.get("days", 7)) * 86400,
        drain_grace_s=float(data.get("drain_grace_seconds", 600)),
        xid_actions={int(k): str(v) for k, v in data.get("xid_actions", {}).items()} or dict(default_actions()),
        unknown_action=str(data.get("unknown_xid_action", UNKNOWN_ACTION)),
    )
