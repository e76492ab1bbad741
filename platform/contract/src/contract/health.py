"""A node's last deep check, as Warden records it on the Node (names.DEEP_CHECK_ANNOTATION).

Warden writes it after a burn-in or an idle sweep finishes; `meridian health` and dashboards read it.
The annotation is hand-editable by anyone with Node patch rights, so readers decode it strictly
(contract.codec: unknown fields, wrong types, other schema versions, oversized text are refused) and
treat a refused record as "never checked", never as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from contract import codec
from contract.problem import Invalid

SCHEMA = "meridian.deepcheck/v1"
MAX_BYTES = 16 * 1024  # Warden keeps the evidence short; anything longer was not written by it

CheckKind = Literal["burn_in", "sweep"]
Verdict = Literal["pass", "fail"]


@dataclass(frozen=True)
class Failure:
    check: str  # preflight's check name: "dcgm-diag", "nccl-multinode", "rdma-links" (preflight.deep.CHECKS), ...
    gpu: int | None = None  # the GPU index, when the failure is one GPU's
    evidence: str = ""  # one line: the failing test and what it measured


@dataclass(frozen=True)
class DeepCheck:
    time: float  # unix seconds when the check finished
    kind: CheckKind
    verdict: Verdict
    level: int = 2  # DCGM diagnostic run level (2 for sweeps, 3 for burn-in)
    failures: tuple[Failure, ...] = ()


FIX = "Warden writes it again after the node's next deep check; remove the annotation to have it checked"


def dumps(check: DeepCheck) -> str:
    return codec.dumps(check, SCHEMA, indent=None)


def loads(text: str, where: str) -> DeepCheck:
    """Decode an annotation; raises contract.problem.Invalid (one line naming ``where``) on anything else."""
    if len(text.encode()) > MAX_BYTES:
        raise Invalid([f"{where}: longer than {MAX_BYTES} bytes, so not Warden's; {FIX}"])
    return codec.loads(DeepCheck, text, SCHEMA, where, FIX)
