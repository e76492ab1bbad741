"""Warden's policy and the signals it judges.

The policy is the typed config `make generate` writes per cluster
(contract.warden.Config, read by `warden serve --config`): which action each
signal calls for, and the safety limits. Action names and their severity
come from contract.signals.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.signals import Kind
from contract.warden import Config as Policy

__all__ = ["Policy", "Signal"]


@dataclass(frozen=True)
class Signal:
    """Something seen about a node: an Xid from the agent, a preflight failure, missing GPUs, NCCL errors..."""

    kind: Kind  # what was seen; the policy looks Xids up by code, the others by kind
    code: int | None = None
    detail: str = ""
    at: float = 0.0  # when it happened, for one-off events; 0 for conditions that last
