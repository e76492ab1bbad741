"""Pods wherever a kind embeds a pod template, and namespaces' Pod Security levels: what a pod may touch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from review.kubernetes import Obj
from review.security.common import dicts, same

# --- Pods -----------------------------------------------------------------------------------------


def pod_specs(value: Any, path: str = "", field: str = "") -> Iterator[tuple[str, Obj]]:
    """Every pod spec in an object, wherever a workload kind or a CRD embeds it (a `spec` with a
    `containers` list), with a short path: the fields on the way, list items by name, without
    `spec` and `template` ("" for a Deployment, "workerGroupSpecs[gpu]" for a RayCluster)."""
    if isinstance(value, dict):
        if field == "spec" and isinstance(value.get("containers"), list):
            yield path, value
            return
        for k, v in value.items():
            yield from pod_specs(v, path if k in ("spec", "template") else f"{path}.{k}".lstrip("."), str(k))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            name = (item.get("name") or item.get("groupName")) if isinstance(item, dict) else None
            yield from pod_specs(item, f"{path}[{name or i}]", field)


_CONTAINERS = {
    "initContainers": "init container",
    "containers": "container",
    "ephemeralContainers": "ephemeral container",
}
_NEVER = object()  # a switch without a risky value, or without a guard
# (field, the value that widens, the guard whose removal widens, said when it widens, said when the guard goes)
_POD_SWITCHES = (
    ("hostNetwork", True, _NEVER, "uses the host's network (hostNetwork)", ""),
    ("hostPID", True, _NEVER, "sees the host's processes (hostPID)", ""),
    ("hostIPC", True, _NEVER, "shares the host's IPC (hostIPC)", ""),
    ("automountServiceAccountToken", _NEVER, False, "", "mounts its service account token again"),
)
# Read from the container's securityContext over the pod's (runAsUser and runAsNonRoot may sit in either).
_CONTAINER_SWITCHES = (
    ("privileged", True, _NEVER, "becomes privileged", ""),
    ("allowPrivilegeEscalation", True, False, "allows privilege escalation", "no longer forbids privilege escalation"),
    ("runAsUser", 0, _NEVER, "runs as root (runAsUser 0)", ""),
    ("runAsNonRoot", False, True, "may run as root (runAsNonRoot false)", "no longer requires a non-root user"),
    ("readOnlyRootFilesystem", _NEVER, True, "", "gets a writable root filesystem"),
)


def _switches(table: tuple[tuple[str, Any, Any, str, str], ...], old: Obj, new: Obj) -> list[str]:
    out = []
    for field, risky, guard, widens, unguarded in table:
        was, now = old.get(field), new.get(field)
        if same(now, risky) and not same(was, risky):
            out.append(widens)
        elif same(was, guard) and not same(now, guard):
            out.append(unguarded)
    return out


def _containers(pod: Obj) -> dict[str, Obj]:
    """ "init container setup" -> the container, for every kind of container."""
    return {f"{what} {c.get('name')}": c for field, what in _CONTAINERS.items() for c in dicts(pod.get(field))}


def _context(pod: Obj, container: Obj) -> Obj:
    return {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}


def _caps(context: Obj, which: str) -> set[str]:
    return set(map(str, (context.get("capabilities") or {}).get(which) or []))


def _host_ports(container: Obj) -> set[str]:
    return {str(p["hostPort"]) for p in dicts(container.get("ports")) if p.get("hostPort")}


def _host_paths(pod: Obj) -> dict[str, bool]:
    """Host path -> whether some container mounts it writable."""
    volumes = {
        v.get("name"): str(v["hostPath"].get("path"))
        for v in dicts(pod.get("volumes"))
        if isinstance(v.get("hostPath"), dict)
    }
    out = dict.fromkeys(volumes.values(), False)
    for container in _containers(pod).values():
        for mount in dicts(container.get("volumeMounts")):
            if mount.get("name") in volumes and mount.get("readOnly") is not True:
                out[volumes[mount["name"]]] = True
    return out


def pod_widening(old: Obj | None, new: Obj) -> list[str]:
    """What a pod spec may do on its node that it could not before (`old` None: a new pod spec)."""
    before = old or {}
    out = _switches(_POD_SWITCHES, before, new)
    account = new.get("serviceAccountName") or new.get("serviceAccount") or "default"
    was = before.get("serviceAccountName") or before.get("serviceAccount") or "default"
    if old is not None and account != was:
        out.append(f"runs as service account {account} (was {was}), with its rights")
    old_containers = _containers(before)
    for name, container in _containers(new).items():
        old_container = old_containers.get(name, {})
        was_ctx, now_ctx = _context(before, old_container), _context(new, container)
        said = _switches(_CONTAINER_SWITCHES, was_ctx, now_ctx)
        if added := _caps(now_ctx, "add") - _caps(was_ctx, "add"):
            said.append(f"adds capabilities {', '.join(sorted(added))}")
        if undropped := _caps(was_ctx, "drop") - _caps(now_ctx, "drop"):
            said.append(f"no longer drops capabilities {', '.join(sorted(undropped))}")
        if ports := _host_ports(container) - _host_ports(old_container):
            said.append(f"opens host ports {', '.join(sorted(ports))}")
        out += [f"{name} {s}" for s in said]
    old_paths = _host_paths(before)
    for path, writable in _host_paths(new).items():
        if path not in old_paths:
            out.append(f"mounts host path {path} {'read-write' if writable else 'read-only'}")
        elif writable and not old_paths[path]:
            out.append(f"mounts host path {path} read-write (was read-only)")
    return out


def pods_widening(old: Obj | None, new: Obj) -> list[str]:
    old_specs = dict(pod_specs(old or {}))
    lines = []
    for path, spec in pod_specs(new):
        if said := pod_widening(old_specs.get(path), spec):
            lines.append(f"{path + ' ' if path else ''}{'; '.join(said)}")
    return lines


# --- Namespaces -----------------------------------------------------------------------------------

_ENFORCE = "pod-security.kubernetes.io/enforce"
_LEVELS = {"privileged": 0, "baseline": 1, "restricted": 2}  # no label: privileged


def pod_security_lowered(old: Obj | None, new: Obj) -> list[str]:
    level = ((new.get("metadata") or {}).get("labels") or {}).get(_ENFORCE, "privileged")
    if old is None:
        return (
            [f"enforces Pod Security {level}"]
            if level == "privileged" and _ENFORCE in (new["metadata"].get("labels") or {})
            else []
        )
    was = ((old.get("metadata") or {}).get("labels") or {}).get(_ENFORCE, "privileged")
    return [f"enforces Pod Security {level} (was {was})"] if _LEVELS.get(level, 0) < _LEVELS.get(was, 0) else []
