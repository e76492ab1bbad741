"""Ray Train with replica groups of several workers: one worker per GPU, groups of ``ft.group_size``.

Ray 2.60's ``TorchftConfig`` forms replica groups of exactly one worker (its worker group passes
``replica_group_size=1``, marked "TODO: change after we support replica groups of size > 1"). Until a
Ray release forms larger groups, this backend does the grouping itself: workers are ordered by node,
so ``group_size`` consecutive world ranks are one group (with ``group_size`` = GPUs per pod, one
node); each group gets its own rendezvous (the group's first worker's address and a free port there)
and ``group.join_group`` builds the group's process group from it, exactly as the local launcher's
per-group store. The Lighthouse is a Ray actor started by the driver, or, in a run across regions
(``ft.lighthouse``), the run's own, and then groups of one worker use this backend too: Ray's
``TorchftConfig`` always starts a Lighthouse of its own.

What differs from the local launcher: Ray Train restarts its whole worker group when a worker dies,
so a dead rank takes every group down, and all of them resume from the newest durable checkpoint
(there is no live peer to heal from). The local launcher restarts only the dead group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray
from ray.train._internal.utils import get_address_and_port
from ray.train.backend import Backend, BackendConfig
from ray.train.torch import TorchConfig

from contract.names import LIGHTHOUSE_ENV


def _set_env(env: dict[str, str]) -> None:
    import os

    os.environ.update(env)


class _GroupsBackend(Backend):
    """Sets each worker's group rendezvous; each worker joins and leaves its group itself (group.py)."""

    share_cuda_visible_devices = True  # each worker sees its node's GPUs and picks LOCAL_RANK's

    def on_start(self, worker_group: Any, backend_config: BackendConfig) -> None:
        assert isinstance(backend_config, GroupsConfig)
        size = backend_config.group_size
        pending = []
        for first in range(0, len(worker_group), size):
            addr, port = worker_group.execute_single(first, get_address_and_port)
            for rank in range(size):
                env = {
                    "MASTER_ADDR": addr,
                    "MASTER_PORT": str(port),
                    "RANK": str(rank),
                    LIGHTHOUSE_ENV: backend_config.lighthouse,
                }
                pending.append(worker_group.execute_single_async(first + rank, _set_env, env))
        ray.get(pending)


@dataclass
class GroupsConfig(TorchConfig):
    """``TorchTrainer``'s torch_config for groups of several workers: no world-wide process group."""

    group_size: int = 1
    lighthouse: str = ""

    @property
    def backend_cls(self) -> type[Backend]:
        return _GroupsBackend


def group_of(world_rank: int, group_size: int) -> tuple[int, int]:
    """(replica group, rank inside it) of a Ray Train worker: consecutive ranks share a group."""
    return world_rank // group_size, world_rank % group_size


def start_lighthouse(kwargs: dict[str, Any]) -> tuple[Any, str]:
    """The run's Lighthouse as a Ray actor (no CPU reserved: it only answers quorum requests)."""
    from ray.train.v2.torch.torchft_config import LighthouseServerActor

    actor_class: Any = LighthouseServerActor  # a Ray actor class: .options/.remote
    actor = actor_class.options(num_cpus=0).remote(lighthouse_kwargs={"bind": "[::]:0"} | kwargs)
    return actor, ray.get(actor.address.remote())
