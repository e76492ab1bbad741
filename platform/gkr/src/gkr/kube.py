"""The few Kubernetes API calls gkr makes, through the official Python client (imported lazily: it is slow to load).

Objects are applied with server-side apply (field manager `gkr`), so a
resubmission updates what gkr owns and leaves fields controllers own alone.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, cast

from contract import names

FIELD_MANAGER = "gkr"
APPLY = "application/apply-patch+yaml"
# apiVersion, kind -> group, version, plural
RESOURCES = {
    ("ray.io/v1", "RayJob"): ("ray.io", "v1", "rayjobs"),
    ("ray.io/v1", "RayCluster"): ("ray.io", "v1", "rayclusters"),
    ("batch/v1", "Job"): ("batch", "v1", "jobs"),
}
KINDS = {
    "rayjob": ("ray.io", "v1", "rayjobs"),
    "raycluster": ("ray.io", "v1", "rayclusters"),
    "job": ("batch", "v1", "jobs"),
}


class NoContext(Exception):
    """The kubeconfig lacks what gkr needs to reach a cluster; the message says which part."""


def kubeconfig_path() -> str:
    # Read $KUBECONFIG now: the client reads it once, when it is imported. Like kubectl, the first
    # of several paths is where `gcloud container clusters get-credentials` writes.
    return (os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")).split(os.pathsep)[0]


def contexts() -> tuple[list[str], str | None]:
    """The kubeconfig's context names and its current context; NoContext when there is no kubeconfig."""
    import yaml

    path = kubeconfig_path()
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise NoContext(f"no kubeconfig at {path}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise NoContext(f"cannot read the kubeconfig {path} ({str(exc).splitlines()[0]})") from None
    data = data if isinstance(data, dict) else {}
    found = [str(c["name"]) for c in data.get("contexts") or [] if isinstance(c, dict) and "name" in c]
    current = data.get("current-context")
    return found, str(current) if current else None


def check_context(context: str) -> None:
    """Raise NoContext when there is no kubeconfig, or it has no context of that name (no network, no client)."""
    if context not in contexts()[0]:
        raise NoContext(f"no context {context} in {kubeconfig_path()}")


def unreachable(exc: BaseException) -> str:
    """Why a cluster did not answer, in a few words: no context, connection refused, unauthorized, timeout..."""
    if isinstance(exc, NoContext):
        return "no context" if "no context" in str(exc) else "no kubeconfig"
    status = getattr(exc, "status", None)
    if status in (401, 403):
        return "unauthorized" if status == 401 else "forbidden"
    if isinstance(status, int) and status >= 400:
        return f"HTTP {status}"
    text, seen = "", exc
    for _ in range(6):  # urllib3 wraps the socket error in MaxRetryError(NewConnectionError(...))
        text += f" {type(seen).__name__} {seen}"
        nxt = getattr(seen, "reason", None) or seen.__cause__ or seen.__context__
        if not isinstance(nxt, BaseException):
            break
        seen = nxt
    lowered = text.lower()
    if "timeout" in lowered or "timed out" in lowered:
        return "timeout"
    if "refused" in lowered:
        return "connection refused"
    if "name or service not known" in lowered or "nodename nor servname" in lowered or "resolution" in lowered:
        return "DNS lookup failed"
    return f"error ({type(exc).__name__})"


def client(context: str | None = None, host: str | None = None, token: str | None = None) -> Any:
    """An ApiClient for a kubeconfig context, or for an explicit host (tests, proxies)."""
    from kubernetes import client as k8s
    from kubernetes import config

    if host is not None:
        configuration = k8s.Configuration(host=host)
        if token:
            configuration.api_key = {"BearerToken": token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return k8s.ApiClient(configuration)
    if context is not None:
        check_context(context)
    return config.new_client_from_config(config_file=kubeconfig_path(), context=context)  # type: ignore[no-untyped-call]


def apply(api: Any, obj: dict[str, Any]) -> dict[str, Any]:
    from kubernetes import client as k8s

    meta = obj["metadata"]
    apply_args: dict[str, Any] = {"field_manager": FIELD_MANAGER, "force": True, "_content_type": APPLY}
    if (obj["apiVersion"], obj["kind"]) == ("v1", "Service"):
        k8s.CoreV1Api(api).patch_namespaced_service(meta["name"], meta["namespace"], obj, **apply_args)
        return obj
    if (obj["apiVersion"], obj["kind"]) == ("v1", "Secret"):  # a run's TLS identity (gkr/run_tls.py)
        k8s.CoreV1Api(api).patch_namespaced_secret(meta["name"], meta["namespace"], obj, **apply_args)
        return obj
    if (obj["apiVersion"], obj["kind"]) == ("apps/v1", "Deployment"):
        k8s.AppsV1Api(api).patch_namespaced_deployment(meta["name"], meta["namespace"], obj, **apply_args)
        return obj
    group, version, plural = RESOURCES[(obj["apiVersion"], obj["kind"])]
    custom = k8s.CustomObjectsApi(api)
    return cast(
        dict[str, Any],
        custom.patch_namespaced_custom_object(
            group, version, meta["namespace"], plural, meta["name"], obj, **apply_args
        ),
    )


def list_jobs(api: Any, namespace: str, kind: str, selector: str) -> list[dict[str, Any]]:
    from kubernetes import client as k8s

    group, version, plural = KINDS[kind]
    found = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
        group, version, namespace, plural, label_selector=selector
    )
    return list(cast(dict[str, Any], found).get("items", []))


def get_job(api: Any, namespace: str, kind: str, name: str) -> dict[str, Any]:
    from kubernetes import client as k8s

    group, version, plural = KINDS[kind]
    return cast(
        dict[str, Any], k8s.CustomObjectsApi(api).get_namespaced_custom_object(group, version, namespace, plural, name)
    )


def delete_job(api: Any, namespace: str, kind: str, name: str) -> None:
    from kubernetes import client as k8s

    group, version, plural = KINDS[kind]
    body = k8s.V1DeleteOptions(propagation_policy="Foreground")  # the pods and the Ray cluster go with it
    k8s.CustomObjectsApi(api).delete_namespaced_custom_object(group, version, namespace, plural, name, body=body)
    if kind == "job":
        k8s.CoreV1Api(api).delete_namespaced_service(name, namespace)


def read_service(api: Any, namespace: str, name: str) -> dict[str, Any]:
    """A Service as the API sends it (status.loadBalancer included), not as the client models it."""
    import json

    from kubernetes import client as k8s

    found: Any = k8s.CoreV1Api(api).read_namespaced_service(name, namespace, _preload_content=False)
    body = json.loads(found.data)
    return body if isinstance(body, dict) else {}


def delete_object(api: Any, obj: dict[str, Any]) -> bool:
    """Delete one object gkr applied (a RayJob, the Lighthouse's Deployment or Service); False if it was not there."""
    from kubernetes import client as k8s

    meta, kind = obj["metadata"], obj["kind"]
    body = k8s.V1DeleteOptions(propagation_policy="Foreground")
    raw: dict[str, Any] = {"body": body, "_preload_content": False}  # the answer is not needed, nor its model
    try:
        if kind == "Service":
            k8s.CoreV1Api(api).delete_namespaced_service(meta["name"], meta["namespace"], **raw)
        elif kind == "Secret":
            k8s.CoreV1Api(api).delete_namespaced_secret(meta["name"], meta["namespace"], **raw)
        elif kind == "Deployment":
            k8s.AppsV1Api(api).delete_namespaced_deployment(meta["name"], meta["namespace"], **raw)
        else:
            group, version, plural = RESOURCES[(obj["apiVersion"], kind)]
            k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
                group, version, meta["namespace"], plural, meta["name"], **raw
            )
    except Exception as exc:
        if getattr(exc, "status", None) == 404:
            return False
        raise
    return True


