"""One head or worker Pod as KubeRay v1.7.0 builds it from its group's template (pure).

Read from ray-operator/controllers/ray/common/pod.go at 59d663aeec13760646da3db9c1cf8cfe883e30b7:
DefaultHeadPodTemplate and DefaultWorkerPodTemplate (labels, the worker's wait-gcs-ready init
container, the metrics port), then BuildPod (/dev/shm, the container command, setInitContainerEnvVars,
setContainerEnvVars, initLivenessAndReadinessProbe); raycluster_controller.go buildHeadPod,
buildWorkerPod and createHeadPod for the names and annotations. The operator runs with the Helm
chart's defaults (helm-chart/kuberay-operator/values.yaml at the same commit, which is what the fleet
installs): no extra env (init container and probe injection on, no login shell, cluster domain
cluster.local), feature gates at their defaults (RayMultiHostIndexing on).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from contract import names
from twin.golang import check_label, suffix, version_at_least
from twin.kuberay import start

# utils/constant.go
CLUSTER_LABEL, NODE_TYPE_LABEL, GROUP_LABEL = "ray.io/cluster", names.RAY_NODE_TYPE_LABEL, "ray.io/group"
HEAD_GROUP = "headgroup"  # RayNodeHeadGroupLabelValue
REPLICA_INDEX_LABEL = "ray.io/worker-group-replica-index"
OVERWRITE_CMD = "ray.io/overwrite-container-cmd"
KUBERAY_VERSION = "v1.7.0"
SHM_VOLUME, SHM_PATH = "shared-mem", "/dev/shm"
_BASH = ["/bin/bash", "-c", "--"]  # utils.GetContainerCommand([]) without ENABLE_LOGIN_SHELL
_ULIMIT = "ulimit -n ${RAY_START_ULIMIT_OPEN_FILES:-65536}"
_WGET = "wget --tries 1 -T {timeout} -q -O- http://localhost:{port}/{path} | grep success"  # BaseWgetHealthCommand


@dataclass(frozen=True)
class Cluster:
    """What every pod of one RayCluster shares."""

    name: str
    namespace: str
    creator: str  # the ray.io/originated-from-crd label: RayCluster or RayJob
    fqdn: str  # the head service's name in DNS, FQ_RAY_IP
    gcs_port: str  # GetHeadPort
    ray_version: str  # spec.rayVersion, which picks the probes
    overwrite_cmd: bool  # the RayCluster's ray.io/overwrite-container-cmd annotation


def pod_name(prefix: str, node_type: str) -> str:
    """utils.PodName for generateName: the prefix clipped to 50 characters, `-head-` or `-worker-`, lowercased."""
    return f"{prefix[:50]}-{node_type}-".lower()


def head_pod(cluster: Cluster, group: dict[str, Any], params: dict[str, str]) -> dict[str, Any]:
    """The head Pod (DefaultHeadPodTemplate, BuildPod, createHeadPod)."""
    meta, spec = _template(group)
    generate = pod_name(cluster.name, start.HEAD)
    start.apply_group_resources(params, group.get("resources") or {})
    start.apply_group_labels(params, group.get("labels") or {})
    meta["labels"] = _labels(start.HEAD, cluster.name, HEAD_GROUP, meta, group)
    params = start.complete(params, start.HEAD, cluster.gcs_port, cluster.fqdn)
    annotations = meta.setdefault("annotations", {})
    if cluster.overwrite_cmd:
        annotations[OVERWRITE_CMD] = "true"
    annotations["ray.io/ft-enabled"] = "false"  # configureGCSFaultTolerance; GCS FT is refused earlier
    _metrics_port(spec["containers"][0])
    pod = _build(cluster, start.HEAD, meta, spec, params, generate)
    # createHeadPod also writes ray.io/upgrade-strategy-recreate-hash, a hash of the spec's Go JSON: not reproduced.
    pod["metadata"]["annotations"]["ray.io/kuberay-version"] = KUBERAY_VERSION
    return pod


def worker_pod(cluster: Cluster, group: dict[str, Any], params: dict[str, str], index: int) -> dict[str, Any]:
    """Replica `index` of a worker group (DefaultWorkerPodTemplate, BuildPod)."""
    meta, spec = _template(group)
    name = group["groupName"]
    generate = pod_name(f"{cluster.name}-{name}", start.WORKER)
    ray = spec["containers"][0]
    spec.setdefault("initContainers", []).append(_wait_gcs_ready(ray, cluster.fqdn, cluster.gcs_port))
    meta.pop("name", None)
    start.apply_group_resources(params, group.get("resources") or {})
    start.apply_group_labels(params, group.get("labels") or {})
    meta["labels"] = _labels(start.WORKER, cluster.name, name, meta, group)
    meta["labels"][REPLICA_INDEX_LABEL] = str(index)  # RayMultiHostIndexing, on by default
    params = start.complete(params, start.WORKER, cluster.gcs_port, cluster.fqdn)
    if cluster.overwrite_cmd:
        meta.setdefault("annotations", {})[OVERWRITE_CMD] = "true"
    _metrics_port(ray)
    return _build(cluster, start.WORKER, meta, spec, params, generate, str(index))


def _template(group: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    template = copy.deepcopy(group["template"])
    return template.get("metadata") or {}, template["spec"]


def _labels(
    node_type: str, cluster: str, group_name: str, meta: dict[str, Any], group: dict[str, Any]
) -> dict[str, str]:
    """labelPod over mergeLabels: KubeRay's labels, then the template's and the group's `labels` over them,
    except that ray.io/node-type, ray.io/group and ray.io/cluster cannot be overridden."""
    labels = {
        "ray.io/is-ray-node": "yes",
        CLUSTER_LABEL: cluster,
        NODE_TYPE_LABEL: node_type,
        GROUP_LABEL: group_name,
        "ray.io/identifier": check_label(f"{cluster}-{node_type}"),
        "app.kubernetes.io/name": "kuberay",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    merged = {**(meta.get("labels") or {}), **(group.get("labels") or {})}
    for key, value in merged.items():
        if key not in (NODE_TYPE_LABEL, GROUP_LABEL, CLUSTER_LABEL):
            labels[key] = value
    return labels


def _metrics_port(container: dict[str, Any]) -> None:
    """A `metrics` containerPort 8080 unless the Ray container names one (for Prometheus)."""
    ports = container.setdefault("ports", [])
    if not any(p.get("name") == "metrics" for p in ports):
        ports.append({"name": "metrics", "containerPort": start.DEFAULT_METRICS_PORT})


def _wait_gcs_ready(ray: dict[str, Any], fqdn: str, port: str) -> dict[str, Any]:
    """The init container KubeRay appends to every worker: `ray health-check` on the head's GCS until it answers.

    Image, pull policy, security context, env and volume mounts are the Ray container's as the
    template wrote them (before KubeRay's own env); resources are fixed at 200m / 256Mi.
    """
    # The script as the operator's Go source lays it out: its lines indented with tabs.
    lines = [
        (5, "SECONDS=0"),
        (5, "while true; do"),
        (6, "if (( SECONDS <= 120 )); then"),
        (7, f"if ray health-check --address {fqdn}:{port} > /dev/null 2>&1; then"),
        (8, 'echo "GCS is ready."'),
        (8, "break"),
        (7, "fi"),
        (7, 'echo "$SECONDS seconds elapsed: Waiting for GCS to be ready."'),
        (6, "else"),
        (7, f"if ray health-check --address {fqdn}:{port}; then"),
        (8, 'echo "GCS is ready. Any error messages above can be safely ignored."'),
        (8, "break"),
        (7, "fi"),
        (
            7,
            'echo "$SECONDS seconds elapsed: Still waiting for GCS to be ready. For troubleshooting, refer to '
            'the FAQ at https://docs.ray.io/en/master/cluster/kubernetes/troubleshooting.html."',
        ),
        (6, "fi"),
        (6, "sleep 5"),
        (5, "done"),
    ]
    script = "\n" + "".join("\t" * depth + text + "\n" for depth, text in lines) + "\t" * 4
    fixed = {"cpu": "200m", "memory": "256Mi"}
    init: dict[str, Any] = {"name": "wait-gcs-ready"}
    init.update({key: ray[key] for key in ("image", "imagePullPolicy") if ray.get(key)})
    init.update(command=list(_BASH), args=[script])
    for key in ("securityContext", "env", "volumeMounts"):
        if ray.get(key):
            init[key] = copy.deepcopy(ray[key])
    init["resources"] = {"limits": dict(fixed), "requests": dict(fixed)}
    return init


def _build(
    cluster: Cluster,
    node_type: str,
    meta: dict[str, Any],
    spec: dict[str, Any],
    params: dict[str, str],
    generate: str,
    seed: str = "",
) -> dict[str, Any]:
    """BuildPod: /dev/shm, the `ray start` command, env vars, probes; then the name the API server gives."""
    ray = spec["containers"][0]
    if "plasma-directory" not in params:
        _shared_memory(ray, spec)
    command = start.ray_start(node_type, params, ray.get("resources") or {})
    annotations = meta.get("annotations") or {}
    overwrite = str(annotations.get(OVERWRITE_CMD, "")).lower() == "true"
    written = "".join(f" {part} " for part in (ray.get("command") or []) + (ray.get("args") or []))
    if not overwrite and "ray start" not in written:
        generated = f"{_ULIMIT}; {command}"
        ray["command"] = list(_BASH)
        # A template's own command runs first: `ray start --block` never returns.
        ray["args"] = [f"{written} && {generated}" if written else generated]
    for init in spec.get("initContainers") or []:
        init.setdefault("env", []).extend(_ray_ip(cluster.fqdn))
    _env(ray, node_type, cluster, command)
    _probes(ray, node_type, params, cluster.ray_version)
    meta = dict(meta, generateName=generate, namespace=cluster.namespace)
    # The API server fills the name from generateName; a head template's own metadata.name wins over it.
    meta["name"] = meta.get("name") or generate + suffix(f"{cluster.namespace}/{generate}{seed}")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _shared_memory(ray: dict[str, Any], spec: dict[str, Any]) -> None:
    """addEmptyDir for /dev/shm: a memory-backed emptyDir sized by the container's memory limit, else request.

    Skipped when the Ray container already mounts something at /dev/shm (gkr's templates do).
    """
    mounts = ray.setdefault("volumeMounts", [])
    if any(m.get("mountPath") == SHM_PATH for m in mounts):
        return
    volumes = spec.setdefault("volumes", [])
    if not any(v.get("name") == SHM_VOLUME for v in volumes):
        resources = ray.get("resources") or {}
        size = (resources.get("limits") or {}).get("memory", (resources.get("requests") or {}).get("memory"))
        empty_dir: dict[str, Any] = {"medium": "Memory"}
        if size is not None:
            empty_dir["sizeLimit"] = str(size)
        volumes.append({"name": SHM_VOLUME, "emptyDir": empty_dir})
    mounts.append({"mountPath": SHM_PATH, "name": SHM_VOLUME})


def _ray_ip(fqdn: str) -> list[dict[str, Any]]:
    """FQ_RAY_IP and the deprecated RAY_IP (the FQDN's first label), for init and worker containers."""
    return [{"name": "FQ_RAY_IP", "value": fqdn}, {"name": "RAY_IP", "value": fqdn.split(".", maxsplit=1)[0]}]


def _field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _env(ray: dict[str, Any], node_type: str, cluster: Cluster, command: str) -> None:
    """setContainerEnvVars, in the operator's order (later `$(VAR)` references depend on it)."""
    env = ray.setdefault("env", [])

    def absent(name: str) -> bool:
        return all(e.get("name") != name for e in env)

    if node_type == start.WORKER:
        env.extend(_ray_ip(cluster.fqdn))
    env.append(_field("RAY_CLUSTER_NAME", f"metadata.labels['{CLUSTER_LABEL}']"))
    env.append(_field("RAY_CLUSTER_NAMESPACE", "metadata.namespace"))
    env.append(_field("RAY_CLOUD_INSTANCE_ID", "metadata.name"))
    env.append(_field("RAY_NODE_TYPE_NAME", f"metadata.labels['{GROUP_LABEL}']"))
    env.append({"name": "KUBERAY_GEN_RAY_START_CMD", "value": command})
    if absent("RAY_PORT"):
        env.append({"name": "RAY_PORT", "value": cluster.gcs_port})
    if absent("RAY_ADDRESS"):
        host = "127.0.0.1" if node_type == start.HEAD else cluster.fqdn
        env.append({"name": "RAY_ADDRESS", "value": f"{host}:{cluster.gcs_port}"})
    if absent("RAY_USAGE_STATS_KUBERAY_IN_USE"):
        env.append({"name": "RAY_USAGE_STATS_KUBERAY_IN_USE", "value": "1"})
    if node_type == start.HEAD:
        tags = f"kuberay_version={KUBERAY_VERSION};kuberay_crd={cluster.creator}"
        env.append({"name": "RAY_USAGE_STATS_EXTRA_TAGS", "value": tags})
    if absent("RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE"):
        env.append({"name": "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "value": "1"})


def _port(params: dict[str, str], key: str, default: int) -> int:
    """initLivenessAndReadinessProbe's getPort: the rayStartParams value when it is a base-10 int32."""
    text = params.get(key, "")
    digits = text[1:] if text[:1] in "+-" else text
    if digits.isascii() and digits.isdigit() and -(2**31) <= int(text) < 2**31:
        return int(text)
    return default


def _probes(ray: dict[str, Any], node_type: str, params: dict[str, str], ray_version: str) -> None:
    """initLivenessAndReadinessProbe: KubeRay's probes where the template has none.

    Ray 2.53.0 and later (spec.rayVersion) get an HTTP GET of /api/healthz on the dashboard agent;
    older or unset versions an exec probe: wget of the raylet's health (and, on the head, the GCS's)
    through the dashboard agent and dashboard.
    """
    agent = _port(params, "dashboard-agent-listen-port", start.DEFAULT_AGENT_PORT)
    checks = [_WGET.format(timeout=2, port=agent, path="api/local_raylet_healthz")]
    if node_type == start.HEAD:
        # The operator passes DefaultReadinessProbeFailureThreshold (10) as this wget's timeout.
        dashboard = _port(params, "dashboard-port", start.DEFAULT_DASHBOARD_PORT)
        checks.append(_WGET.format(timeout=10, port=dashboard, path="api/gcs_healthz"))
    if version_at_least(ray_version, (2, 53, 0)):
        action: dict[str, Any] = {"httpGet": {"path": "/api/healthz", "port": agent}}
    else:
        action = {"exec": {"command": ["bash", "-c", " && ".join(checks)]}}
    timeout = 5 if node_type == start.HEAD else 2
    if ray.get("livenessProbe") is None:
        timing = {"initialDelaySeconds": 30, "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 120}
        ray["livenessProbe"] = {**copy.deepcopy(action), **timing, "timeoutSeconds": timeout}
    if ray.get("readinessProbe") is None:
        timing = {"initialDelaySeconds": 10, "periodSeconds": 5, "successThreshold": 1, "failureThreshold": 10}
        ray["readinessProbe"] = {**copy.deepcopy(action), **timing, "timeoutSeconds": timeout}
