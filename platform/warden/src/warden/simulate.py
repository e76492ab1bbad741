"""A simulated GPU cluster that drives the real policy, state machine and round logic.

Nodes hold faults (an Xid that a reboot clears, or one that needs a new
machine); the simulated agent reports them as signals while they last;
commands change the simulated world the way the real adapters would
(cordon, evict after the grace period, reboot with a new boot id, report
the host, whose operation is DONE report_s later, replace with a fresh
machine, probation preflight). Records live only on the nodes,
so "restarting Warden" is just carrying on with the same nodes.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field, replace

from contract import names
from contract.warden import HOST_REPORT_S
from warden.controller import OUT_OF_SERVICE, NodeView, Round, run_round
from warden.policy import Policy, Signal
from warden.state import Facts, HostReport, Record, is_operation


@dataclass
class SimNode:
    name: str
    pool: str
    annotations: dict[str, str] = field(default_factory=dict)
    boot: int = 0
    ready: bool = True
    down_until: float = 0.0
    pods: int = 1
    cordoned: bool = False
    fault: Signal | None = None
    fault_needs_new_machine: bool = False
    preflight: str | None = None
    joined: bool = False  # a new node: burned in once Warden sees it (no record yet)
    report_done_at: float = 0.0  # when its host report's operation is DONE
    touched: Counter[str] = field(default_factory=Counter)  # commands carried out, by verb


@dataclass
class SimCluster:
    nodes: dict[str, SimNode]
    policy: Policy
    now: float = 0.0
    step_s: float = 30.0
    reboot_s: float = 300.0
    report_s: float = HOST_REPORT_S  # a host report's operation, RUNNING until DONE (Google: 10-12 minutes)
    api_error_rate: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    max_out_share_seen: dict[str, float] = field(default_factory=dict)
    blocked_rounds: int = 0

    @staticmethod
    def build(pools: dict[str, int], policy: Policy) -> SimCluster:
        nodes = {
            f"{pool}-{i:04d}": SimNode(f"{pool}-{i:04d}", pool) for pool, count in pools.items() for i in range(count)
        }
        return SimCluster(nodes, policy)

    def inject(self, name: str, signal: Signal, needs_new_machine: bool = False) -> None:
        node = self.nodes[name]
        node.fault, node.fault_needs_new_machine = signal, needs_new_machine

    def clear(self, name: str) -> None:
        """The fault went away on its own (e.g. the job's pods were restarted)."""
        self.nodes[name].fault = None

    def views(self) -> list[NodeView]:
        out = []
        for node in self.nodes.values():
            if not node.ready and self.now >= node.down_until:
                node.ready = True
            record = Record.from_annotations(node.annotations)
            signals = (node.fault,) if node.fault is not None and record.phase in ("healthy", "suspect") else ()
            facts = Facts(
                ready=node.ready,
                boot_id=str(node.boot),
                pods=node.pods,
                preflight=node.preflight,
                joined=node.joined and names.WARDEN_RECORD_ANNOTATION not in node.annotations,
                idle=node.pods == 0,
                check_missing=record.phase == "probation" and node.preflight is None,
                report=HostReport(done=self.now >= node.report_done_at) if is_operation(record.report) else None,
            )
            out.append(NodeView(node.name, node.pool, record, facts, signals))
        return out

    def step(self) -> Round:
        round_ = run_round(self.views(), self.policy, self.now)
        self.blocked_rounds += bool(round_.blocked)
        for name, decision in round_.decisions.items():
            node = self.nodes[name]
            if self.rng.random() < self.api_error_rate:
                continue  # the API call failed: nothing changed, the record was not written either
            labels, annotations = decision.record.to_annotations()
            node.annotations.update(labels | annotations)  # persist first, then act
            for command in decision.commands:
                self._carry_out(node, command.verb)
        self._track_out_of_service()
        self.now += self.step_s
        return round_

    def _carry_out(self, node: SimNode, verb: str) -> None:
        node.touched[verb] += 1
        if verb == "cordon":
            node.cordoned = True
        elif verb == "evict":
            node.pods = 0
        elif verb == "reboot":
            node.boot += 1
            node.ready, node.down_until, node.preflight = False, self.now + self.reboot_s, None
            if node.fault is not None and not node.fault_needs_new_machine:
                node.fault = None
        elif verb == "report_faulty":  # as the actuator does: the operation's name onto the record
            reported = replace(Record.from_annotations(node.annotations), report=f"operation-{node.name}")
            node.annotations.update(reported.to_annotations()[1])
            node.report_done_at = self.now + self.report_s
        elif verb == "replace":
            node.boot += 1
            node.ready, node.down_until, node.preflight = False, self.now + 2 * self.reboot_s, None
            node.fault, node.fault_needs_new_machine = None, False
        elif verb == "preflight":
            node.preflight = "fail" if node.fault is not None else "pass"
        elif verb == "uncordon":
            node.cordoned, node.pods, node.preflight = False, 1, None

    def _track_out_of_service(self) -> None:
        sizes = Counter(n.pool for n in self.nodes.values())
        out = Counter(
            n.pool for n in self.nodes.values() if Record.from_annotations(n.annotations).phase in OUT_OF_SERVICE
        )
        for pool, size in sizes.items():
            self.max_out_share_seen[pool] = max(self.max_out_share_seen.get(pool, 0.0), out[pool] / size)

    def phases(self) -> Counter[str]:
        return Counter(Record.from_annotations(n.annotations).phase for n in self.nodes.values())

    def run(self, rounds: int) -> None:
        for _ in range(rounds):
            self.step()
