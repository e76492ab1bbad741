"""A run's torchft Lighthouse in its home cluster, and what ties each region's RayJob to it (pure).

The Lighthouse is one small CPU Deployment (the fleet trainer image's `torchft_lighthouse`) behind
a Service of type LoadBalancer that GKE makes an internal passthrough Network Load Balancer with
global access, so the other regions' clusters reach it over the VPC and nothing outside it does
(GKE docs, "LoadBalancer Service parameters" and "Internal passthrough Network Load Balancer:
global access", https://cloud.google.com/kubernetes-engine/docs/concepts/service-load-balancer-parameters).
`loadBalancerSourceRanges` admits only the pod ranges of the run's regions; GKE turns it into the
load balancer's firewall rule. The load balancer's IP is known only once the Service exists:
submit waits for it, then writes the address into every RayJob (a dry run shows PLACEHOLDER).

Those pod ranges are every team's, so the range is not the guard: the Lighthouse listens on its
pod's loopback only, and the Service port belongs to a sidecar (`python -m trainer.distributed.mtls`) that
admits a TLS client only with the run's certificate (gkr/run_tls.py mints it at submit; each
region's pods mount theirs and the trainer reaches the Lighthouse through its own TLS proxy).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from contract import names
from gkr import run_tls
from gkr.resolved import Resolved

PLACEHOLDER_HOST = "<lighthouse-ip: known once the Service has its internal load balancer>"
# gkr's own annotations on each region's RayJob: the run's regions and its home, so that status,
# logs and delete find every part of the run from any one of them.
REGIONS_ANNOTATION = "meridian.dev/run-regions"
HOME_ANNOTATION = "meridian.dev/run-home"
# The Lighthouse holds only quorum state: a small, fixed share of one CPU node; its TLS proxy less.
CPU, MEMORY = "1", "1Gi"
PROXY_CPU, PROXY_MEMORY = "250m", "256Mi"
NOBODY = 65534  # a non-root user for the Lighthouse (the image's default user may be root)


def name(run: str) -> str:
    return f"{run}-lighthouse"


def address(host: str) -> str:
    """What torchft reads from LIGHTHOUSE_ENV."""
    return f"http://{host}:{names.LIGHTHOUSE_PORT}"


def _labels(home: Resolved, run: str) -> dict[str, str]:
    return {
        names.TEAM_LABEL: home.team.name,
        names.JOB_LABEL: name(run),
        names.RUN_LABEL: run,
        names.REGION_LABEL: home.region.name,
    }


HARDENED = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def objects(home: Resolved, run: str, min_replicas: int, source_ranges: list[str]) -> list[dict[str, Any]]:
    """The Lighthouse's TLS Secret (PLACEHOLDER data), Deployment and internal load balancer Service, in the home
    region's team namespace."""
    labels = _labels(home, run)
    return [
        run_tls.secret(run, "lighthouse", home.namespace, labels),
        _deployment(home, run, min_replicas),
        _service(home, run, source_ranges),
    ]


def _containers_of(home: Resolved, min_replicas: int) -> list[dict[str, Any]]:
    """The Lighthouse on the pod's loopback, and the TLS proxy that alone takes the Service's port."""
    lighthouse = {
        "name": "lighthouse",
        "image": home.registry.trainer_image,
        "command": [
            "torchft_lighthouse",
            "--min_replicas",
            str(min_replicas),
            "--bind",
            f"127.0.0.1:{names.LIGHTHOUSE_INNER_PORT}",  # the pod's loopback: only the TLS proxy reaches it
        ],
        "resources": {"requests": {"cpu": CPU, "memory": MEMORY}, "limits": {"cpu": CPU, "memory": MEMORY}},
        "securityContext": copy.deepcopy(HARDENED),
    }
    proxy = {
        "name": "mtls",
        "image": home.registry.trainer_image,
        "command": [
            "python",
            "-m",
            "trainer.distributed.mtls",
            "--listen-host",  # the pod's IP only (the Service and the probe reach it there): no other interface
            f"$({names.POD_IP_ENV})",
            "--listen-port",
            str(names.LIGHTHOUSE_PORT),
            "--upstream",
            f"127.0.0.1:{names.LIGHTHOUSE_INNER_PORT}",
            "--identity",
            names.RUN_TLS_DIR,
        ],
        "env": [{"name": names.POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "lighthouse", "containerPort": names.LIGHTHOUSE_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": "lighthouse"}, "periodSeconds": 5},
        "resources": {
            "requests": {"cpu": PROXY_CPU, "memory": PROXY_MEMORY},
            "limits": {"cpu": PROXY_CPU, "memory": PROXY_MEMORY},
        },
        "securityContext": copy.deepcopy(HARDENED),
        "volumeMounts": [dict(run_tls.MOUNT)],
    }
    return [lighthouse, proxy]


def _deployment(home: Resolved, run: str, min_replicas: int) -> dict[str, Any]:
    # Kueue's pod integration admits each Lighthouse pod through the team's queue (the team admission
    # policy requires the label on Deployments and on their pods; Kueue docs, "Run a Deployment").
    queued = {**_labels(home, run), names.QUEUE_LABEL: home.queue, names.PRIORITY_LABEL: home.priority}
    cpu_pool = home.cpu_pool.name if home.cpu_pool is not None else ""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name(run), "namespace": home.namespace, "labels": queued},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # never two Lighthouses for one run, even during a rollout
            "selector": {"matchLabels": {names.JOB_LABEL: name(run)}},
            "template": {
                "metadata": {"labels": dict(queued)},
                "spec": {
                    "automountServiceAccountToken": False,  # it talks to no API
                    "nodeSelector": {names.NODE_POOL_LABEL: cpu_pool},
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": NOBODY,
                        "runAsGroup": NOBODY,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": _containers_of(home, min_replicas),
                    "volumes": [run_tls.volume(run, "lighthouse")],
                },
            },
        },
    }


