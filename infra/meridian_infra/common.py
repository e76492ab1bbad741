"""Settings and small builders that both kinds of stack use."""

from __future__ import annotations

from collections.abc import Sequence

from cdktn_provider_google.storage_bucket import (
    StorageBucket,
    StorageBucketHierarchicalNamespace,
    StorageBucketLifecycleRule,
)
from constructs import Construct

from fleet.model import Fleet

# A3 Ultra's gVNIC and RDMA networks run jumbo frames.
MTU = 8896


def labels(fleet: Fleet, stack: str) -> dict[str, str]:
    """Labels on every resource that takes them (the provider's default_labels)."""
    return {"fleet": fleet.name, "managed-by": "meridian", "stack": stack}


def private_bucket(
    scope: Construct, id_: str, name: str, location: str, lifecycle: Sequence[StorageBucketLifecycleRule] = ()
) -> StorageBucket:
    """A bucket no one outside the project can read: uniform access, public access
    prevention, hierarchical namespace (which excludes versioning and Autoclass)."""
    return StorageBucket(
        scope,
        id_,
        name=name,
        location=location.upper(),
        uniform_bucket_level_access=True,
        public_access_prevention="enforced",
        hierarchical_namespace=StorageBucketHierarchicalNamespace(enabled=True),
        force_destroy=False,
        lifecycle_rule=list(lifecycle) or None,
    )
