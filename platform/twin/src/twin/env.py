"""A container's environment and `$(VAR)` references, as the kubelet and containerd make them (pure).

Sources (Kubernetes 1.33, containerd 2.0, the versions GKE 1.33 runs):

- `$(VAR)` expansion: kubernetes/third_party/forked/golang/expansion/expand.go (`Expand`,
  `MappingFuncFor`), documented on the Container API: "Variable references $(VAR_NAME) are expanded
  using the container's environment. If a variable cannot be resolved, the reference in the input
  string will be unchanged. Double $$ are reduced to a single $ ... "$$(VAR_NAME)" will produce the
  string literal "$(VAR_NAME)"" (https://kubernetes.io/docs/tasks/inject-data-application/define-
  interdependent-environment-variables/).
- the kubelet's environment: pkg/kubelet/kubelet_pods.go `makeEnvironmentVariables` (envFrom first,
  then each env entry in order, a value expanded against envFrom and the entries before it only),
  `podFieldSelectorRuntimeValue`, `containerResourceRuntimeValue`; pkg/fieldpath/fieldpath.go
  (`ExtractFieldPathAsString`, `FormatMap`); pkg/api/v1/resource/helpers.go
  (`ExtractContainerResourceValue`, `convertResourceCPUToString`: CPU rounded up to the divisor).
- containerd's merge with the image: internal/cri/server/container_create.go (v2.0.0): the default
  PATH (pkg/oci `defaultUnixEnv`), then HOSTNAME, then the image's ENV, then the kubelet's variables,
  each replacing an earlier one of the same name (`oci.WithEnv` -> `replaceOrAppendEnvValues`). So a
  container's PATH replaces the image's PATH entirely, and `$(PATH)` in a container's env value does
  not see the image's PATH (the kubelet never reads the image's ENV).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from contract.quantity import QuantityError, parse
from twin.golang import quote
from twin.spec import Objects, Where, items, mapping, text

# containerd pkg/oci/spec.go `defaultUnixEnv`, applied by `oci.WithDefaultPathEnv` before the image's ENV.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def expand(value: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes' `$(VAR)` expansion: `$$` -> `$`, `$(X)` -> X's value or left as is when unknown."""
    out: list[str] = []
    i, end = 0, len(value)
    while i < end:
        if value[i] != "$" or i + 1 == end:
            out.append(value[i])
            i += 1
        elif value[i + 1] == "$":  # an escaped operator, whatever follows it
            out.append("$")
            i += 2
        elif value[i + 1] == "(" and (close := value.find(")", i + 2)) >= 0:
            name = value[i + 2 : close]
            found = lookup(name)
            out.append(f"$({name})" if found is None else found)
            i = close + 1
        else:  # `$x` or an unclosed `$(`: copied through
            out.append(value[i : i + 2])
            i += 2
    return "".join(out)


@dataclass(frozen=True)
class Node:
    """What the kubelet knows of its node for the downward API: allocatable CPU and memory (quantities).

    A container without a limit reads the node's allocatable for `limits.cpu` / `limits.memory`
    (kubelet `defaultPodLimitsForDownwardAPI`; https://kubernetes.io/docs/concepts/workloads/pods/
    downward-api/#fallback-information-for-resource-limits).
    """

    cpu: str
    memory: str


@dataclass(frozen=True)
class PodFacts:
    """What the downward API reads of one pod (metadata, spec.nodeName, status IPs), read once."""

    where: Where
    name: str
    namespace: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    node_name: str
    service_account: str
    pod_ips: tuple[str, ...]
    host_ips: tuple[str, ...]
    containers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    node: Node | None = None
    security_context: Mapping[str, Any] = field(default_factory=dict)  # the pod's, under its containers'


# pkg/apis/core/validation: validEnvDownwardAPIFieldPathExpressions / validVolumeDownwardAPIFieldPathExpressions
ENV_FIELDS = frozenset(
    {
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "spec.nodeName",
        "spec.serviceAccountName",
        "status.hostIP",
        "status.hostIPs",
        "status.podIP",
        "status.podIPs",
    }
)
VOLUME_FIELDS = frozenset(
    {"metadata.name", "metadata.namespace", "metadata.uid", "metadata.labels", "metadata.annotations"}
)
_SUBSCRIPTED = re.compile(r"(metadata\.labels|metadata\.annotations)\['(.*)'\]", re.DOTALL)


