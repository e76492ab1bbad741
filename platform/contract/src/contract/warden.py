"""Warden's configuration: what fleet generates per cluster and `warden serve` reads.

The defaults are written here and nowhere else: fleet's spec model takes
its defaults from `DEFAULTS`, fleet's generator fills the rest from the spec
and the machine catalog, and Warden uses this type as its policy. Times are
seconds (the spec may say minutes or days; fleet converts).

`make generate` writes one document per cluster, JSON with a schema version
(contract.codec), into the ConfigMap names.WARDEN_CONFIGMAP under the key
FILE; Warden's Deployment mounts it at PATH.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Literal, cast

from contract import codec
from contract.problem import Invalid
from contract.registry import Thresholds
from contract.signals import BUCKETS, SIGNAL_ACTIONS, UNKNOWN_ACTION, Action, SignalKind, default_actions

SCHEMA = "meridian.warden/v1"
FILE = "config.json"  # the ConfigMap's key
MOUNT = "/etc/warden"  # where the Deployment mounts the ConfigMap
PATH = f"{MOUNT}/{FILE}"
MAX_BYTES = 1024 * 1024  # a config larger than this is not one fleet wrote: refused before it is parsed

# What Warden carries out when not in dry run (issue 28): `unambiguous` acts only on faults whose
# remedy is not in doubt and logs every other decision, as a dry run would; `all` acts on every one.
ActOn = Literal["unambiguous", "all"]
ACT_ON: tuple[ActOn, ...] = ("unambiguous", "all")
# Unambiguous: the Xids whose documented resolution in NVIDIA's Xid catalog is to reset the GPU or to
# restart the machine or the VM (https://docs.nvidia.com/deploy/xid-errors/, "Resolution" column:
# RESET_GPU, RESTART_BM, RESTART_VM), i.e. contract.signals' buckets below, and GCE's own notice of a
# host maintenance (the host goes down whatever Warden does; draining first only saves the job's work).
# Not: application restarts (the trainer restarts its own group), Xids that need analysis, NVSwitch
# faults, NCCL error reports and failed preflights (the job, a NIC or the fabric: a person decides).
UNAMBIGUOUS_XIDS = frozenset(c for b in ("reset_gpu", "restart_machine", "restart_vm") for c in BUCKETS[b][0])
UNAMBIGUOUS_SIGNALS: frozenset[str] = frozenset({"maintenance"})

# Replacing a VM (issue 38): Warden first reports its host with Compute Engine's instances.reportHostAsFaulty,
# whose zonal Operation runs while the VM keeps running, "10 - 12 minutes" by Google's account
# (https://cloud.google.com/ai-hypercomputer/docs/manage/report-faulty-host, "How it works"). Deleting or
# recreating the VM before that Operation is DONE ends it in INTERNAL_ERROR, and VMs without a reservation
# (flex-start, spot) are refused with INSTANCES_WITHOUT_RESERVATION_NOT_SUPPORTED
# (https://cloud.google.com/ai-hypercomputer/docs/troubleshooting/troubleshoot-faulty-host-api): Warden waits
# for the Operation, then recreates the VM in its group; for spot and flex-start nodes it recreates at once.
HOST_REPORT_S = 720.0  # Google's upper figure: the wait a reservation-bound VM's replacement adds
# The most Warden waits for the Operation before it recreates the VM anyway: Google's 12 minutes and 8 more
# (round_s polls and a slow operation), still under remediate_timeout_s, past which a replacement that shows no
# sign of happening is asked again. A report not DONE by then is stuck (the page above: the VM "may remain in
# the REPAIRING state"); the report is Google's best effort, the node's return is Warden's.
HOST_REPORT_WAIT_S = 1200.0


@dataclass(frozen=True, kw_only=True)
class Config:
    """Warden's policy for one cluster: which action each signal calls for, and the safety limits."""

    cluster: str = ""
    region: str = ""
    dry_run: bool = False  # decide and log, change nothing (`warden serve --dry-run` forces it)
    # A new fleet's default: act on unambiguous faults only, log the rest (ACT_ON, UNAMBIGUOUS_XIDS).
    act_on: ActOn = "unambiguous"
    # Circuit breaker: no new quarantine past this share of a pool, or of the cluster, out of service.
    unhealthy_share_limit: float = 0.05
    window_s: float = 3600.0  # tenants' reports (NCCL Events, failed preflight containers) count this long
    max_per_pool: int = 2  # nodes remediating at once (reboot or replacement), per pool
    max_per_cluster: int = 8  # and per cluster
    repeat_count: int = 3  # remediations within repeat_window_s that make a node a repeat offender: held
    repeat_window_s: float = 7 * 86400.0
    drain_grace_s: float = 600.0  # eviction grace period: time for training to checkpoint
    remediate_timeout_s: float = 1800.0  # a reboot or replacement that shows no sign of happening is asked again
    xid_actions: dict[int, Action] = field(default_factory=default_actions)
    signal_actions: dict[SignalKind, Action] = field(default_factory=lambda: dict(SIGNAL_ACTIONS))
    unknown_action: Action = UNKNOWN_ACTION  # an Xid or a signal kind not in the tables
    nccl_failures: int = 3  # pods on one node reporting NCCL failures within window_s that make it suspect
    maintenance_lead_s: float = 3600.0  # drain this long before GKE's scheduled host maintenance
    probation_image: str = ""  # runs `preflight run` on a repaired node before it returns
    pools: dict[str, Thresholds] = field(default_factory=dict)  # GPU pool -> what its machines must measure
    # Deep checks (issue 21): `preflight run --deep` at DCGM level 3 on joining and repaired nodes (burn-in),
    # level 2 on idle nodes (sweeps), as Jobs that end after deep_check_timeout_s.
    burn_in: bool = True  # a node that joins, or comes back from a repair, returns only after a burn-in passes
    burn_in_max_per_pool: int = 4  # joining nodes running their burn-in at once, per pool
    burn_in_max_age_s: float = 86400.0  # a node without Warden's records joins if created this recently
    sweeps: bool = True  # deep-check idle nodes as preemptible Kueue workloads
    sweep_every_s: float = 7 * 86400.0  # a node is due once its last deep check is this old (or it has none)
    sweep_idle_s: float = 3600.0  # and no job has used its GPUs for this long
    sweep_max_per_pool: int = 2  # sweeps at once per pool, within the share limit with everything else out
    deep_check_timeout_s: float = 7200.0  # a deep check Job's activeDeadlineSeconds

    def action_for(self, kind: str, code: int | None = None) -> Action:
        """What a signal calls for: Xids by code, the others by kind, anything unknown `unknown_action`."""
        if kind == "xid" and code is not None:
            return self.xid_actions.get(code, self.unknown_action)
        return self.signal_actions.get(cast(SignalKind, kind), self.unknown_action)

    def unambiguous(self, kind: str, code: int | None = None) -> bool:
        """Whether a fault's remedy is not in doubt (UNAMBIGUOUS_XIDS, UNAMBIGUOUS_SIGNALS)."""
        return code in UNAMBIGUOUS_XIDS if kind == "xid" else kind in UNAMBIGUOUS_SIGNALS

    def probation_args(self, pool: str) -> tuple[str, ...]:
        """`preflight run` flags for a node of `pool` on probation (one node); none for a pool not listed."""
        thresholds = self.pools.get(pool)
        return thresholds.args(1) if thresholds else ()


