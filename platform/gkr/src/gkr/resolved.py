"""A job resolved against the fleet registry: where it runs and with what (data, no checks).

Its own module so that the renderer and the checks both read it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from contract import names
from contract.registry import Machine, Pool, Region, Registry, Team
from contract.words import count
from gkr import groups, roles
from gkr.spec import JobSpec

SYSTEM_SHARE = 0.9  # what a pod may ask of a node; the rest is the node's own (kubelet, daemons)
DEFAULT_CPU_POD = (4, 16)  # CPUs, GiB of a CPU-only pod that asks for nothing


@dataclass(frozen=True)
class Resolved:
    spec: JobSpec
    registry: Registry
    region: Region
    team: Team
    pool: Pool  # the GPU pool, or for a CPU-only job the CPU pool
    cpu_pool: Pool | None  # where the Ray head and CPU-only pods run (None: the region has none)
    priority: str
    image: str
    cpus: int
    memory_gib: int
    command: list[str]

    @property
    def machine(self) -> Machine:
        return self.pool.machine

    @property
    def namespace(self) -> str:
        return names.team_namespace(self.team.name)

    @property
    def queue(self) -> str:
        return names.local_queue(self.team.name)

    @property
    def gpus(self) -> int:
        """Every GPU the job takes: with roles, the generators' as well (one Workload, one quota)."""
        generators = self.generators
        return self.worker_pods * self.spec.gpus_per_pod + (generators.gpus if generators else 0)

    @property
    def generators(self) -> Resolved | None:
        """An RL job's generator group, resolved as a job of its own on the same pool (gkr/roles.py); else None."""
        if self.spec.roles is None:
            return None
        spec = roles.generator_view(self.spec)
        cpus, memory = pod_size(spec, self.machine)
        return replace(self, spec=spec, image=spec.image or self.image, cpus=cpus, memory_gib=memory)

    def workers_text(self, noun: str = "pod") -> str:
        """ "8 pods", or "8 pods and 1 spare pod": the worker pods, spares apart (they count as much)."""
        spare = f" and {count(self.spare_pods, 'spare pod')}" if self.spare_pods else ""
        return f"{count(self.spec.pods, noun)}{spare}"

    @property
    def pods_text(self) -> str:
        """ "8 pods", or "8 pods and 1 spare pod": what the job's GPUs are counted over."""
        if self.generators is not None:
            return f"{self.workers_text('trainer pod')} and {count(self.generators.spec.pods, 'generator pod')}"
        return self.workers_text()

    @property
    def gpus_text(self) -> str:
        """ "8 pods x 8 GPUs = 64 GPUs": the arithmetic of `gpus`, each role's with roles."""
        generators = self.generators
        if generators is None:
            return f"{self.pods_text} x {self.spec.gpus_per_pod} GPUs = {self.gpus:,} GPUs"
        trainer = replace(self, spec=replace(self.spec, roles=None))
        return (
            f"trainer {trainer.pods_text} x {self.spec.gpus_per_pod} GPUs + generators {generators.gpus_text.split(' = ')[0]}"
            f" = {self.gpus:,} GPUs"
        )

    @property
    def context(self) -> str:
        return self.registry.context(self.region)

    @property
    def spare_pods(self) -> int:
        """Idle worker pods held for replacement groups (gkr/groups.py): admitted, placed and paid with the run."""
        return groups.spare_pods(self.spec) if self.spec.gpus_per_pod else 0

    @property
    def worker_pods(self) -> int:
        return self.spec.pods + self.spare_pods

    @property
    def nodes(self) -> int:
        """Nodes the job's pods take (GPU pods share a node when they use part of its GPUs; CPU pods pack)."""
        # Roles: a node holds one role's pods (each group's pods are placed on their own), so they add up.
        generators = self.generators.nodes if self.generators is not None else 0
        if self.spec.gpus_per_pod == 0:
            return cpu_nodes(self.machine, self.spec.pods, self.cpus, self.memory_gib) + generators
        per_node = self.machine.gpus // self.spec.gpus_per_pod if self.spec.gpus_per_pod <= self.machine.gpus else 1
        return -(-self.worker_pods // per_node) + generators


def cpu_nodes(machine: Machine, pods: int, cpus: int, memory_gib: int) -> int:
    """Machines `pods` pods of this shape pack onto (a pod that does not fit one counts one each)."""
    per_node = min(int(machine.vcpus * SYSTEM_SHARE) // cpus, int(machine.memory_gb * SYSTEM_SHARE) // memory_gib)
    return -(-pods // max(1, per_node))


def default_share(machine: Machine, gpus: int, total: int) -> int:
    """A pod's share of a machine for `gpus` of its GPUs, less what the node keeps for itself."""
    fraction = min(gpus, machine.gpus) / machine.gpus if machine.gpus and gpus else 0.0
    return int(total * fraction * SYSTEM_SHARE)


def pod_size(spec: JobSpec, machine: Machine) -> tuple[int, int]:
    """(CPUs, GiB) of one of the job's pods: as asked, else its GPUs' share of the machine, else a small CPU pod."""
    share = (default_share(machine, spec.gpus_per_pod, t) for t in (machine.vcpus, machine.memory_gb))
    cpus, memory = (
        asked or max(1, part or fallback)
        for asked, part, fallback in zip(
            (spec.cpus_per_pod, spec.memory_per_pod_gib), share, DEFAULT_CPU_POD, strict=True
        )
    )
    return cpus, memory
