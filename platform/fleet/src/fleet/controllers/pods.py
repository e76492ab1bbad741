"""A pod's resource requests as Kueue counts them for quota, from a pod template (pure).

Kueue v0.19.2 builds a PodSet's per-pod requests in three steps:

1. `pkg/workload/resources.go` `AdjustResources`: the namespace's LimitRange `defaultRequest` fills a
   container's missing requests (`handlePodLimitRange`), then a container's limits fill what is still
   missing (`UseLimitsAsMissingRequestsInPod`). The order matters: a container with only a memory limit
   counts the LimitRange's default, not its limit.
2. `pkg/resources/factory.go` `NewRequestsFromPodSpec`: Kubernetes' `resourcehelpers.PodRequests`, the sum
   of the containers, at least the largest init container (restartable init containers, sidecars, add to
   both), plus the pod overhead.
3. Only non-zero requests matter: a resource requested at zero needs no quota (upstream test
   pkg/scheduler/flavorassigner/flavorassigner_test.go "zero resource request not in clusterQueue should
   succeed").
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from contract.quantity import parse

Requests = dict[str, Fraction]


def _resources(container: Mapping[str, Any], key: str) -> Requests:
    listed = (container.get("resources") or {}).get(key) or {}
    return {str(name): parse(amount) for name, amount in listed.items()}


def _container_requests(container: Mapping[str, Any], defaults: Mapping[str, object]) -> Requests:
    """Step 1 for one container: its requests, then the LimitRange's defaults, then its limits."""
    requests = _resources(container, "requests")
    for name, amount in defaults.items():
        requests.setdefault(name, parse(amount))
    for name, amount in _resources(container, "limits").items():
        requests.setdefault(name, amount)
    return requests


def _add(into: Requests, more: Mapping[str, Fraction]) -> None:
    for name, amount in more.items():
        into[name] = into.get(name, Fraction(0)) + amount


def pod_requests(spec: Mapping[str, Any], defaults: Mapping[str, object] | None = None) -> Requests:
    """One pod's requests as Kueue counts them (module docstring): resource -> amount, zeros left out.

    `defaults`: the namespace's LimitRange `defaultRequest` for containers (none: {}).
    """
    defaults = defaults or {}
    total: Requests = {}
    for container in spec.get("containers") or []:
        _add(total, _container_requests(container, defaults))
    sidecars: Requests = {}  # restartable init containers started so far: they keep running
    largest_init: Requests = {}
    for container in spec.get("initContainers") or []:
        own = _container_requests(container, defaults)
        if container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            during = dict(sidecars)
        else:
            during = dict(own)
            _add(during, sidecars)
        for name, amount in during.items():
            largest_init[name] = max(largest_init.get(name, Fraction(0)), amount)
    for name, amount in largest_init.items():
        total[name] = max(total.get(name, Fraction(0)), amount)
    _add(total, {str(k): parse(v) for k, v in (spec.get("overhead") or {}).items()})
    return {name: amount for name, amount in total.items() if amount > 0}