def list_run(api: Any, namespace: str, run: str, lighthouse: bool) -> list[dict[str, Any]]:
    """A run's objects in one cluster: its RayJob and TLS Secrets, and in the home cluster the Lighthouse's Deployment and
    Service."""
    import json

    from kubernetes import client as k8s

    selector = f"{names.RUN_LABEL}={run}"
    found = list_jobs(api, namespace, "rayjob", selector)
    for item in found:
        item.setdefault("apiVersion", "ray.io/v1")
        item.setdefault("kind", "RayJob")
    # The run's TLS Secrets (gkr/run_tls.py): the members' in every region, the Lighthouse's in the home one.
    calls: tuple[tuple[str, str, Callable[..., Any]], ...] = (
        ("v1", "Secret", k8s.CoreV1Api(api).list_namespaced_secret),
    )
    if lighthouse:
        calls += (
            ("apps/v1", "Deployment", k8s.AppsV1Api(api).list_namespaced_deployment),
            ("v1", "Service", k8s.CoreV1Api(api).list_namespaced_service),
        )
    for api_version, kind, call in calls:
        body = json.loads(call(namespace, label_selector=selector, _preload_content=False).data)
        for item in body.get("items", []) if isinstance(body, dict) else []:
            found.append({**item, "apiVersion": api_version, "kind": kind})
    return found


