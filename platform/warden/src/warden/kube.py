"""The Kubernetes API calls Warden makes, through the official Python client.

Requests go through the client's ApiClient (kubeconfig or in-cluster
credentials, TLS) with raw JSON in and out: Warden reads a few fields of
many Nodes and typed models would only slow it down. Every request passes a
token bucket, so a storm of faults cannot flood the API server.

Every list that others can grow (Nodes, team pods, Events, which any team
may create without a count quota) is read in pages of PAGE items with
`limit` and `continue` ("Retrieving large results sets in chunks",
https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks),
and the pods and Events are handed on one at a time as their page arrives:
what Warden holds is one page, not the cluster's list (200,000 Events in one
reply took 1.1 GiB, over Warden's 512 MiB limit; issue 39). A continue token
that expired between two pages (410 Expired) ends the read with ListExpired,
and `relisting` reads again from the start, as client-go's pager does
(k8s.io/client-go/tools/pager, ListPager with FullListIfExpired).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import quote

from warden.errors import ApiError, LeaseLost, ListExpired
from warden.ratelimit import TokenBucket

__all__ = ["MERGE", "PAGE", "STRATEGIC", "ApiError", "Kube", "LeaseLost", "ListExpired", "client", "relisting"]

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
PAGE = 500  # items per list request: client-go's pager's default page size (k8s.io/client-go/tools/pager)
RELISTS = 3  # reads from the start after an expired continue token, before the read fails like any other call

T = TypeVar("T")


def relisting(read: Callable[[], T], attempts: int = RELISTS) -> T:
    """`read()`, again from the start while a list it reads expires part-way (ListExpired), at most `attempts` times.

    `read` must start from nothing each time: what it made of the pages before the expiry is dropped.
    """
    for attempt in range(attempts):
        try:
            return read()
        except ListExpired:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable: attempts >= 1")


def client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An ApiClient: in-cluster credentials when running in a pod, else a kubeconfig."""
    from kubernetes import client as k8s
    from kubernetes import config

    configuration = k8s.Configuration()
    # No retries inside urllib3: a timed-out call would otherwise block a round for 4 x the
    # timeout; Warden retries next round, with backoff per node (warden.ratelimit.Backoff).
    configuration.retries = False
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return k8s.ApiClient(configuration)
        except config.ConfigException:
            pass
    config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)  # type: ignore[no-untyped-call]
    return k8s.ApiClient(configuration)


