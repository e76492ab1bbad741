"""The cluster path's recovery: one supervisor in the driver, one placement group and its actors per replica group.

Ray Train 2.60 replaces its whole worker group when one worker dies, so every replica group restarted
from the newest durable checkpoint (README, "Under Ray: group-level recovery"). Here each replica group is
its own unit instead:

- a placement group of ``ft.group_size`` bundles (one GPU each on CUDA), each bundle pinned to a node the
  supervisor chose inside one sub-block (``subblocks.choose``): on one node when a node can hold the whole
  group (its NVLink domain, one failure domain), else on as few nodes as possible; a group that no
  sub-block can hold waits until one can, never split across two;
- one ``GroupWorker`` actor per bundle running ``trainer.loop.worker.train`` with the group's own rendezvous,
  as the local launcher's processes do (``max_restarts=0``: the supervisor, not Ray, decides what restarts);
- ``ft.spare_groups`` more placement groups whose actors are started and idle (torch imported), so a
  replacement starts at once on healthy capacity instead of waiting for the failed node.

When any actor of a group dies (its process, or its whole node: Ray raises ``ActorDiedError`` for both,
docs.ray.io "Actor Fault Tolerance" and "Node Fault Tolerance"), the supervisor kills the group's other
actors, removes its placement group and hands the group to a spare (or places a new one); after
``ft.restart_delay_s`` it trains and heals from a live group through torchft. A new spare is placed and
waits for capacity. No other group is touched. Each group's events reach the driver (``tail``), so its
console shows every group, wherever it runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from contract import incluster, names
from contract.names import ROLE_RESOURCES
from contract.problem import Invalid
from trainer.config import Config, from_dict, to_dict
from trainer.distributed.regions import manager_port
from trainer.launch.interrupt import pause
from trainer.launch.local import after_death
from trainer.launch.process import EXIT_NONFINITE, EXIT_REFUSED
from trainer.launch.subblocks import NODE_ID_LABEL, Choice, NodeTopology, RayNode, choose, slots
from trainer.observe.console import Console, read_new
from trainer.observe.runs import EventLog

log = logging.getLogger("trainer")
if TYPE_CHECKING:
    from trainer.rl.launch import RLSide

POLL_S = 0.25  # how often the driver looks at its groups: a death is seen within this plus Ray's detection


# -- decisions (pure) ----------------------------------------------------------------------------


def strategy(group_size: int, per_node: int) -> Literal["STRICT_PACK", "PACK"]:
    """STRICT_PACK keeps a group on one node when a node has room for all of it; PACK spreads it as little as it can."""
    return "STRICT_PACK" if group_size <= per_node else "PACK"


def node_slot(node: str, taken: set[tuple[str, int]]) -> int:
    """The lowest slot of ``node`` no other running group holds (``taken``: (node, slot) pairs).

    Decided here, in the one driver that places every group, so two groups of a node never race for a
    port: bounded by the groups a node holds (one per GPU of an 8-GPU node at most). A group's rank 0 serves
    its metrics and its torchft Manager on the ports of this slot (``metrics_port``, ``regions.manager_port``).
    """
    slot = 0
    while (node, slot) in taken:
        slot += 1
    return slot


def metrics_port(base: int, slot: int) -> int:
    """The port a group's rank 0 serves metrics on: ``base`` plus its slot on its node, so a scrape of ports
    base .. base + GPUs per node - 1 finds every group. 0 (any free port) and -1 (off) stay as given."""
    return base + slot if base > 0 else base


def bundle(device: str) -> dict[str, float]:
    """One rank's share of a node: one GPU on CUDA; one logical CPU either way (threads are not limited by it)."""
    return {"CPU": 1.0} | ({"GPU": 1.0} if device == "cuda" else {})


# -- the actors ----------------------------------------------------------------------------------