DEFAULTS = Config()


def problems(config: Config) -> list[str]:
    """What the types alone do not refuse: numbers out of range (NaN included)."""
    out = []
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            out.append(f"{f.name}: {value} is not a finite number")
    if not 0 < config.unhealthy_share_limit <= 0.5:
        out.append(f"unhealthy_share_limit: {config.unhealthy_share_limit} is not in (0, 0.5]")
    for name in ("max_per_pool", "max_per_cluster", "repeat_count", "nccl_failures", "burn_in_max_per_pool"):
        if getattr(config, name) < 1:
            out.append(f"{name}: {getattr(config, name)} is below 1")
    for name in ("window_s", "repeat_window_s", "drain_grace_s", "remediate_timeout_s", "maintenance_lead_s"):
        if not getattr(config, name) > 0:
            out.append(f"{name}: {getattr(config, name)} is not a positive number of seconds")
    if config.sweep_max_per_pool < 0:
        out.append(f"sweep_max_per_pool: {config.sweep_max_per_pool} is below 0")
    # A sweep more often than hourly, or an idle wait under a minute, would keep nodes from jobs for checks;
    # a deep check needs minutes (DCGM level 3 on 8 GPUs) and must end within a day.
    for name, low, high in (
        ("burn_in_max_age_s", 60.0, 30 * 86400.0),
        ("sweep_every_s", 3600.0, 365 * 86400.0),
        ("sweep_idle_s", 60.0, 7 * 86400.0),
        ("deep_check_timeout_s", 300.0, 86400.0),
    ):
        if not low <= getattr(config, name) <= high:
            out.append(f"{name}: {getattr(config, name)} is not within [{low:g}, {high:g}] seconds")
    return out


def dumps(config: Config) -> str:
    return codec.dumps(config, SCHEMA)


def loads(text: str, where: str) -> Config:
    """The config in `text`; contract.problem.Invalid (one line: where, what, the fix) when it is not one."""
    if len(text) > MAX_BYTES:
        raise Invalid([f"{where}: larger than 1 MiB, not a config fleet wrote; regenerate it with `make generate`"])
    config = codec.loads(Config, text, SCHEMA, where)
    found = problems(config)
    if found:
        raise Invalid([f"{where}: {found[0]}; regenerate it with `make generate`"])
    return config
