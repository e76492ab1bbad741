"""Where each stack keeps its state, and how stacks read each other's outputs.

State lives in the spec's GCS bucket, one prefix per stack. `local` keeps it
in infra/.state/ instead, for synthesis and plans without credentials.
"""

from __future__ import annotations

from typing import Literal

from cdktn import DataTerraformRemoteStateGcs, DataTerraformRemoteStateLocal, GcsBackend, LocalBackend, TerraformStack
from constructs import Construct

from fleet.model import Fleet

Backend = Literal["gcs", "local"]
BACKENDS: tuple[Backend, ...] = ("gcs", "local")


def state_prefix(fleet: Fleet, stack: str) -> str:
    return f"{fleet.name}/{stack}"


def _local_path(stack: str) -> str:
    # Terraform runs in infra/cdktf.out/stacks/<stack>/: three levels below infra/.
    return f"../../../.state/{stack}.tfstate"


def use_backend(stack: TerraformStack, fleet: Fleet, name: str, backend: Backend) -> None:
    if backend == "local":
        LocalBackend(stack, path=_local_path(name))
    else:
        GcsBackend(stack, bucket=fleet.project.state_bucket, prefix=state_prefix(fleet, name))


def remote_state(
    scope: Construct, fleet: Fleet, name: str, backend: Backend
) -> DataTerraformRemoteStateGcs | DataTerraformRemoteStateLocal:
    """Outputs of stack `name`, read from its state."""
    if backend == "local":
        return DataTerraformRemoteStateLocal(scope, f"{name}_state", path=_local_path(name))
    return DataTerraformRemoteStateGcs(
        scope, f"{name}_state", bucket=fleet.project.state_bucket, prefix=state_prefix(fleet, name)
    )