class GroupWorker:
    """One rank of a replica group in its own Ray worker process: the local launcher's ``worker_main`` as an actor.

    ``max_concurrency=2``: ``train`` runs in one thread while the driver calls ``tail`` in the other.
    """

    def __init__(self, threads: int) -> None:
        import torch

        import trainer.loop.worker  # noqa: F401  (imported now: a spare is ready to train at once)
        from trainer.launch.pod_output import in_pod, to_pod_output

        if in_pod():  # the group's log where `kubectl logs` and Cloud Logging read it, not on the pod's disk
            to_pod_output()
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
        logging.getLogger("trainer").setLevel(logging.INFO)
        logging.getLogger("torchft").setLevel(logging.INFO)  # as a local group's to its file
        torch.set_num_threads(threads)
        self.events: Path | None = None
        self.offset = 0

    def where(self, rendezvous: bool) -> dict[str, Any]:
        """Its node, address and process; ``rendezvous`` (a sharded group's rank 0): also the port of the group's
        store, held from now until it trains (``listen.reserve``), however long it waits as a spare."""
        import ray

        from trainer.distributed.listen import reserve

        ip = ray.util.get_node_ip_address()  # type: ignore[no-untyped-call]
        port = reserve(ip) if rendezvous else 0
        return {"node": ray.get_runtime_context().get_node_id(), "ip": ip, "port": port, "pid": os.getpid()}

    def train(self, config: dict[str, Any], group: int, env: dict[str, str], lighthouse: str) -> dict[str, Any]:
        import ray

        from trainer.loop.nonfinite import NonFiniteStop
        from trainer.loop.worker import train
        from trainer.observe.runs import EventLog, run_dir

        os.environ.update(env)
        # The group's servers advertise this pod's IP (names.ADVERTISE_HOST_ENV): its hostname resolves in no other pod.
        os.environ.setdefault(names.ADVERTISE_HOST_ENV, ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
        cfg = from_dict(config)
        path = run_dir(cfg) / f"events-{group}.jsonl"
        self.offset = path.stat().st_size if path.exists() else 0  # an earlier run's lines are not this one's
        self.events = path
        try:
            return {"code": 0, "report": train(cfg, group, lighthouse)}
        except NonFiniteStop as stop:  # final: a restart would diverge again (worker_main's exit 3)
            EventLog(path).write("stopped", group=group, reason=str(stop))
            return {"code": EXIT_NONFINITE, "reason": str(stop)}
        except Invalid as refused:  # an input it cannot use (worker_main's exit 2): final too
            EventLog(path).write("stopped", group=group, reason=refused.lines[0])
            return {"code": EXIT_REFUSED, "reason": refused.lines[0]}

    def tail(self) -> list[dict[str, Any]]:
        """The group's events since the last call (rank 0's actor): what the driver's console shows."""
        if self.events is None:
            return []
        found, self.offset = read_new(self.events, self.offset)
        return found


class LighthouseActor:
    """The run's torchft Lighthouse (ft.start_lighthouse, the local launcher's settings) beside the driver."""

    def __init__(self, config: dict[str, Any]) -> None:
        from trainer.ft.manager import start_lighthouse

        self.server = start_lighthouse(from_dict(config))

    def address(self) -> str:
        """The Lighthouse at this pod's IP: torchft names its machine, which no other pod can resolve."""
        import ray

        from trainer.ft.manager import with_host

        return with_host(self.server.address(), ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]


# -- the supervisor ------------------------------------------------------------------------------


@dataclass
class Slot:
    """A placement group and its actors: a replica group's, or a spare's (``group`` None).

    ``pg`` None: waiting for a sub-block with room (no actor yet).
    """

    pg: Any
    actors: list[Any]
    placing: list[Any]  # ObjectRefs of each actor's where(): resolved once the group is placed and up
    nodes: tuple[str, ...] = ()  # the Ray node each bundle is pinned to (subblocks.choose)
    subblock: str = ""
    waiting: bool = False  # its "waiting" event was written (once per wait)
    placed: list[dict[str, Any]] = field(default_factory=list)
    group: int | None = None
    due: float = 0.0  # monotonic time the group may start training (the restart delay)
    runs: list[Any] = field(default_factory=list)  # ObjectRefs of each rank's train()
    done: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> train()'s result
    tailing: Any = None  # the pending tail() of rank 0, at most one
    port: int = 0  # its rank 0's metrics port
    index: int = 0  # its slot on its node (node_slot), while it trains

    @property
    def node(self) -> str:
        return str(self.placed[0]["node"]) if self.placed else ""


class Supervisor:
    """Runs ``ft.replica_groups`` groups (and ``ft.spare_groups`` spares) to the end; ``run()`` is the exit code."""

    def __init__(self, cfg: Config, console: Console, out: Path, rl: RLSide | None = None) -> None:
        import ray

        self.ray = ray
        self.cfg, self.console, self.out = cfg, console, out
        self.groups: dict[int, Slot] = {}
        self.spares: list[Slot] = []
        self.restarts = dict.fromkeys(range(cfg.ft.replica_groups), 0)
        self.reports: dict[int, dict[str, Any]] = {}
        self.final, self.failed, self.why = 0, False, ""
        self.lighthouse: Any = None
        self.address = cfg.ft.lighthouse  # a run across regions: the run's Lighthouse, none of our own
        world = cfg.ft.replica_groups * cfg.ft.group_size
        self.threads = 1 if cfg.ft.device == "cuda" else max(1, (os.cpu_count() or 1) // world)
        remote: Any = ray.remote  # untyped for an actor class in Ray's stubs
        self.worker = remote(max_concurrency=2, max_restarts=0)(GroupWorker)
        # The driver's own events (a group lost, its replacement placed and training): the recovery's timeline.
        self.events = EventLog(out / "supervisor.jsonl")
        self.rl = rl  # RL: the controller and the generators beside the groups (trainer/rl/launch.py)
        # With roles (gkr), the trainer's pods carry this Ray resource: its ranks ask for it, never landing on a generator's.
        role = ROLE_RESOURCES["trainer"]
        self.role = {role: 1.0} if role in ray.cluster_resources() else {}  # type: ignore[no-untyped-call]
        self.one = bundle(cfg.ft.device) | self.role  # one rank's bundle
        self.topology = NodeTopology(ray, incluster.discover())  # each node's sub-block

    def run(self) -> int:
        ray = self.ray
        try:
            if self.cfg.ft.enabled and not self.address:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                # On the driver's node (the RayJob's head pod): it lives as long as the run, a GPU node may not.
                here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
                lighthouse_class: Any = ray.remote(LighthouseActor)
                self.lighthouse = lighthouse_class.options(num_cpus=0, scheduling_strategy=here).remote(
                    to_dict(self.cfg)
                )
                self.address = ray.get(self.lighthouse.address.remote())
            for group in range(self.cfg.ft.replica_groups):
                self.groups[group] = self._place(group)
            self.spares = [self._place(None) for _ in range(self.cfg.ft.spare_groups)]
            if self.rl is not None:
                self._start_generators(self.rl)
            while self.groups:
                pause(POLL_S)
                if self.rl is not None:
                    self.rl.poll()
                for slot in [*self.groups.values(), *self.spares]:
                    self._tick(slot)
        finally:
            for slot in [*self.groups.values(), *self.spares]:
                self._release(slot)
            if self.lighthouse is not None:
                ray.kill(self.lighthouse)
        return self.final or (1 if self.failed else 0)

    def _start_generators(self, rl: RLSide) -> None:
        from trainer.rl.ray_generators import RayGenerators, tensor_parallel

        cuda = self.cfg.ft.device == "cuda"
        rl.start(RayGenerators(self.ray, to_dict(self.cfg), cuda=cuda, tp=tensor_parallel(os.environ)))

    def _place(self, group: int | None, due: float = 0.0) -> Slot:
        """A slot for the group (or a spare): placed now if a sub-block has room, else waiting for one."""
        slot = Slot(None, [], [], group=group, due=due)
        self._try_place(slot)
        return slot

    def _try_place(self, slot: Slot) -> None:
        """Pin the slot's bundles to the nodes ``subblocks.choose`` gives, or leave it waiting (said once)."""
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        size, one = self.cfg.ft.group_size, self.one
        choice, per_node, quiet = self._choose(size)
        if choice is None:
            if not (slot.waiting or quiet):
                slot.waiting = True
                self.events.write("waiting", group=slot.group, ranks=size)
                if slot.group is not None:
                    self.console.print(f"replica group {slot.group}: waiting for {size} free slot(s) in one sub-block")
            return
        selectors = [{NODE_ID_LABEL: node} for node in choice.nodes]
        pg = placement_group([one] * size, strategy=strategy(size, per_node), bundle_label_selector=selectors)
        slot.actors = [
            self.worker.options(
                num_cpus=one["CPU"],
                num_gpus=one.get("GPU", 0),
                resources={k: v for k, v in one.items() if k not in ("CPU", "GPU")},
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=rank),
            ).remote(self.threads)
            for rank in range(size)
        ]
        slot.pg, slot.nodes, slot.subblock = pg, choice.nodes, choice.subblock
        slot.placing = [a.where.remote(rank == 0 and size > 1) for rank, a in enumerate(slot.actors)]
        slot.waiting = False

    def _choose(self, size: int) -> tuple[Choice | None, int, bool]:
        """Where a group of ``size`` goes now, the most ranks a node holds, and whether a wait goes unsaid.

        A node's free slots: its total less what this supervisor's slots pin there (placed or not yet),
        and no more than Ray's own count of what is free there (another user of the node, e.g. RL's engines).
        A wait is not said while nodes' sub-blocks are still being read, nor while only Ray's count is short
        (it lags a released placement group by a moment).
        """
        from ray._private.state import available_resources_per_node  # DeveloperAPI; ray.util.tpu uses it too

        alive = [n for n in self.ray.nodes() if n["Alive"]]  # type: ignore[no-untyped-call]
        total = {str(n["NodeID"]): slots(n["Resources"], self.one) for n in alive}
        total = {node: count for node, count in total.items() if count > 0}
        known, learning = self.topology.learn(n for n in alive if str(n["NodeID"]) in total)
        available = available_resources_per_node()  # type: ignore[no-untyped-call]
        held: dict[str, int] = {}
        for s in [*self.groups.values(), *self.spares]:
            for node in s.nodes:
                held[node] = held.get(node, 0) + 1
        ours = {node: count - held.get(node, 0) for node, count in total.items() if node in known}
        nodes = [
            RayNode(n, known[n], max(0, min(free, slots(available.get(n, {}), self.one)))) for n, free in ours.items()
        ]
        per_node = max(total.values(), default=0)
        choice = choose(nodes, size, one_node=size <= per_node)
        if choice is not None or learning:
            return choice, per_node, True
        room = choose([RayNode(n, known[n], max(0, free)) for n, free in ours.items()], size, size <= per_node)
        return None, per_node, room is not None

    def _unpin(self, slot: Slot) -> None:
        """Back to waiting, without a restart: a node the slot was pinned to died before its actors were up."""
        self._release(slot)
        self.events.write("unplaced", group=slot.group, nodes=list(slot.nodes))
        slot.pg, slot.actors, slot.placing, slot.nodes, slot.subblock = None, [], [], (), ""

    def _release(self, slot: Slot) -> None:
        from ray.util.placement_group import remove_placement_group

        for actor in slot.actors:
            self.ray.kill(actor, no_restart=True)
        if slot.pg is not None:
            remove_placement_group(slot.pg)

    def _tick(self, slot: Slot) -> None:
        """Move one slot on: placed -> training (when due) -> done or dead; show what its group logged."""
        ray = self.ray
        try:
            if slot.pg is None:
                self._try_place(slot)
                return
            if not slot.placed:
                ready, _ = ray.wait(slot.placing, num_returns=len(slot.placing), timeout=0)
                if len(ready) < len(slot.placing):
                    if not set(slot.nodes) <= self._alive():  # pinned to a dead node: it would wait for ever
                        self._unpin(slot)
                    return
                slot.placed = ray.get(slot.placing)
                self._placed(slot, slot.group)
            if slot.group is None:
                return  # a spare, placed and waiting
            if not slot.runs:
                if time.monotonic() >= slot.due:
                    self._start(slot)
                return
            self._follow(slot)
            for rank, ref in enumerate(slot.runs):
                if rank not in slot.done and ray.wait([ref], timeout=0)[0]:
                    slot.done[rank] = ray.get(ref)
        except ray.exceptions.RayError as error:  # an actor died (its process or its node), or train() raised
            self._lost(slot, _first_line(error))
            return
        failed = [r for r in slot.done.values() if r["code"] != 0]
        if failed:
            self._lost(slot, failed[0].get("reason", ""), code=failed[0]["code"])
        elif len(slot.done) == len(slot.runs):
            self._finished(slot)

    def _placed(self, slot: Slot, group: int | None, **extra: Any) -> None:
        """The ``placed`` event: where ``slot`` is, for ``group``, and its rendezvous port (held by its rank 0; 0
        for a one-rank group)."""
        nodes = [p["node"] for p in slot.placed]
        port = slot.placed[0]["port"]
        self.events.write(
            "placed", group=group, node=slot.node, nodes=nodes, subblock=slot.subblock, port=port, **extra
        )

    def _alive(self) -> set[str]:
        return {str(n["NodeID"]) for n in self.ray.nodes() if n["Alive"]}  # type: ignore[no-untyped-call]

    def _start(self, slot: Slot) -> None:
        assert slot.group is not None
        group, cfg = slot.group, self.cfg
        slot.index = node_slot(slot.node, {(s.node, s.index) for s in self.groups.values() if s.runs})
        slot.port = metrics_port(cfg.run.metrics_port, slot.index)
        config = to_dict(cfg)
        config["run"]["metrics_port"] = slot.port
        config["ft"]["manager_port"] = manager_port(cfg, slot.index)
        rendezvous = slot.placed[0]
        slot.runs = [
            actor.train.remote(config, group, self._env(rendezvous, rank), self.address)
            for rank, actor in enumerate(slot.actors)
        ]
        self._record()
        manager = config["ft"]["manager_port"]
        if cfg.ft.lighthouse_tls and not manager:  # more groups on its node than the rule names ports for
            self.console.print(
                f"replica group {group}: no Manager port left in {names.MANAGER_PORTS}: other regions cannot heal from it"
            )
        self.events.write("training", group=group, node=slot.node, metrics_port=slot.port, manager_port=manager)
        self.console.print(
            f"replica group {group}: training on {rendezvous['ip']} ({len(slot.actors)} rank(s), metrics port {slot.port})"
        )

    def _env(self, rendezvous: dict[str, Any], rank: int) -> dict[str, str]:
        if self.cfg.ft.group_size == 1:
            return {}
        # group.join_group's rendezvous; LOCAL_RANK 0: Ray shows each actor only its own GPU.
        return {
            "MASTER_ADDR": str(rendezvous["ip"]),
            "MASTER_PORT": str(rendezvous["port"]),
            "RANK": str(rank),
            "WORLD_SIZE": str(self.cfg.ft.group_size),
            "LOCAL_RANK": "0",
        }

    def _follow(self, slot: Slot) -> None:
        """Show what the group logged since the last look (one tail() in flight per group)."""
        if slot.tailing is not None:
            if not self.ray.wait([slot.tailing], timeout=0)[0]:
                return
            self.console.show([{"group": slot.group, **e} for e in self.ray.get(slot.tailing)])
        slot.tailing = slot.actors[0].tail.remote()

    def _finished(self, slot: Slot) -> None:
        assert slot.group is not None
        slot.tailing = None
        with contextlib.suppress(self.ray.exceptions.RayError):  # the last lines (the final step) before the actors go
            last = self.ray.get(slot.actors[0].tail.remote(), timeout=30)
            self.console.show([{"group": slot.group, **e} for e in last])
        self.reports[slot.group] = slot.done[0]["report"]
        self._release(slot)
        del self.groups[slot.group]

    def _lost(self, slot: Slot, reason: str, code: int = 1) -> None:
        """A group (or a spare) lost an actor: release it all, and restart the group elsewhere if allowed."""
        self._release(slot)
        self.events.write("lost", group=slot.group, node=slot.node, reason=reason)
        if slot.group is None:  # a spare's node died: hold another
            self.spares.remove(slot)
            self.spares.append(self._place(None))
            return
        group = slot.group
        del self.groups[group]
        if self.rl is not None:
            self.rl.group_gone(group)
        verdict = after_death(self.cfg.ft.restart_failed, self.restarts[group], code, self.cfg.ft.max_restarts)
        if verdict == "final":
            self.final = self.final or code
            self.why = self.why or f"replica group {group}: {reason}"
            self.console.print(f"replica group {group}: stopped ({reason}); not restarting it")
            return
        if verdict == "fail":
            self.failed = True
            self.why = self.why or f"replica group {group} lost after {self.restarts[group]} restart(s): {reason}"
            self.console.print(f"replica group {group}: lost ({reason})")
            return
        self.restarts[group] += 1
        due = time.monotonic() + self.cfg.ft.restart_delay_s
        spare = next((s for s in self.spares if s.placed and s.node != slot.node), None)
        spare = spare or next((s for s in self.spares if s.node != slot.node), None)
        if spare is not None:
            self.spares.remove(spare)
            spare.group, spare.due = group, due
            self.groups[group] = spare
            if spare.placed:  # already up: no actor to start (else its placement writes the event)
                self._placed(spare, group, spare=True)
            self.spares.append(self._place(None))  # pending until capacity comes back (a repaired or new node)
        else:
            self.groups[group] = self._place(group, due)
        where = "a spare" if spare is not None else "a new placement"
        delay, limit = self.cfg.ft.restart_delay_s, self.cfg.ft.max_restarts
        self.console.restarted(group, f"lost ({reason}) on {where}", delay, self.restarts[group], limit)

    def _record(self) -> None:
        """placement.json: where each group trains (node, address, pids, metrics port), for operators and tests."""
        found = {
            str(g): {
                "node": s.node,
                "nodes": [p["node"] for p in s.placed],
                "subblock": s.subblock,
                "ip": s.placed[0]["ip"],
                "pids": [p["pid"] for p in s.placed],
                "metrics_port": s.port,
            }
            for g, s in sorted(self.groups.items())
            if s.runs
        }
        (self.out / "placement.json").write_text(json.dumps(found, indent=1))


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0][:200]}" if lines else type(error).__name__
