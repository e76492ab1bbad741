"""The fleet README's table of costs, written from `Costs` so the README cannot keep a number the model dropped.

tests/fleet/test_costs_table.py checks the README holds `table(Costs())` (as the metric catalogs' tables are
checked, telemetry.exposition.table). Pure.
"""

from __future__ import annotations

from fleet.controllers.versions import READ_AT
from fleet.goodput.costs import Costs

ASSUMED = "**assumed**"


def _rows(c: Costs) -> list[tuple[str, str, str]]:
    """The state, checkpoints and a group's recovery."""
    gbps = c.heal_bytes_per_s * 8 / 1e9
    return [
        (
            "state per GPU",
            f"{c.state_gib_per_gpu:.1f} GiB",
            f"{c.parameters / 1e9:g} B parameters x {c.state_bytes_per_parameter:g} bytes (fp32 weights and AdamW's"
            " two moments) / 8 GPUs",
        ),
        (
            "training blocked per checkpoint",
            f"{c.blocked_s:.1f} s",
            f"trainer bench: {c.staged_s_per_gib:g} s per GiB staged (CPU copy) + {c.blocked_fixed_s:g} s fixed per"
            " sharded rank",
        ),
        (
            "checkpoint durable after",
            f"{c.durable_lag_s:.0f} s",
            f"trainer bench: durable {c.durable_s_per_gib:g} s per GiB after the call (local disk)",
        ),
        (
            "detection",
            f"{c.detect_s:g} s",
            f"torchft's heartbeat timeout, `ft.heartbeat_timeout_ms` {c.detect_s * 1000:.0f} (bench: the survivor"
            " stalled for the timeout); the same under `restart` (a crashed rank; a hung collective would take"
            " NCCL's timeout, not modelled)",
        ),
        (
            "a group back in the quorum",
            f"{c.heal_s:.0f} s",
            f"{ASSUMED}: {c.group_restart_s:g} s for its pods on a ready node, then {c.state_gib_per_gpu:.1f} GiB"
            f" from a peer at {gbps:g} Gb/s (CPU bench: 9 s)",
        ),
    ]


def _repair_rows(c: Costs) -> list[tuple[str, str, str]]:
    """A node's repair and a lost node's path."""
    return [
        (
            "whole-job restart",
            f"{c.job_restart_s:g} s",
            f"{ASSUMED}: every Ray worker replaced, NCCL at thousands of ranks, the checkpoint loaded",
        ),
        (
            "reboot / replace / probation",
            f"{c.reboot_s:g} / {c.replace_s:g} / {c.probation_s:g} s",
            f"{ASSUMED}; the first two as Warden's own simulation (`warden/simulate.py`)",
        ),
        (
            "faulty-host report's operation, before a replace",
            f"{c.faulty_report_wait_s:g} s",
            "Google's upper figure, \"10 - 12 minutes\" (`contract.warden.HOST_REPORT_S`, Warden's own; issue 38:"
            " Warden waits for it)",
        ),
        ("a node held for review", f"{c.review_s / 3600:g} h + replace", f"{ASSUMED}: a person on call"),
        (
            "NotReady node",
            f"{c.gke_autorepair_s:g} s + replace",
            "GKE docs, node auto-repair: NotReady for about 10 minutes",
        ),
        (
            "Ray's detection of a vanished host",
            f"up to {c.ray_node_death_s:g} s",
            f"Ray {READ_AT['ray']}'s defaults (`ray._raylet.Config`) and `gcs_health_check_manager.cc`:"
            f" {c.ray_health_check_failures} checks x ({c.ray_health_check_timeout_s:g} s timeout"
            f" + {c.ray_health_check_period_s:g} s period)",
        ),
        (
            "Node NotReady, then its pod evicted",
            f"{c.node_monitor_grace_s:g} s, then {c.toleration_s:g} s",
            "kubernetes.io: `node-monitor-grace-period`; DefaultTolerationSeconds",
        ),
        (
            "a replacement Ray worker pod starts / joins",
            f"{c.pod_start_s:g} / {c.ray_join_s:g} s",
            f"{ASSUMED} (image pre-pulled)",
        ),
    ]


def table(costs: Costs) -> str:
    """The README's costs table (Markdown), each value from `costs`."""
    lines = ["| cost | value | source |", "|---|---|---|"]
    lines += [f"| {name} | {value} | {source} |" for name, value, source in [*_rows(costs), *_repair_rows(costs)]]
    return "\n".join(lines) + "\n"