ROLE_SELECTORS = {
    "head": f",{names.RAY_NODE_TYPE_LABEL}=head",
    "worker": f",{names.RAY_NODE_TYPE_LABEL}=worker",
    "all": "",
}


def pods(api: Any, namespace: str, job: str, role: str) -> list[str]:
    return sorted(pod_metadata(api, namespace, job, role))


def pod_metadata(api: Any, namespace: str, job: str, role: str) -> dict[str, dict[str, Any]]:
    """pod name -> {labels, annotations} of a job's pods in one role."""
    from kubernetes import client as k8s

    selector = f"{names.JOB_LABEL}={job}{ROLE_SELECTORS[role]}"
    found = k8s.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    return {
        str(p.metadata.name): {"labels": p.metadata.labels or {}, "annotations": p.metadata.annotations or {}}
        for p in found
        if p.metadata is not None and p.metadata.name
    }


def log(api: Any, namespace: str, pod: str, follow: bool) -> Any:
    from kubernetes import client as k8s

    return k8s.CoreV1Api(api).read_namespaced_pod_log(pod, namespace, follow=follow, _preload_content=not follow)


def cluster_queues(api: Any, timeout: float | None = None) -> list[dict[str, Any]]:
    from kubernetes import client as k8s

    found = k8s.CustomObjectsApi(api).list_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "clusterqueues", _request_timeout=timeout
    )
    return list(cast(dict[str, Any], found).get("items", []))


def cluster_queues_or_why(context: str, timeout: float) -> tuple[list[dict[str, Any]] | None, str]:
    """The cluster's ClusterQueues, or None and why it did not answer (one region down must not hide the others)."""
    try:
        return cluster_queues(client(context), timeout), ""
    except Exception as exc:
        return None, unreachable(exc)


def follow_logs(api: Any, namespace: str, pods: list[str], write: Callable[[str, str], None]) -> None:
    """Stream every pod's log at once; `write(pod, line)` for each complete line, one at a time."""
    lock = threading.Lock()

    def pump(pod: str) -> None:
        pending = b""
        for chunk in log(api, namespace, pod, True).stream():
            *complete, pending = (pending + chunk).split(b"\n")
            with lock:
                for line in complete:
                    write(pod, line.decode(errors="replace"))
        if pending:
            with lock:
                write(pod, pending.decode(errors="replace"))

    threads = [threading.Thread(target=pump, args=(pod,), daemon=True) for pod in pods]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def read_configmap(api: Any, namespace: str, name: str) -> tuple[dict[str, str], dict[str, str]]:
    """A ConfigMap's data and binaryData (base64 text, as the API sends it), read as sent, not as the client models it."""
    import json

    from kubernetes import client as k8s

    found: Any = k8s.CoreV1Api(api).read_namespaced_config_map(name, namespace, _preload_content=False)
    body = json.loads(found.data)
    body = body if isinstance(body, dict) else {}
    return _strings(body.get("data")), _strings(body.get("binaryData"))


