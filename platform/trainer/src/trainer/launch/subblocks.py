"""Each replica group inside one sub-block: where the supervisor puts a group's ranks (README, "Sub-blocks under Ray").

gkr asks Kueue for TAS slices (``podset-slice-required-topology`` = the sub-block label,
``podset-slice-size`` = pods per group), so each sub-block holds whole groups' worth of pods. Ray knows
nothing of that: a ``PACK`` placement group fills nodes wherever it finds room, across sub-blocks. So the
driver chooses the nodes itself (``choose``, pure) and pins each bundle to its node with the placement
group's ``bundle_label_selector`` on Ray's own ``ray.io/node-id`` label (Ray 2.60
``ray/util/placement_group.py``: ``placement_group(..., bundle_label_selector)``, one selector per bundle;
``ray/_private/label_utils.py``: selector values); a group no sub-block can hold waits.

A Ray node's sub-block (``NodeTopology``): its Ray label ``cloud.google.com/gce-topology-subblock`` when
``ray start --labels`` gave it one; else, in a pod, the GKE Node's label of that name, read by the driver
with one ``GET /api/v1/nodes/<name>`` per Ray node (the name from the pod's ``NODE_NAME``, the downward
API variable gkr renders on every pod). Kueue does not tell the pod: with ``kubernetes.io/hostname`` as
the lowest topology level it writes only the hostname into the pod's nodeSelector (Kueue v0.19.2
``pkg/cache/scheduler/tas_flavor_snapshot.go`` ``buildAssignment``; ``pkg/controller/tas/topology_ungater.go``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from contract import incluster, names

log = logging.getLogger("trainer")

SUBBLOCK_LABEL = names.TOPOLOGY_LEVELS[1]  # cloud.google.com/gce-topology-subblock, on every A3 Ultra Node
NODE_ID_LABEL = "ray.io/node-id"  # Ray's default label on every node (ray.util.placement_group.NODE_ID_LABEL_KEY)
NODE_READER = "meridian-trainer-node-reader"  # fleet's ClusterRole: get on nodes, for the trainer's account
NODE_NAME_ENV = names.NODE_NAME_ENV
UNKNOWN = ""  # nodes without a sub-block form one domain of their own: a cluster without topology is one domain


# -- decisions (pure) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RayNode:
    """A live Ray node that can hold ranks: its id, its sub-block (UNKNOWN when it has none) and free rank slots."""

    id: str
    subblock: str
    free: int


@dataclass(frozen=True)
class Choice:
    """Where a group goes: its sub-block and the node of each bundle (rank i on ``nodes[i]``)."""

    subblock: str
    nodes: tuple[str, ...]


def slots(resources: Mapping[str, float], one: Mapping[str, float]) -> int:
    """How many ranks' bundles (``one`` each) fit in ``resources``."""
    return int(min(resources.get(key, 0.0) // need for key, need in one.items() if need > 0))


def choose(nodes: Iterable[RayNode], size: int, one_node: bool) -> Choice | None:
    """The sub-block and nodes for a group of ``size`` ranks, or None: the group waits, never split.

    A sub-block fits when its free slots hold the group, on one node when ``one_node`` (a node has room
    for a whole group: its NVLink domain, as STRICT_PACK did). Of those that fit, the one with the fewest
    free slots (best fit): the sub-blocks with the most room stay whole for the groups and spares to come.
    """
    domains: dict[str, list[RayNode]] = {}
    for node in nodes:
        if node.free > 0:
            domains.setdefault(node.subblock, []).append(node)
    fitting = [
        (sum(n.free for n in members), name)
        for name, members in domains.items()
        if (max(n.free for n in members) if one_node else sum(n.free for n in members)) >= size
    ]
    if not fitting:
        return None
    _, name = min(fitting)
    return Choice(name, tuple(fill(domains[name], size)))


def fill(members: Sequence[RayNode], size: int) -> list[str]:
    """``size`` bundles on as few of ``members`` as possible.

    A group one node holds goes to the emptiest such node: groups then share a node only when every node
    holds one already, so a node's loss takes as few of the run's groups as it can (found by `make twin`:
    two one-rank groups packed on one CPU pod both died with it, and neither could heal from the other).
    A larger group: largest nodes first until one node holds what is left; of those, the one with the
    fewest free slots. The caller guarantees room (their free slots add up to ``size`` at least).
    """
    left = sorted(members, key=lambda n: (-n.free, n.id))
    out: list[str] = []
    while len(out) < size:
        rest = size - len(out)
        holds = [n for n in left if n.free >= rest]
        if holds and not out:
            return [holds[0].id] * rest  # `left` is emptiest first
        if holds:
            return out + [min(holds, key=lambda n: (n.free, n.id)).id] * rest
        node = left.pop(0)
        out += [node.id] * node.free
    return out


def subblock_of(node: Mapping[str, Any]) -> str:
    """The sub-block label of a Kubernetes Node object, UNKNOWN when it has none or a malformed one."""
    metadata = node.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    value = labels.get(SUBBLOCK_LABEL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) and names.is_label_value(value) else UNKNOWN


# -- learning each Ray node's sub-block (Ray and the Kubernetes API) -------------------------------


def node_name() -> str:
    """This Ray node's Kubernetes Node (runs on the node asked: a Ray worker inherits its raylet's environment)."""
    return os.environ.get(NODE_NAME_ENV, "")


class NodeTopology:
    """Ray node id -> sub-block, learned once per Ray node (a replaced pod is a new Ray node, so a new look).

    ``cluster``: the pod's API server and service account (``incluster.discover``); None outside a cluster,
    where a node without the Ray label has no sub-block. The service account needs ``get`` on Nodes only
    (README, "Sub-blocks under Ray": what fleet renders, and why not an init container).
    """

    def __init__(self, ray: Any, cluster: incluster.Cluster | None) -> None:
        self.ray, self.cluster = ray, cluster
        self.known: dict[str, str] = {}
        self.probing: dict[str, Any] = {}  # Ray node id -> ObjectRef of node_name() run there
        remote: Any = ray.remote
        self.probe = remote(num_cpus=0, max_retries=0)(node_name)
        self.warned: set[int] = set()

    def learn(self, nodes: Iterable[Mapping[str, Any]]) -> tuple[dict[str, str], bool]:
        """The sub-blocks of ``nodes`` (``ray.nodes()`` entries) known so far, and whether some are still asked."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        wanted = {str(n["NodeID"]): n for n in nodes}
        for node_id, node in wanted.items():
            if node_id in self.known or node_id in self.probing:
                continue
            label = (node.get("Labels") or {}).get(SUBBLOCK_LABEL)
            if isinstance(label, str) or self.cluster is None:
                self.known[node_id] = label if isinstance(label, str) and names.is_label_value(label) else UNKNOWN
                continue
            here = NodeAffinitySchedulingStrategy(node_id, soft=False)
            self.probing[node_id] = self.probe.options(scheduling_strategy=here).remote()
        if self.probing:
            refs = list(self.probing.values())
            done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
            for node_id, ref in list(self.probing.items()):
                if ref in done:
                    del self.probing[node_id]
                    self.known[node_id] = self._ask(ref)
        found = {i: self.known[i] for i in wanted if i in self.known}
        return found, any(i in self.probing for i in wanted)

    def _ask(self, ref: Any) -> str:
        """The sub-block of the Node whose name the probe returned (one GET), UNKNOWN when that fails."""
        cluster = self.cluster
        if cluster is None:  # given up on the API (below) while this node was asked
            return UNKNOWN
        try:
            name = self.ray.get(ref)
        except self.ray.exceptions.RayError:  # the node went away while asked: it takes no group anyway
            return UNKNOWN
        if not (isinstance(name, str) and names.is_dns1123_subdomain(name)):
            self._warn(-1, f"a Ray node without a valid ${NODE_NAME_ENV} ({str(name)[:80]!r}) counts as no sub-block")
            return UNKNOWN
        try:
            node = incluster.request(cluster, "GET", f"/api/v1/nodes/{quote(name)}", timeout=5)
        except incluster.ApiError as error:
            if error.status in (0, 401, 403):  # no answer or no permission: the same for every node
                self.cluster = None
                hint = "; nodes count as no sub-block from now on"
                if error.status:
                    hint += f" (the trainer's service account needs get on nodes: fleet's ClusterRole {NODE_READER})"
                self._warn(error.status, f"{error}{hint}")
            else:
                self._warn(error.status, f"{error}; that node counts as no sub-block")
            return UNKNOWN
        return subblock_of(node) if isinstance(node, Mapping) else UNKNOWN

    def _warn(self, kind: int, line: str) -> None:
        """One line per kind of trouble (an HTTP status; -1: no node name): a permission fails for every node alike."""
        if kind not in self.warned:
            self.warned.add(kind)
            log.warning("sub-blocks: %s", line)
