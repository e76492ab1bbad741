"""The Compute Engine calls Warden makes, over the REST API (standard library only).

reset (a reboot from outside the guest), reportHostAsFaulty (ask Google to
retire the physical host; GPU faults are UNRECOVERABLE_GPU_ERROR), and
deleting the instance from its managed instance group so GKE creates a fresh
one. The token comes from the metadata server (Workload Identity gives the
warden Google service account); tests pass their own and a local base URL.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

COMPUTE = "https://compute.googleapis.com/compute/v1"
METADATA_TOKEN = "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"


def metadata_token() -> str:
    request = urllib.request.Request(METADATA_TOKEN, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(json.load(response)["access_token"])


def instance_of(provider_id: str) -> Instance | None:
    """The instance behind a GKE Node's spec.providerID, gce://<project>/<zone>/<name>."""
    parts = provider_id.removeprefix("gce://").split("/")
    if not provider_id.startswith("gce://") or len(parts) != 3 or not all(parts):
        return None
    return Instance(*parts)


@dataclass(frozen=True)
class Instance:
    project: str
    zone: str
    name: str
    group: str | None = None  # the managed instance group GKE runs the node pool in

    @property
    def path(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}/instances/{self.name}"


class Compute:
    def __init__(self, token: Callable[[], str] = metadata_token, base: str = COMPUTE, timeout: float = 30) -> None:
        self.token, self.base, self.timeout = token, base.rstrip("/"), timeout

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token()}"}
        data = None
        if method == "POST":
            data, headers["Content-Type"] = json.dumps(body or {}).encode(), "application/json"
        request = urllib.request.Request(f"{self.base}/{path}", data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            result: dict[str, Any] = json.load(response)
            return result  # a zonal Operation, or the resource for a GET

    def _post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._call("POST", path, body)

    def group_of(self, instance: Instance) -> Instance:
        """The instance with its managed instance group, from the `created-by` metadata GCE sets."""
        found = self._call("GET", instance.path)
        for item in found.get("metadata", {}).get("items", []):
            if item.get("key") == "created-by" and "/instanceGroupManagers/" in item.get("value", ""):
                return replace(instance, group=item["value"].rsplit("/", 1)[1])
        return instance

    def perform_maintenance(self, instance: Instance) -> dict[str, Any]:
        """Start the host maintenance GKE announced now, on a drained node, instead of mid-training."""
        return self._post(f"{instance.path}/performMaintenance")

    def reset(self, instance: Instance) -> dict[str, Any]:
        return self._post(f"{instance.path}/reset")

    def report_host_as_faulty(self, instance: Instance, reason: str) -> dict[str, Any]:
        body = {
            "disruptionSchedule": "IMMEDIATE",
            "faultReasons": [{"behavior": "UNRECOVERABLE_GPU_ERROR", "description": reason[:1000]}],
        }
        return self._post(f"{instance.path}/reportHostAsFaulty", body)

    def delete_from_group(self, instance: Instance) -> dict[str, Any]:
        if instance.group is None:
            raise ValueError(f"{instance.name}: no managed instance group known; GKE nodes always have one")
        body = {
            "instances": [f"zones/{instance.zone}/instances/{instance.name}"],
            "skipInstancesOnValidationError": True,
        }
        return self._post(
            f"projects/{instance.project}/zones/{instance.zone}/instanceGroupManagers/{instance.group}/deleteInstances",
            body,
        )