def field_value(facts: PodFacts, path: str, w: Where, *, allowed: frozenset[str]) -> str:
    """The value of a fieldRef, as `podFieldSelectorRuntimeValue` and `ExtractFieldPathAsString` give it."""
    subscripted = _SUBSCRIPTED.fullmatch(path)
    if subscripted:
        which, key = subscripted.groups()
        return (facts.labels if which == "metadata.labels" else facts.annotations).get(key, "")
    if path not in allowed:
        w.fail(f"{path!r} is not a field the downward API gives here; use one of {', '.join(sorted(allowed))}")
    values: dict[str, Callable[[], str]] = {
        "metadata.name": lambda: facts.name,
        "metadata.namespace": lambda: facts.namespace,
        "metadata.uid": lambda: facts.uid,
        "metadata.labels": lambda: format_map(facts.labels),
        "metadata.annotations": lambda: format_map(facts.annotations),
        "spec.nodeName": lambda: facts.node_name,
        "spec.serviceAccountName": lambda: facts.service_account,
        "status.podIP": lambda: facts.pod_ips[0] if facts.pod_ips else "",
        "status.podIPs": lambda: ",".join(facts.pod_ips),
        "status.hostIP": lambda: _host_ips(facts, w)[0],
        "status.hostIPs": lambda: ",".join(_host_ips(facts, w)),
    }
    return values[path]()


def _host_ips(facts: PodFacts, w: Where) -> tuple[str, ...]:
    if not facts.host_ips:
        w.fail("reads status.hostIP, which the pod does not carry; fill status.hostIP as the kubelet knows its node")
    return facts.host_ips


def format_map(values: Mapping[str, str]) -> str:
    """`fieldpath.FormatMap`: `key="value"` lines (Go's %q), sorted by key, for a whole labels file."""
    return "\n".join(f"{k}={quote(values[k])}" for k in sorted(values))


def resource_value(facts: PodFacts, container: Mapping[str, Any], ref: Mapping[str, Any], w: Where) -> str:
    """A resourceFieldRef's value: `ExtractContainerResourceValue` over limits defaulted to the node's."""
    name = text(ref, "containerName", w)
    if name:
        if name not in facts.containers:
            w.at("containerName").fail(f"names container {name!r}, which this pod does not have")
        container = facts.containers[name]
    resource = text(ref, "resource", w, required=True)
    kind, _, what = resource.partition(".")
    if kind not in ("limits", "requests") or what not in ("cpu", "memory"):
        w.at("resource").fail(
            f"{resource!r} is not modeled; use limits.cpu, limits.memory, requests.cpu or requests.memory"
        )
    divisor = _quantity(ref.get("divisor", "1"), w.at("divisor")) or Fraction(1)  # a zero divisor reads as 1
    amount = _resource(facts, container, kind, what, w)
    if what == "cpu":  # MilliValue() of each, rounded up, then the quotient rounded up
        return str(math.ceil(Fraction(math.ceil(amount * 1000), math.ceil(divisor * 1000))))
    return str(math.ceil(Fraction(math.ceil(amount), math.ceil(divisor))))


def _resource(facts: PodFacts, container: Mapping[str, Any], kind: str, what: str, w: Where) -> Fraction:
    resources = mapping(container, "resources", w)
    limits, requests = mapping(resources, "limits", w), mapping(resources, "requests", w)
    limit = _quantity(limits[what], w.at(f"resources.limits.{what}")) if what in limits else Fraction(0)
    if kind == "requests":
        # API defaulting (pkg/apis/core/v1/defaults.go SetDefaults_Pod): an unset request takes the limit.
        return _quantity(requests[what], w.at(f"resources.requests.{what}")) if what in requests else limit
    if limit:
        return limit
    if facts.node is None:
        w.fail(f"reads limits.{what} of a container without one; pass node= (its allocatable) to plan()")
    return _quantity(getattr(facts.node, what), Where(facts.where.pod, f"node allocatable {what}"))


def _quantity(value: object, w: Where) -> Fraction:
    try:
        return parse(value)
    except QuantityError as e:
        w.fail(str(e))


