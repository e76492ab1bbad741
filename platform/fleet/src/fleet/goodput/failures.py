"""Interruptions of a large training job by root cause, from the Llama 3 report, and what Warden sees of each.

Source: Dubey et al. 2024, "The Llama 3 Herd of Models" (arXiv:2407.21783),
section 3.3.4 and its table 5: during a 54-day snapshot of pre-training on
16,384 H100 GPUs (2,048 hosts of 8), 466 job interruptions, 47 planned
(firmware upgrades, configuration or dataset updates: operator decisions,
left out here) and 419 unexpected, broken down below by component. The
counts are the table's; its percentages are not used (its first row says
30.1% for 148 of 419, which is 35.3%).

Each row names the signal Warden would get for it (contract.signals), so the
node's repair follows Warden's real action table, and the row's scope: a
fault on one node stops one replica group; a software bug, a switch or a
silent data corruption stops every group (assumptions, stated per row).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from contract.signals import Kind

Scope = Literal["group", "job"]

SOURCE = "Dubey et al. 2024, The Llama 3 Herd of Models, section 3.3.4, table 5"
GPUS = 16_384  # H100 GPUs in the job the table counts
GPUS_PER_HOST = 8
DAYS = 54
UNEXPECTED = 419  # the table's total; PLANNED = 47 are left out (operator decisions, not failures)


@dataclass(frozen=True)
class Cause:
    component: str  # the table's row
    category: str  # the table's category
    count: int
    signal: Kind | None  # what Warden observes; None: nothing it acts on (the job's own crash)
    code: int | None  # the Xid, for signal "xid"
    scope: Scope  # one replica group stops, or the whole job

    @property
    def per_node_second(self) -> float:
        return self.count / (GPUS // GPUS_PER_HOST) / (DAYS * 86_400.0)


CAUSES: tuple[Cause, ...] = (
    Cause("Faulty GPU", "GPU", 148, "xid", 79, "group"),  # off the bus: a new machine
    Cause("GPU HBM3 Memory", "GPU", 72, "xid", 95, "group"),  # uncontained ECC: reset (reboot on a VM)
    Cause("Software Bug", "Dependency", 54, None, None, "job"),  # every replica runs the same code
    Cause("Network Switch/Cable", "Network", 35, "nccl_errors", None, "job"),  # a switch serves many nodes
    Cause("Host Maintenance", "Unplanned Maintenance", 32, "maintenance", None, "group"),
    Cause("GPU SRAM Memory", "GPU", 19, "xid", 95, "group"),
    Cause("GPU System Processor", "GPU", 17, "xid", 119, "group"),  # GSP timeout: reset
    Cause("NIC", "Host", 7, "nccl_errors", None, "group"),
    Cause("NCCL Watchdog Timeouts", "Unknown", 7, None, None, "group"),  # one report, below Warden's threshold
    Cause("Silent Data Corruption", "GPU", 6, "preflight", None, "job"),  # found by a check; roll back
    Cause("GPU Thermal Interface + Sensor", "GPU", 6, "xid", 119, "group"),
    Cause("SSD", "Host", 3, "not_ready", None, "group"),
    Cause("Power Supply", "Host", 3, "not_ready", None, "group"),
    Cause("Server Chassis", "Host", 2, "not_ready", None, "group"),
    Cause("IO Expansion Board", "Host", 2, "not_ready", None, "group"),
    Cause("Dependency", "Dependency", 2, None, None, "job"),
    Cause("CPU", "Host", 2, "not_ready", None, "group"),
    Cause("System Memory", "Host", 2, "not_ready", None, "group"),
)


def per_node_second(causes: tuple[Cause, ...] = CAUSES) -> float:
    """Unexpected interruptions per node and second: 419 / (2,048 hosts x 54 days)."""
    return sum(c.per_node_second for c in causes)
