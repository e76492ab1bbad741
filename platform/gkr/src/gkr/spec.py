"""The job description researchers write (YAML, flags, or both), as typed data.

Precedence: defaults < job file < flags. Anything left unset is resolved
against the fleet (resolve.py): region, pool, image, priority, per-pod CPU and
memory.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Kind = Literal["rayjob", "raycluster", "job"]
TopologyMode = Literal["required", "preferred"]
TopologyLevel = Literal["block", "subblock", "host"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Topology(Strict):
    mode: TopologyMode = "preferred"
    level: TopologyLevel = "block"


class Ray(Strict):
    head_cpus: int = Field(default=8, ge=1)
    head_memory_gib: int = Field(default=32, ge=1)
    shutdown_after_finish: bool = True  # Kueue requires it for RayJobs
    ttl_seconds: int | None = Field(default=None, ge=0)  # needs shutdown_after_finish
    backoff_limit: int | None = Field(default=None, ge=0)  # not with interactive mode
    interactive: bool = False
    cluster: str | None = None  # run on an existing RayCluster (not with Kueue)


class JobSpec(Strict):
    name: str
    kind: Kind = "rayjob"
    team: str
    region: str | None = None
    pool: str | None = None
    image: str | None = None
    command: str | list[str] | None = None
    pods: int = Field(default=1, ge=1)
    gpus_per_pod: int = Field(default=8, ge=0)
    cpus_per_pod: int | None = Field(default=None, ge=1)
    memory_per_pod_gib: int | None = Field(default=None, ge=1)
    priority: str | None = None
    topology: Topology | None = None
    preflight: bool = True
    checkpoint: bool = True  # mount the region's checkpoint bucket at /checkpoints
    env: dict[str, str] = {}
    ray: Ray = Ray()
