"""Warden's policy: which action each signal calls for, and the safety limits.

Read from the `policy.yaml` the GitOps generator puts in the `warden-policy`
ConfigMap (fleet/gitops/warden.py), so the table is data, per cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from contract.signals import UNKNOWN_ACTION, default_actions

Action = Literal["none", "restart_pods", "reboot", "replace", "review"]
# How far an action goes: escalation never steps back down.
SEVERITY: dict[str, int] = {"none": 0, "restart_pods": 1, "reboot": 2, "replace": 3, "review": 4}


@dataclass(frozen=True)
class Signal:
    """Something seen about a node: an Xid from the agent, a preflight failure, missing GPUs, NCCL errors..."""

    kind: str  # xid, sxid, preflight, gpu_missing, nccl_errors, maintenance, not_ready, or anything new
    code: int | None = None
    detail: str = ""
    at: float = 0.0  # when it happened, for one-off events; 0 for conditions that last


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
    signal_actions: dict[str, str] = field(default_factory=lambda: dict(SIGNAL_ACTIONS))
    unknown_action: str = UNKNOWN_ACTION
    nccl_failures: int = 3  # NCCL failure Events from one node's pods within window_s that make it suspect
    maintenance_lead_s: float = 3600.0  # drain this long before GKE's scheduled host maintenance
    probation_image: str = ""  # runs `preflight run` on a node before it returns
    probation_args: dict[str, tuple[str, ...]] = field(default_factory=dict)  # per pool: the machine's thresholds

    def action_for(self, signal: Signal) -> Action:
        if signal.kind == "xid" and signal.code is not None:
            return _action(self.xid_actions.get(signal.code, self.unknown_action))
        return _action(self.signal_actions.get(signal.kind, self.unknown_action))


# Signals other than Xids, and what they call for by default (the ConfigMap may override).
SIGNAL_ACTIONS: dict[str, str] = {
    "sxid": "review",  # NVSwitch faults: a person decides
    "preflight": "reboot",  # the machine failed its own checks
    "gpu_missing": "reboot",  # allocatable below capacity: a GPU fell off
    "nccl_errors": "review",  # could be the job, a NIC or the fabric
    "maintenance": "reboot",  # drain first, then the reboot performs the pending host maintenance
    "not_ready": "none",  # GKE's auto-repair owns NotReady nodes
}


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
        signal_actions=SIGNAL_ACTIONS | {str(k): str(v) for k, v in data.get("signal_actions", {}).items()},
        unknown_action=str(data.get("unknown_xid_action", UNKNOWN_ACTION)),
        nccl_failures=int(data.get("nccl_failures", 3)),
        maintenance_lead_s=float(data.get("maintenance_lead_minutes", 60)) * 60,
        probation_image=str(data.get("probation", {}).get("image", "")),
        probation_args={
            str(p["name"]): tuple(str(a) for a in p.get("preflight_args", ())) for p in data.get("pools", [])
        },
    )