def _strings(value: Any) -> dict[str, str]:
    return {str(k): v for k, v in value.items() if isinstance(v, str)} if isinstance(value, dict) else {}


DASHBOARD_PORT = 8265  # the Ray dashboard (and job submission API) on the head, KubeRay's `dashboard` port


class NotReady(Exception):
    """The object exists but has nothing to forward to yet."""


def head_service(api: Any, namespace: str, kind: str, name: str) -> str:
    """The head Service of a RayJob's or RayCluster's Ray cluster (KubeRay names it `<raycluster>-head-svc`)."""
    from kubernetes import client as k8s

    cluster = name
    if kind == "rayjob":
        cluster = str(get_job(api, namespace, kind, name).get("status", {}).get("rayClusterName") or "")
        if not cluster:
            raise NotReady(f"rayjob {name} has no Ray cluster yet (queued?); `gkr status {name}` says where it is")
    service = f"{cluster}-head-svc"
    found = k8s.CoreV1Api(api).read_namespaced_service(service, namespace)
    ports = [p.port for p in (found.spec.ports or [])] if found.spec is not None else []
    if DASHBOARD_PORT not in ports:
        raise NotReady(f"service {service} has no port {DASHBOARD_PORT} (ports {ports}); is the Ray dashboard on?")
    return service


def kubectl() -> str | None:
    """The project's kubectl (next to this Python, as the dev environment installs it), else the one on PATH."""
    import shutil
    import sys

    local = os.path.join(os.path.dirname(sys.executable), "kubectl")
    return local if os.access(local, os.X_OK) else shutil.which("kubectl")


def port_forward(kubectl_path: str, context: str, namespace: str, service: str, local_port: int) -> list[str]:
    """kubectl speaks the API server's port-forward protocol (SPDY/websocket) and reconnects; gkr builds its command."""
    return [
        kubectl_path,
        "--context",
        context,
        "--namespace",
        namespace,
        "port-forward",
        f"service/{service}",
        f"{local_port}:{DASHBOARD_PORT}",
    ]


PAGE_SIZE = 500  # list pages: a 5,000-node cluster answers in ten bounded replies, not one
MAX_ITEMS = 50_000  # and a list stops (and says so) past this many objects


class HttpError(Exception):
    """The API server answered with an error status (`status` is read by `unreachable`)."""

    def __init__(self, status: int, path: str) -> None:
        super().__init__(f"HTTP {status} from GET {path}")
        self.status = status


def get_json(api: Any, path: str, query: list[tuple[str, str]], timeout: float) -> dict[str, Any]:
    """GET a path as JSON (raw: the report reads a few fields of many objects); HttpError on an error status."""
    import json

    method, url, headers, body, _ = api.param_serialize(
        "GET", path, query_params=query, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, headers, body, _request_timeout=timeout)
    data = response.read()
    if not 200 <= response.status < 300:
        raise HttpError(response.status, path)
    try:
        found = json.loads(data)
    except (ValueError, RecursionError):
        raise HttpError(response.status, f"{path} (reply is not JSON)") from None
    return found if isinstance(found, dict) else {}


def list_pages(api: Any, path: str, query: list[tuple[str, str]], timeout: float) -> tuple[list[dict[str, Any]], bool]:
    """Every item of a list, PAGE_SIZE at a time (limit/continue); (items, True) when it stopped at MAX_ITEMS."""
    page, most = PAGE_SIZE, MAX_ITEMS
    items: list[dict[str, Any]] = []
    token: Any = ""
    while True:
        found = get_json(api, path, [*query, ("limit", str(page)), *([("continue", token)] if token else [])], timeout)
        batch = found.get("items")
        items.extend(i for i in (batch if isinstance(batch, list) else []) if isinstance(i, dict))
        meta = found.get("metadata")
        token = meta.get("continue") if isinstance(meta, dict) else None
        if not token or not isinstance(token, str):
            return items, False
        if len(items) >= most:
            return items, True
