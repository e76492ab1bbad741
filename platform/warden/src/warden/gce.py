"""The Compute Engine calls Warden makes, over the REST API (standard library only).

reset (a reboot from outside the guest), reportHostAsFaulty (ask Google to
retire the physical host; GPU faults are UNRECOVERABLE_GPU_ERROR), reading
that report's zonal Operation (the VM must stay until it is DONE), and
recreating the instance in its managed instance group so the pool keeps its
size. The token comes from the metadata server (Workload Identity gives the
warden Google service account); tests pass their own and a local base URL.

Every failure (an HTTP status, a timeout, a dropped connection, a reply that
is not JSON) is an ApiError, status 0 when no status came back, exactly as
for the Kubernetes client, so the service handles both alike.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from warden.errors import ApiError

COMPUTE = "https://compute.googleapis.com/compute/v1"
METADATA_TOKEN = "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"


def metadata_token() -> str:
    request = urllib.request.Request(METADATA_TOKEN, headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(json.load(response)["access_token"])


def operation_outcome(operation: dict[str, Any]) -> tuple[bool, str]:
    """Whether a zonal Operation is DONE, and its error codes if it ended in error ("" if not): pure.

    An Operation's `status` is PENDING, RUNNING or DONE; one that failed is DONE with `error.errors[]`,
    each with a `code` (https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations). The codes
    go into Events and logs, so only their first 200 printable ASCII characters are kept.
    """
    error, status = operation.get("error"), operation.get("httpErrorStatusCode")
    items = error.get("errors") if isinstance(error, dict) else None
    codes = [str(e.get("code") or "UNKNOWN") for e in items if isinstance(e, dict)] if isinstance(items, list) else []
    if not codes and (error is not None or (isinstance(status, int) and status >= 400)):
        codes = [f"HTTP {status}" if isinstance(status, int) else "UNKNOWN"]  # failed, and no code said why
    text = ", ".join(codes)
    return operation.get("status") == "DONE", "".join(c for c in text if " " <= c <= "~")[:200]


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
    # Where the group lives: "zones/<zone>" (GKE node pools: one zonal group per zone) or "regions/<region>".
    group_location: str = ""

    @property
    def path(self) -> str:
        return f"projects/{self.project}/zones/{self.zone}/instances/{self.name}"


class Compute:
    """`guard`, when set, is called before every POST and raises LeaseLost to stop it."""

    def __init__(
        self,
        token: Callable[[], str] = metadata_token,
        base: str = COMPUTE,
        timeout: float = 30,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self.token, self.base, self.timeout, self.guard = token, base.rstrip("/"), timeout, guard

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None
        try:
            headers = {"Authorization": f"Bearer {self.token()}"}
            if method == "POST":
                data, headers["Content-Type"] = json.dumps(body or {}).encode(), "application/json"
                if self.guard is not None:
                    self.guard()
            request = urllib.request.Request(f"{self.base}/{path}", data=data, method=method, headers=headers)
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                result = json.load(response)  # a zonal Operation, or the resource for a GET
        except urllib.error.HTTPError as error:
            raise ApiError(error.code, method, path, error.read().decode(errors="replace")) from None
        except (OSError, http.client.HTTPException, ValueError, RecursionError) as error:
            # URLError, timeouts and resets are OSErrors; an IncompleteRead is an HTTPException; bad JSON a ValueError.
            raise ApiError(0, method, path, f"{type(error).__name__}: {error}") from None
        if not isinstance(result, dict):
            raise ApiError(0, method, path, "reply is not a JSON object")
        return result

    def _post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._call("POST", path, body)

    def group_of(self, instance: Instance) -> Instance:
        """The instance with its managed instance group, from the `created-by` metadata GCE sets
        (projects/<number>/zones/<zone>/instanceGroupManagers/<name>, or regions/<region>/... for a regional group)."""
        found = self._call("GET", instance.path)
        items = (found.get("metadata") or {}).get("items") or []
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or item.get("key") != "created-by":
                continue
            value = str(item.get("value", ""))
            if "/instanceGroupManagers/" not in value:
                continue
            parts = value.split("/")
            at = parts.index("instanceGroupManagers")
            if at >= 2 and parts[at - 2] in ("zones", "regions") and at + 1 < len(parts) and parts[at + 1]:
                return replace(instance, group=parts[at + 1], group_location=f"{parts[at - 2]}/{parts[at - 1]}")
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

    def operation(self, instance: Instance, name: str) -> dict[str, Any]:
        """zoneOperations.get: one of the instance's zonal Operations as it stands now, without waiting.

        Not zoneOperations.wait, which holds the request up to 2 minutes: a round must not stall on one node.
        """
        quoted = urllib.parse.quote(name, safe="")
        return self._call("GET", f"projects/{instance.project}/zones/{instance.zone}/operations/{quoted}")

    def recreate_in_group(self, instance: Instance) -> dict[str, Any]:
        """Replace the machine and keep the pool's size.

        instanceGroupManagers.recreateInstances deletes the instance and creates it again from the
        group's template, leaving targetSize alone; deleteInstances "reduces the targetSize of the
        managed instance group by the number of instances that you delete", so every replacement
        would shrink the pool by one (https://cloud.google.com/compute/docs/reference/rest/v1/
        instanceGroupManagers/recreateInstances and .../deleteInstances). The instance is named by
        its partial URL, zones/<zone>/instances/<name>. GKE node pools run zonal groups; a regional
        group (regionInstanceGroupManagers.recreateInstances, same body) is handled for completeness.
        """
        if instance.group is None:
            raise ApiError(0, "POST", instance.path, "no managed instance group known; GKE nodes always have one")
        location = instance.group_location or f"zones/{instance.zone}"
        body = {"instances": [f"zones/{instance.zone}/instances/{instance.name}"]}
        return self._post(
            f"projects/{instance.project}/{location}/instanceGroupManagers/{instance.group}/recreateInstances", body
        )
