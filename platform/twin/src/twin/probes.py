"""A container's startup, liveness and readiness probes as the kubelet runs them (pure).

Sources (Kubernetes 1.33): the defaults of pkg/apis/core/v1/defaults.go (`SetDefaults_Probe`:
timeoutSeconds 1, periodSeconds 10, successThreshold 1, failureThreshold 3, initialDelaySeconds 0;
`SetDefaults_HTTPGetAction`: path "/", scheme HTTP); pkg/kubelet/prober/prober.go `runProbe`: an exec
probe's command is expanded with `ExpandContainerCommandOnlyStatic` (only the literal `value` of the
container's env entries; a valueFrom entry expands to ""), an HTTP or TCP probe goes to the pod IP
unless `host` is set; pkg/probe/util.go `ResolveContainerPort` (a port by number, or by the name of
one of the container's ports); pkg/probe/http/request.go (User-Agent `kube-probe/<major>.<minor>`
and `Accept: */*` unless the probe sets them).
See https://kubernetes.io/docs/tasks/configure-pod-container/configure-liveness-readiness-startup-probes/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from twin.env import expand
from twin.spec import Where, integer, items, mapping, strings, text

KUBE_VERSION = "1.33"
HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


@dataclass(frozen=True)
class Probe:
    """One probe, its handler resolved (command expanded, port a number, host the pod IP by default)."""

    kind: str  # one of HANDLERS
    command: tuple[str, ...] = ()  # exec
    host: str = ""  # httpGet, tcpSocket, grpc
    port: int = 0
    path: str = ""  # httpGet
    scheme: str = ""  # httpGet: HTTP or HTTPS
    headers: tuple[tuple[str, str], ...] = ()  # httpGet, the kubelet's own included
    service: str = ""  # grpc
    initial_delay_seconds: int = 0
    period_seconds: int = 10
    timeout_seconds: int = 1
    success_threshold: int = 1
    failure_threshold: int = 3


def plan_probe(container: Mapping[str, Any], which: str, pod_ip: str, w: Where) -> Probe | None:
    """`livenessProbe`, `readinessProbe` or `startupProbe` of a container; None when it has none."""
    if container.get(which) is None:
        return None
    probe, at = mapping(container, which, w), w.at(which)
    handlers = [h for h in HANDLERS if probe.get(h) is not None]
    if len(handlers) != 1:
        at.fail(f"needs exactly one of {', '.join(HANDLERS)}, not {len(handlers)}")
    success = _count(probe, "successThreshold", at, 1, 1)
    if which != "readinessProbe" and success != 1:
        at.at("successThreshold").fail("must be 1 for a liveness or startup probe")
    kind = handlers[0]
    return replace(
        _handler(kind, mapping(probe, kind, at), container, pod_ip, at.at(kind), w),
        initial_delay_seconds=_count(probe, "initialDelaySeconds", at, 0, 0),
        period_seconds=_count(probe, "periodSeconds", at, 10, 1),
        timeout_seconds=_count(probe, "timeoutSeconds", at, 1, 1),
        success_threshold=success,
        failure_threshold=_count(probe, "failureThreshold", at, 3, 1),
    )


def _handler(
    kind: str, handler: Mapping[str, Any], container: Mapping[str, Any], pod_ip: str, hw: Where, w: Where
) -> Probe:
    if kind == "exec":
        statics = {text(v, "name", vw, required=True): text(v, "value", vw) for vw, v in items(container, "env", w)}
        command = tuple(expand(part, statics.get) for part in strings(handler, "command", hw))
        if not command:
            hw.at("command").fail("is empty; give the command to run")
        return Probe(kind, command=command)
    host = text(handler, "host", hw) or pod_ip
    port = port_number(handler.get("port"), container, hw.at("port"))
    if kind == "grpc":
        return Probe(kind, host=host, port=port, service=text(handler, "service", hw))
    if kind == "tcpSocket":
        return Probe(kind, host=host, port=port)
    scheme = text(handler, "scheme", hw) or "HTTP"
    if scheme not in ("HTTP", "HTTPS"):
        hw.at("scheme").fail(f"{scheme!r} is not HTTP or HTTPS")
    path = text(handler, "path", hw) or "/"
    return Probe(kind, host=host, port=port, path=path, scheme=scheme, headers=_headers(handler, hw))


def _count(probe: Mapping[str, Any], key: str, w: Where, default: int, least: int) -> int:
    value = integer(probe, key, w, default)
    assert value is not None
    if not least <= value < 2**31:
        w.at(key).fail(f"{value} must be at least {least}")
    return value


def _headers(handler: Mapping[str, Any], w: Where) -> tuple[tuple[str, str], ...]:
    headers = [(text(h, "name", hw, required=True), text(h, "value", hw)) for hw, h in items(handler, "httpHeaders", w)]
    named = {name.lower() for name, _ in headers}
    if "user-agent" not in named:
        headers.append(("User-Agent", f"kube-probe/{KUBE_VERSION}"))
    if "accept" not in named:
        headers.append(("Accept", "*/*"))
    return tuple(headers)


def port_number(value: object, container: Mapping[str, Any], w: Where) -> int:
    """A port by number, or by the name of one of the container's ports (`ResolveContainerPort`)."""
    if isinstance(value, str):
        named = {text(p, "name", pw): integer(p, "containerPort", pw) for pw, p in items(container, "ports", w)}
        if value not in named:
            w.fail(f"port {value!r} is not the name of one of the container's ports")
        value = named[value]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        w.fail(f"port {value!r} is not a number from 1 to 65535")
    return value
