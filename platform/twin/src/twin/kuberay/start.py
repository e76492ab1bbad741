"""The `ray start` command line KubeRay v1.7.0 writes into a head or worker container (pure).

Read from ray-operator/controllers/ray/common/pod.go at 59d663aeec13760646da3db9c1cf8cfe883e30b7
(tag v1.7.0): setMissingRayStartParams, generateRayStartCommand, addWellKnownAcceleratorResources,
getResourcesMap, convertParamMap, updateRayStartParamsResources, updateRayStartParamsLabels.
Every function takes the group's rayStartParams and returns or fills a new dict; the order of the
steps is the operator's (DefaultHeadPodTemplate / DefaultWorkerPodTemplate, then BuildPod).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from contract.quantity import QuantityError, approximate, ceil_value, parse
from twin.golang import json_encode

HEAD, WORKER = "head", "worker"  # rayv1.HeadNode, rayv1.WorkerNode
# utils/constant.go
DEFAULT_GCS_PORT = 6379
DEFAULT_METRICS_PORT = 8080
DEFAULT_DASHBOARD_PORT = 8265
DEFAULT_AGENT_PORT = 52365
DEFAULT_CLIENT_PORT = 10001
DEFAULT_SERVING_PORT = 8000
# pod.go: Kubernetes resource -> Ray resource for the first custom accelerator in the limits
_ACCELERATORS = {"aws.amazon.com/neuroncore": "neuron_cores", "google.com/tpu": "TPU"}
# convertParamMap: options whose "false" is passed on instead of dropped
_EXPLICIT_BOOLEANS = ("log-color", "include-dashboard", "include-log-monitor")


def head_port(head_params: Mapping[str, str]) -> str:
    """GetHeadPort: the GCS port workers dial, `port` in the head's rayStartParams or 6379."""
    return head_params.get("port", str(DEFAULT_GCS_PORT))


def is_gpu(resource: str) -> bool:
    """utils/resources.go IsGPUResourceKey."""
    return resource.endswith("gpu") or re.search(r"nvidia\.com/mig-\d+g\.\d+gb$", resource) is not None


def apply_group_resources(params: dict[str, str], resources: Mapping[str, str]) -> None:
    """updateRayStartParamsResources: the group's top-level `resources` written into rayStartParams.

    cpu, memory and GPU keys become num-cpus, memory and num-gpus (integer values, rounded up); any
    other becomes a Ray custom resource in `--resources='{...}'`. A quantity that does not parse is
    skipped, as the operator logs and skips it.
    """
    custom: dict[str, Any] = {}
    for name, text in resources.items():
        try:
            amount = parse(text)
        except QuantityError:
            continue
        lowered = name.lower()
        if lowered == "cpu":
            params["num-cpus"] = str(ceil_value(amount))
        elif lowered == "memory":
            params["memory"] = str(ceil_value(amount))
        elif is_gpu(lowered):
            params["num-gpus"] = str(ceil_value(amount))
        else:
            custom[name] = approximate(amount)
    if custom:
        params["resources"] = f"'{json_encode(custom)}'"


def apply_group_labels(params: dict[str, str], labels: Mapping[str, str]) -> None:
    """updateRayStartParamsLabels: the group's top-level `labels` as `--labels=k=v,...` (keys sorted)."""
    if labels:
        params["labels"] = ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def complete(params: Mapping[str, str], node_type: str, gcs_port: str, fqdn_ray_ip: str) -> dict[str, str]:
    """setMissingRayStartParams: what KubeRay adds to every group's rayStartParams.

    Workers get `address=<head service FQDN>:<port>`; the head `dashboard-host=0.0.0.0`; both
    `metrics-export-port=8080` and `dashboard-agent-listen-port=52365` unless set, and `block=true`
    always (so `ray start` stays in the foreground as the container's process).
    """
    done = dict(params)
    if node_type == WORKER:
        done.setdefault("address", f"{fqdn_ray_ip}:{gcs_port}")
    else:
        done.setdefault("dashboard-host", "0.0.0.0")
    done.setdefault("metrics-export-port", str(DEFAULT_METRICS_PORT))
    done["block"] = "true"
    done.setdefault("dashboard-agent-listen-port", str(DEFAULT_AGENT_PORT))
    return done


def ray_start(node_type: str, params: dict[str, str], resources: Mapping[str, Any]) -> str:
    """generateRayStartCommand: fills num-cpus, memory, num-gpus from the Ray container, then the command.

    num-cpus comes from the CPU limit, else the CPU request; memory from the memory limit only; both
    rounded up to integers. `resources` is the container's (already validated) `resources` field.
    """
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    if "num-cpus" not in params:
        for source in (limits, requests):
            cpu = parse(source["cpu"]) if "cpu" in source else Fraction(0)
            if cpu != 0:
                params["num-cpus"] = str(ceil_value(cpu))
                break
    if "memory" not in params and "memory" in limits and parse(limits["memory"]) != 0:
        params["memory"] = str(ceil_value(parse(limits["memory"])))
    _add_accelerators(params, limits)
    head = "--head " if node_type == HEAD else ""
    return f"ray start {head}{convert_param_map(params)}"


def _add_accelerators(params: dict[str, str], limits: Mapping[str, Any]) -> None:
    """addWellKnownAcceleratorResources: num-gpus from a GPU limit, the first TPU/Neuron limit as a resource.

    When rayStartParams' `resources` is not a JSON object once surrounding quotes are trimmed, the
    operator logs the error and adds nothing, num-gpus included: a `resources` written with escaped
    quotes (`"{\\"a\\": 1}"`, the form Ray's docs give for YAML) takes this path.
    """
    if not limits:
        return
    found = _resources_map(params)
    if found is None:
        return
    added = any(name in found for name in _ACCELERATORS.values())
    for key in sorted(limits):
        amount = parse(limits[key])
        if "num-gpus" not in params and is_gpu(key) and amount != 0:
            params["num-gpus"] = str(ceil_value(amount))
        if not added and key in _ACCELERATORS and amount != 0:
            if _ACCELERATORS[key] not in found:
                found[_ACCELERATORS[key]] = approximate(amount)
                params["resources"] = f"'{json_encode(found)}'"
            added = True


def _resources_map(params: Mapping[str, str]) -> dict[str, float] | None:
    """getResourcesMap: rayStartParams' `resources` as JSON, trimmed of quotes, backticks and spaces."""
    if "resources" not in params:
        return {}
    text = params["resources"].strip("'\"` ")

    def refuse(constant: str) -> float:
        raise ValueError(constant)  # Go's decoder has no NaN or Infinity

    try:
        found = json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return None
    if not isinstance(found, dict) or not all(_is_number(v) for v in found.values()):
        return None
    return {k: float(v) for k, v in found.items()}


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def convert_param_map(params: Mapping[str, str]) -> str:
    """convertParamMap: ` --key=value ` per option, keys sorted; `true` is a bare ` --key `, `false` dropped.

    Values are written as given, unquoted: `resources: '"{\\"a\\": 1}"'` reaches bash as
    `--resources="{\\"a\\": 1}"`, which bash turns into `--resources={"a": 1}`.
    """
    flags = []
    for option in sorted(params):
        argument = params[option]
        if argument.lower() in ("true", "false") and option not in _EXPLICIT_BOOLEANS:
            if argument.lower() == "true":
                flags.append(f" --{option} ")
        else:
            flags.append(f" --{option}={argument} ")
    return "".join(flags)