def kubelet_env(facts: PodFacts, container: Mapping[str, Any], objects: Objects, w: Where) -> dict[str, str]:
    """The variables the kubelet sends for a container (`makeEnvironmentVariables`), without the image's.

    Service links are not made: the twin has no Services to link (see the README).
    """
    env: dict[str, str] = {}
    for at, source in items(container, "envFrom", w):
        env.update(_env_from(source, objects, at))
    for at, var in items(container, "env", w):
        name = text(var, "name", at, required=True)
        value = text(var, "value", at)
        if value:
            env[name] = expand(value, env.get)
        elif "valueFrom" in var and var["valueFrom"] is not None:
            found = _value_from(facts, container, mapping(var, "valueFrom", at), objects, at.at("valueFrom"))
            if found is None:  # an optional key or object that is not there: the variable is not set
                continue
            env[name] = found
        else:
            env[name] = ""
    for name, value in env.items():
        if "\0" in value or "\0" in name or "=" in name:
            w.fail(f"variable {name!r} has a NUL byte or an '=' in its name; no process can receive it")
    return env


def _env_from(source: Mapping[str, Any], objects: Objects, w: Where) -> dict[str, str]:
    prefix = text(source, "prefix", w)
    for kind, read in (("configMapRef", _text(objects.config_map_text)), ("secretRef", objects.secret)):
        if kind in source:
            ref = mapping(source, kind, w)
            name = text(ref, "name", w.at(kind), required=True)
            data = read(name, w)
            if data is None:
                if ref.get("optional") is True:
                    return {}
                w.at(kind).fail(f"{_object(kind)} {name!r} is not among the rendered objects (the kubelet: not found)")
            return {prefix + key: _decode(value) for key, value in data.items()}
    w.fail("has neither configMapRef nor secretRef")


def _value_from(
    facts: PodFacts, container: Mapping[str, Any], source: Mapping[str, Any], objects: Objects, w: Where
) -> str | None:
    if "fieldRef" in source:
        ref = mapping(source, "fieldRef", w)
        if text(ref, "apiVersion", w.at("fieldRef")) not in ("", "v1"):
            w.at("fieldRef").at("apiVersion").fail("only v1 field paths exist")
        path = text(ref, "fieldPath", w.at("fieldRef"), required=True)
        return field_value(facts, path, w.at("fieldRef").at("fieldPath"), allowed=ENV_FIELDS)
    if "resourceFieldRef" in source:
        return resource_value(facts, container, mapping(source, "resourceFieldRef", w), w.at("resourceFieldRef"))
    for kind, read in (("configMapKeyRef", _text(objects.config_map_text)), ("secretKeyRef", objects.secret)):
        if kind in source:
            ref, at = mapping(source, kind, w), w.at(kind)
            name, key = text(ref, "name", at, required=True), text(ref, "key", at, required=True)
            optional = ref.get("optional") is True
            data = read(name, w)
            if data is None or key not in data:
                if optional:
                    return None
                missing = f"has no key {key!r}" if data is not None else "is not among the rendered objects"
                at.fail(f"{_object(kind)} {name!r} {missing}; add it or mark the reference optional")
            return _decode(data[key])
    w.fail("has none of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef")


def _text(read: Callable[[str, Where], dict[str, str] | None]) -> Callable[[str, Where], dict[str, bytes] | None]:
    """A ConfigMap's data read as bytes, like a Secret's, so both decode the same way."""

    def as_bytes(name: str, w: Where) -> dict[str, bytes] | None:
        found = read(name, w)
        return None if found is None else {k: v.encode("utf-8", "surrogateescape") for k, v in found.items()}

    return as_bytes


def _object(kind: str) -> str:
    return "ConfigMap" if kind.startswith("configMap") else "Secret"


def _decode(value: bytes) -> str:
    # The kubelet passes the bytes as they are (`string(v)`); surrogateescape keeps non-UTF-8 bytes
    # round-trippable to the exec'd process.
    return value.decode("utf-8", "surrogateescape")


def container_env(image_env: Mapping[str, str], kubelet: Mapping[str, str], hostname: str) -> dict[str, str]:
    """The process environment containerd builds: default PATH, HOSTNAME, image ENV, then the kubelet's."""
    return {"PATH": DEFAULT_PATH, "HOSTNAME": hostname} | dict(image_env) | dict(kubelet)