def _service(home: Resolved, run: str, source_ranges: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name(run),
            "namespace": home.namespace,
            "labels": _labels(home, run),
            "annotations": {names.INTERNAL_LB_ANNOTATION: "Internal", names.GLOBAL_ACCESS_ANNOTATION: "true"},
        },
        "spec": {
            "type": "LoadBalancer",
            # The client's address reaches the pod unchanged (no second hop through another node's SNAT):
            # the team namespace's `run-across-regions` NetworkPolicy admits the other regions' pod ranges
            # by ipBlock (GKE docs, LoadBalancer Service concepts, "Effect of externalTrafficPolicy").
            "externalTrafficPolicy": "Local",
            "selector": {names.JOB_LABEL: name(run)},
            "ports": [
                {"name": "lighthouse", "port": names.LIGHTHOUSE_PORT, "targetPort": "lighthouse", "protocol": "TCP"}
            ],
            "loadBalancerSourceRanges": list(source_ranges),
        },
    }


def ingress_ip(service: dict[str, Any]) -> str | None:
    """The load balancer's IP from a Service as the API returns it, or None while GKE provisions it."""
    ingress = (service.get("status") or {}).get("loadBalancer", {}).get("ingress") or []
    first = ingress[0] if ingress and isinstance(ingress[0], dict) else {}
    ip = first.get("ip")
    return str(ip) if ip else None


def _containers(rayjob: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The main containers of a RayJob's head and workers (init containers run preflight only)."""
    cluster = rayjob["spec"]["rayClusterSpec"]
    for template in [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]:
        yield from template["spec"]["containers"]


def _templates(rayjob: dict[str, Any]) -> Iterator[dict[str, Any]]:
    cluster = rayjob["spec"]["rayClusterSpec"]
    yield cluster["headGroupSpec"]["template"]
    yield from (g["template"] for g in cluster["workerGroupSpecs"])


def join(
    rayjob: dict[str, Any], run: str, region: str, regions: list[str], home: str, host: str, resume_from: list[str]
) -> dict[str, Any]:
    """A region's RayJob as part of the run: labels, the run's annotations, environment and member TLS identity."""
    out = copy.deepcopy(rayjob)
    run_labels = {names.RUN_LABEL: run, names.REGION_LABEL: region}
    meta = out["metadata"]
    meta["labels"] = {**meta["labels"], **run_labels}
    run_annotations = {REGIONS_ANNOTATION: ",".join(regions), HOME_ANNOTATION: home}
    meta["annotations"] = {**meta.get("annotations", {}), **run_annotations}
    env = [
        {"name": names.RUN_ID_ENV, "value": run},
        {"name": names.REGION_ENV, "value": region},
        {"name": names.LIGHTHOUSE_ENV, "value": address(host)},
        {"name": names.RESUME_FROM_ENV, "value": ",".join(resume_from)},
        {"name": names.RUN_TLS_ENV, "value": names.RUN_TLS_DIR},
    ]
    for template in _templates(out):  # pods carry them too: `gkr logs` finds the run from any of its pods
        template["metadata"]["labels"] = {**template["metadata"]["labels"], **run_labels}
        template["metadata"]["annotations"] = {**template["metadata"].get("annotations", {}), **run_annotations}
        spec = template["spec"]
        spec["volumes"] = [*spec.get("volumes", []), run_tls.volume(run, "member")]
    for container in _containers(out):
        container["env"] = [*container["env"], *copy.deepcopy(env)]
        container["volumeMounts"] = [*container.get("volumeMounts", []), dict(run_tls.MOUNT)]
    return out


def with_host(rayjob: dict[str, Any], host: str) -> dict[str, Any]:
    """The RayJob with the Lighthouse's real address in place of the placeholder."""
    out = copy.deepcopy(rayjob)
    for container in _containers(out):
        for entry in container["env"]:
            if entry["name"] == names.LIGHTHOUSE_ENV:
                entry["value"] = address(host)
    return out


def run_of(obj: dict[str, Any]) -> tuple[str, list[str], str] | None:
    """(run id, its regions, its home) from a RayJob gkr submitted as part of a run, or None."""
    meta = obj.get("metadata") or {}
    run = (meta.get("labels") or {}).get(names.RUN_LABEL)
    annotations = meta.get("annotations") or {}
    regions = [r for r in str(annotations.get(REGIONS_ANNOTATION, "")).split(",") if r]
    home = str(annotations.get(HOME_ANNOTATION, ""))
    if not run or not regions or home not in regions:
        return None
    return str(run), regions, home
