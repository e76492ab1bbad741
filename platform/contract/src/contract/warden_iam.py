"""The IAM permissions Warden's Google Cloud calls need: the one map infra's custom role is built from.

Keys are the Compute Engine REST methods `warden.gce` calls (resource collection and method, as
https://cloud.google.com/compute/docs/reference/rest/v1 names them); values the permissions each
method's reference page lists under "IAM Permissions". tests/warden/test_iam.py reads every call in
warden.gce and fails on one missing here; tests/infra checks the synthesized role holds exactly these.
Warden reaches Kubernetes through RBAC, not IAM, and calls no GKE (container.googleapis.com) method.
"""

from __future__ import annotations

COMPUTE_CALLS: dict[str, tuple[str, ...]] = {
    # Compute.group_of: the instance's `created-by` metadata names its managed instance group.
    "instances.get": ("compute.instances.get",),
    # Compute.perform_maintenance: the host maintenance GKE announced, started on a drained node.
    "instances.performMaintenance": ("compute.instances.performMaintenance",),
    "instances.reset": ("compute.instances.reset",),
    "instances.reportHostAsFaulty": ("compute.instances.reportHostAsFaulty",),
    # Compute.operation: the host report's zonal Operation, read until DONE before the VM is recreated.
    "zoneOperations.get": ("compute.zoneOperations.get",),
    # Zonal and regional groups alike (regionInstanceGroupManagers.recreateInstances asks the same).
    "instanceGroupManagers.recreateInstances": ("compute.instanceGroupManagers.update",),
}


def role_permissions() -> tuple[str, ...]:
    """Every permission of every call, sorted: Warden's custom role, nothing more."""
    return tuple(sorted({p for permissions in COMPUTE_CALLS.values() for p in permissions}))