class Kube:
    """`guard`, when set, is called before every mutating request and raises LeaseLost to stop it."""

    def __init__(
        self,
        api: Any,
        limiter: TokenBucket | None = None,
        timeout: float = 30,
        guard: Callable[[], None] | None = None,
    ) -> None:
        self.api, self.limiter, self.timeout, self.guard = api, limiter or TokenBucket(20, 40), timeout, guard

    def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: Any,
        content_type: str,
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        self.limiter.take()
        if method != "GET" and self.guard is not None:
            self.guard()  # after the limiter's wait, right before the request leaves
        headers = {"Accept": "application/json", "Content-Type": content_type}
        method, url, headers, body, _ = self.api.param_serialize(
            method, path, query_params=query, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        return self.api.call_api(method, url, headers, body, _request_timeout=timeout or self.timeout)

    def request(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            response = self._send(method, path, query or [], body, content_type)
            data = response.read()
        except ApiException as error:  # the client raises for some statuses itself
            raise ApiError(error.status or 0, method, path, str(error.body or error.reason)) from None
        except (HTTPError, OSError) as error:  # timeouts, refused or dropped connections: like any failed call
            raise ApiError(0, method, path, f"{type(error).__name__}: {error}") from None
        if not 200 <= response.status < 300:
            raise ApiError(response.status, method, path, data.decode(errors="replace"))
        try:
            result = json.loads(data) if data else {}
        except (ValueError, RecursionError):
            raise ApiError(response.status, method, path, "reply is not JSON") from None
        if not isinstance(result, dict):
            raise ApiError(response.status, method, path, "reply is not a JSON object")
        return result

    def watch(
        self, path: str, resource_version: str, timeout_s: int, selector: list[tuple[str, str]] | None = None
    ) -> Iterator[dict[str, Any]]:
        """Watch events ({"type", "object"}) from resource_version until the server ends the stream."""
        query = [
            *(selector or []),
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_s)),
        ]
        # The read timeout must outlast the server's own end of the stream, or a quiet watch
        # would be cut (and the cache relisted) every `timeout` seconds.
        response = self._send("GET", path, query, None, "application/json", (self.timeout, timeout_s + self.timeout))
        if not 200 <= response.status < 300:
            raise ApiError(response.status, "GET", path, response.read().decode(errors="replace"))
        buffer = b""
        for chunk in response.response.stream(amt=65536, decode_content=True):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    yield json.loads(line)
        response.response.release_conn()

    # Nodes

    # Lists, in pages

    def pages(self, path: str, query: list[tuple[str, str]] | None = None) -> Iterator[dict[str, Any]]:
        """Each page of a list (at most PAGE items), one request each, as the caller asks for the next.

        A 410 for a continue token raises ListExpired: the pages before it came from a snapshot that is gone.
        """
        token = ""
        while True:
            paging = [("limit", str(PAGE)), *([("continue", token)] if token else [])]
            try:
                page = self.request("GET", path, [*(query or []), *paging])
            except ApiError as error:
                if error.status == 410 and token:
                    raise ListExpired(410, "GET", path, "the list's continue token expired; list again") from None
                raise
            yield page
            meta = page.get("metadata")
            found = meta.get("continue") if isinstance(meta, dict) else None
            if not found or not isinstance(found, str):
                return
            token = found

    def items(self, path: str, query: list[tuple[str, str]] | None = None) -> Iterator[dict[str, Any]]:
        """The items of a list one by one, read a page at a time: a page is dropped once its items are handed on."""
        for page in self.pages(path, query):
            found = page.get("items")
            if found is not None and not isinstance(found, list):
                raise ApiError(200, "GET", path, "a list reply whose items are not a list")
            yield from found or []

    def list_nodes(self) -> tuple[list[dict[str, Any]], str]:
        """Every Node (the cache keeps them all: their number is the fleet's, not a tenant's) and the list's version."""

        def read() -> tuple[list[dict[str, Any]], str]:
            items: list[dict[str, Any]] = []
            version = ""
            for page in self.pages("/api/v1/nodes"):
                items += page.get("items") or []
                version = str((page.get("metadata") or {}).get("resourceVersion") or version)
            return items, version

        return relisting(read)

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", f"/api/v1/nodes/{quote(name)}", body=patch, content_type=MERGE)

    def patch_node_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        # Strategic merge: conditions merge by type, so the agent's leave the kubelet's alone.
        return self.request("PATCH", f"/api/v1/nodes/{quote(name)}/status", body=patch, content_type=STRATEGIC)

    # Pods

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        query = [("fieldSelector", f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed")]
        return list(self.request("GET", "/api/v1/pods", query).get("items", []))

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get(f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}")

    def pods_labelled(self, selector: str) -> Iterator[dict[str, Any]]:
        """Every pod with the label, a page at a time (teams create pods): may raise ListExpired part-way."""
        return self.items("/api/v1/pods", [("labelSelector", selector)])

    def evict(self, pod: dict[str, Any], grace_s: int) -> bool:
        """Ask the Eviction API; False when a PodDisruptionBudget refuses it now (HTTP 429)."""
        meta = pod["metadata"]
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "deleteOptions": {"gracePeriodSeconds": grace_s},
        }
        try:
            self.request("POST", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/eviction", body=body)
        except ApiError as error:
            if error.status == 429:
                return False
            if error.status == 404:
                return True  # already gone
            raise
        return True

    # Events, Jobs, Leases

    def events(self, field_selector: str) -> Iterator[dict[str, Any]]:
        """Every Event the selector matches, a page at a time (teams create Events): may raise ListExpired part-way."""
        return self.items("/api/v1/events", [("fieldSelector", field_selector)])

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body=body)

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def delete(self, path: str) -> None:
        try:
            self.request("DELETE", path, [("propagationPolicy", "Background")])
        except ApiError as error:
            if error.status != 404:
                raise

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PUT", path, body=body)
