"""A pod's volumes as the kubelet sets them up, and where each container mounts them (pure).

The plan says what the runner must create; it writes nothing itself. Sources (Kubernetes 1.33):

- emptyDir: pkg/volume/emptydir/empty_dir.go: a directory of mode 0777 (`perm`, chmod'ed past the
  umask); medium Memory is a tmpfs of `calculateEmptyDirMemorySize` bytes: the node's allocatable
  memory, the pod's memory limit when lower, the volume's sizeLimit when lower still.
- configMap / secret: pkg/volume/configmap/configmap.go and pkg/volume/secret/secret.go
  `MakePayload`: every key (a ConfigMap's data then binaryData) or only the listed items, each with
  its item mode or the volume's defaultMode (0644 by API defaulting); a missing object or key is an
  error unless the volume is optional. downwardAPI: pkg/volume/downwardapi/downwardapi.go
  `CollectData`; projected: pkg/volume/projected/projected.go `collectData`.
- these API volumes are always mounted read-only (`mustMountRO`, the volume's `GetAttributes().ReadOnly`
  in pkg/kubelet/kubelet_pods.go `makeMounts`), whatever the volumeMount says; with a pod fsGroup their
  files are group-owned by it and gain g+r (pkg/volume/volume_linux.go `SetVolumeOwnership`, roMask 0440).
- hostPath and CSI volumes have no node here: the caller's `HostPaths` names a twin directory that
  stands in for each, or the pod is refused.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from contract.quantity import QuantityError, parse
from twin.env import VOLUME_FIELDS, PodFacts, expand, field_value, resource_value
from twin.spec import Objects, Where, flag, integer, items, mapping, string_map, text

DEFAULT_MODE = 0o644  # SetDefaults_ConfigMapVolumeSource / Secret / DownwardAPI / Projected
EMPTY_DIR_MODE = 0o777  # empty_dir.go `perm`
TMPFS_MODE = 0o1777  # a fresh tmpfs's root; the kubelet mounts it without a mode= option
GCSFUSE = "gcsfuse.csi.storage.gke.io"
Reader = Callable[[str, Where], "dict[str, bytes] | None"]  # Objects.config_map or Objects.secret


class HostPaths(Protocol):
    """Where the twin keeps the stand-in for a node path or a CSI volume; None when it has none."""

    def host_path(self, path: str) -> str | None: ...

    def csi(self, driver: str, attributes: Mapping[str, str]) -> str | None: ...


@dataclass(frozen=True)
class StandIns:
    """A `HostPaths` from a table: node paths to twin directories, GCS FUSE buckets under one directory.

    A gcsfuse volume `bucketName: b` with mount option `only-dir=d` (GKE's Cloud Storage FUSE CSI
    driver mounts only that folder of the bucket) stands in as `<buckets>/b/d`.
    """

    host: Mapping[str, str] = field(default_factory=dict)
    buckets: str = ""

    def host_path(self, path: str) -> str | None:
        return self.host.get(path)

    def csi(self, driver: str, attributes: Mapping[str, str]) -> str | None:
        bucket = attributes.get("bucketName", "")
        if driver != GCSFUSE or not self.buckets or not _descending(bucket) or "/" in bucket:
            return None
        folder = gcsfuse_only_dir(attributes)
        if folder is None:
            return None
        return posixpath.join(self.buckets, bucket, folder) if folder else posixpath.join(self.buckets, bucket)


def gcsfuse_only_dir(attributes: Mapping[str, str]) -> str | None:
    """The `only-dir=` folder of a gcsfuse volume's mountOptions ("" for the whole bucket, None if unsafe)."""
    options = [o for o in attributes.get("mountOptions", "").split(",") if o.startswith("only-dir=")]
    folder = options[-1].removeprefix("only-dir=").strip("/") if options else ""
    return folder if not folder or _descending(folder) else None


@dataclass(frozen=True)
class File:
    """A file the kubelet writes into a configMap, secret, downwardAPI or projected volume."""

    path: str  # relative to the volume's root
    data: bytes
    mode: int


@dataclass(frozen=True)
class VolumePlan:
    """What the runner creates for one volume of the pod, shared by every container that mounts it."""

    name: str
    kind: str  # "emptyDir" (a directory), "tmpfs" (emptyDir medium Memory), "files" or "host"
    mode: int = EMPTY_DIR_MODE  # of the volume's root directory
    source: str = ""  # "host": the twin directory standing in for the node path or CSI volume
    host_type: str = ""  # "host" from a hostPath: its type (Directory, File, DirectoryOrCreate...)
    files: tuple[File, ...] = ()  # "files"
    size_bytes: int | None = None  # "tmpfs": its size= option (None: the kernel's default, half of RAM)
    read_only: bool = False  # mounted read-only in every container, whatever the volumeMount says
    gid: int | None = None  # the pod's fsGroup: the runner gives the volume's files to this group


@dataclass(frozen=True)
class Mount:
    """One volumeMount of a container: mountPropagation is not modeled (the twin's mounts are private)."""

    volume: str
    path: str  # inside the container
    read_only: bool
    sub_path: str = ""  # relative to the volume's root; the runner creates it when missing, as the kubelet does
    tmpfs_size: int | None = None  # set when the volume is a tmpfs (a Memory emptyDir)
    tmpfs: bool = False


def plan_volumes(
    spec: Mapping[str, Any], facts: PodFacts, objects: Objects, host: HostPaths, memory_limit: Fraction | None
) -> dict[str, VolumePlan]:
    """Every volume of the pod spec, by name."""
    fs_group = integer(mapping(spec, "securityContext", facts.where), "fsGroup", facts.where.at("securityContext"))
    planned: dict[str, VolumePlan] = {}
    for w, volume in items(spec, "volumes", facts.where):
        name = text(volume, "name", w, required=True)
        if name in planned:
            w.at("name").fail(f"volume {name!r} is defined twice")
        planned[name] = _volume(name, volume, w, facts, objects, host, memory_limit, fs_group)
    return planned


def _volume(
    name: str,
    volume: Mapping[str, Any],
    w: Where,
    facts: PodFacts,
    objects: Objects,
    host: HostPaths,
    memory_limit: Fraction | None,
    fs_group: int | None,
) -> VolumePlan:
    if "emptyDir" in volume:
        return _empty_dir(name, mapping(volume, "emptyDir", w), w.at("emptyDir"), facts, memory_limit, fs_group)
    if "hostPath" in volume:
        source = mapping(volume, "hostPath", w)
        path = text(source, "path", w.at("hostPath"), required=True)
        found = _stand_in(host.host_path(path), f"host path {path}", w)
        return VolumePlan(name, "host", source=found, host_type=text(source, "type", w.at("hostPath")))
    if "csi" in volume:
        source, at = mapping(volume, "csi", w), w.at("csi")
        driver, attributes = text(source, "driver", at, required=True), string_map(source, "volumeAttributes", at)
        where = f"CSI volume of {driver} {attributes.get('bucketName', '')}".rstrip()
        found = _stand_in(host.csi(driver, attributes), where, w)
        # The GCS FUSE driver declares VOLUME_MOUNT_GROUP, so the kubelet hands it the pod's fsGroup and it
        # mounts with gid=<fsGroup>, file-mode=664, dir-mode=775; without one, gcsfuse's defaults (0644/0755,
        # owned by its own process): only root may write (gcs-fuse-csi-driver v1.24.0, pkg/csi_driver/utils.go
        # parseRequestArguments, gcs_fuse_driver.go node capabilities).
        mode = 0o775 if driver == GCSFUSE and fs_group is not None else 0o755
        gid = fs_group if driver == GCSFUSE else None
        return VolumePlan(
            name, "host", source=found, read_only=flag(source, "readOnly", at) is True, mode=mode, gid=gid
        )
    for kind in ("configMap", "secret", "downwardAPI", "projected"):
        if kind in volume:
            source = mapping(volume, kind, w)
            files = _files(kind, source, w.at(kind), facts, objects)
            default = _mode(source, "defaultMode", w.at(kind), DEFAULT_MODE)
            group_read = 0o440 if fs_group is not None else 0
            moded = tuple(File(f.path, f.data, (default if f.mode < 0 else f.mode) | group_read) for f in files)
            return VolumePlan(name, "files", files=moded, read_only=True, gid=fs_group)
    kinds = sorted(k for k in volume if k != "name")
    w.fail(
        f"volume type {', '.join(kinds) or '(none)'} is not modeled by the twin; "
        "use emptyDir, hostPath, csi, configMap, secret, downwardAPI or projected"
    )


def _stand_in(found: str | None, what: str, w: Where) -> str:
    if not found:
        w.fail(f"the twin has no stand-in for the {what}; add one to the twin's host paths")
    return found


def _empty_dir(
    name: str, source: Mapping[str, Any], w: Where, facts: PodFacts, memory_limit: Fraction | None, fs_group: int | None
) -> VolumePlan:
    medium = text(source, "medium", w)
    setgid = 0o2000 if fs_group is not None else 0  # SetVolumeOwnership sets the group bit on directories
    if medium == "":
        return VolumePlan(name, "emptyDir", mode=EMPTY_DIR_MODE | setgid, gid=fs_group)
    if medium != "Memory":
        w.at("medium").fail(f'medium {medium!r} is not modeled; use "" or Memory')
    bounds = [memory_limit] if memory_limit else []
    if facts.node is not None:
        bounds.append(_quantity(facts.node.memory, w))
    if "sizeLimit" in source:
        bounds.append(_quantity(source["sizeLimit"], w.at("sizeLimit")))
    positive = [b for b in bounds if b > 0]
    size = int(min(positive)) if positive else None  # `Quantity.Value()` of the smallest (its size= option)
    return VolumePlan(name, "tmpfs", mode=TMPFS_MODE | setgid, size_bytes=size, gid=fs_group)


def _quantity(value: object, w: Where) -> Fraction:
    try:
        return parse(value)
    except QuantityError as e:
        w.fail(str(e))


def _files(kind: str, source: Mapping[str, Any], w: Where, facts: PodFacts, objects: Objects) -> list[File]:
    """The files of one API volume (mode -1: the volume's defaultMode)."""
    if kind == "configMap":
        return _object_files("ConfigMap", text(source, "name", w, required=True), source, w, objects.config_map)
    if kind == "secret":
        return _object_files("Secret", text(source, "secretName", w, required=True), source, w, objects.secret)
    if kind == "downwardAPI":
        return _downward(source, w, facts)
    files: list[File] = []
    for at, projection in items(source, "sources", w):
        files += _projection(projection, at, facts, objects)
    seen: set[str] = set()
    for f in files:
        if f.path in seen:
            w.fail(f"two projected sources write {f.path!r}; give each file its own path")
        seen.add(f.path)
    return files


def _projection(projection: Mapping[str, Any], w: Where, facts: PodFacts, objects: Objects) -> list[File]:
    if "configMap" in projection:
        source = mapping(projection, "configMap", w)
        name = text(source, "name", w.at("configMap"), required=True)
        return _object_files("ConfigMap", name, source, w.at("configMap"), objects.config_map)
    if "secret" in projection:
        source = mapping(projection, "secret", w)
        name = text(source, "name", w.at("secret"), required=True)
        return _object_files("Secret", name, source, w.at("secret"), objects.secret)
    if "downwardAPI" in projection:
        return _downward(mapping(projection, "downwardAPI", w), w.at("downwardAPI"), facts)
    if "serviceAccountToken" in projection:
        w.fail(
            "a service account token needs an API server, which the twin has none of; "
            "set automountServiceAccountToken: false or drop the projection"
        )
    w.fail(
        f"projection {', '.join(sorted(projection)) or '(none)'} is not modeled; use configMap, secret or downwardAPI"
    )


def _object_files(kind: str, name: str, source: Mapping[str, Any], w: Where, read: Reader) -> list[File]:
    data = read(name, w)
    optional = flag(source, "optional", w) is True
    if data is None:
        if optional:
            return []
        w.fail(f"{kind} {name!r} is not among the rendered objects; the kubelet would not mount it")
    listed = items(source, "items", w)
    if not listed:
        return [File(_relative(key, w), value, -1) for key, value in sorted(data.items())]
    files = []
    for at, item in listed:
        key = text(item, "key", at, required=True)
        if key not in data:
            if optional:
                continue
            at.at("key").fail(f"{kind} {name!r} has no key {key!r}; add it or mark the volume optional")
        files.append(
            File(
                _relative(text(item, "path", at, required=True), at.at("path")), data[key], _mode(item, "mode", at, -1)
            )
        )
    return files


def _downward(source: Mapping[str, Any], w: Where, facts: PodFacts) -> list[File]:
    files = []
    for at, item in items(source, "items", w):
        path = _relative(text(item, "path", at, required=True), at.at("path"))
        if "fieldRef" in item:
            fieldpath = text(mapping(item, "fieldRef", at), "fieldPath", at.at("fieldRef"), required=True)
            value = field_value(facts, fieldpath, at.at("fieldRef").at("fieldPath"), allowed=VOLUME_FIELDS)
        elif "resourceFieldRef" in item:
            ref = mapping(item, "resourceFieldRef", at)
            text(ref, "containerName", at.at("resourceFieldRef"), required=True)  # required in a volume
            value = resource_value(facts, {}, ref, at.at("resourceFieldRef"))
        else:
            at.fail("has neither fieldRef nor resourceFieldRef")
        files.append(File(path, value.encode(), _mode(item, "mode", at, -1)))
    return files


def _mode(obj: Mapping[str, Any], key: str, w: Where, default: int) -> int:
    mode = integer(obj, key, w, default)
    assert mode is not None
    if mode != default and not 0 <= mode <= 0o777:
        w.at(key).fail(f"{mode} is not a file mode from 0 to 0777 (511)")
    return mode


def _descending(path: str) -> bool:
    """A relative path that stays inside its root (validation's `validateLocalDescendingPath`)."""
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and ".." not in parts and "\0" not in path


def _relative(path: str, w: Where) -> str:
    if not _descending(path) or path.startswith(".."):
        w.fail(f"{path!r} must be a relative path inside the volume, without '..'")
    return posixpath.normpath(path)


def plan_mounts(
    container: Mapping[str, Any], w: Where, volumes: Mapping[str, VolumePlan], env: Mapping[str, str]
) -> tuple[Mount, ...]:
    """A container's volumeMounts, as `makeMounts` resolves them (subPathExpr against the kubelet's env)."""
    mounts: list[Mount] = []
    for at, mount in items(container, "volumeMounts", w):
        name = text(mount, "name", at, required=True)
        if name not in volumes:
            at.at("name").fail(f"cannot find volume {name!r} to mount into container {w.container!r}")
        path = container_path(text(mount, "mountPath", at, required=True))
        if any(m.path == path for m in mounts):
            at.at("mountPath").fail(f"{path} is mounted twice; each mountPath must be unique")
        volume = volumes[name]
        read_only = flag(mount, "readOnly", at) is True or volume.read_only
        sub = _sub_path(mount, at, env)
        tmpfs = volume.kind == "tmpfs"
        mounts.append(Mount(name, path, read_only, sub, volume.size_bytes if tmpfs else None, tmpfs))
    return tuple(mounts)


def container_path(path: str) -> str:
    """`volumeutil.MakeAbsolutePath` on Linux: a path in the container, taken from its root."""
    return posixpath.normpath("/" + path.lstrip("/"))


def _sub_path(mount: Mapping[str, Any], w: Where, env: Mapping[str, str]) -> str:
    sub = text(mount, "subPath", w)
    expr = text(mount, "subPathExpr", w)
    if expr:  # kubecontainer.ExpandContainerVolumeMounts: every reference must resolve to a non-empty value
        missing = sorted({name for name in _references(expr) if not env.get(name)})
        if missing:
            w.at("subPathExpr").fail(f"missing value for {', '.join(missing)}")
        sub = expand(expr, env.get)
    if sub and not _descending(sub):
        w.at("subPath").fail(f"{sub!r} must be a relative path inside the volume, without '..'")
    return posixpath.normpath(sub) if sub else ""


def _references(value: str) -> list[str]:
    names: list[str] = []

    def note(name: str) -> str:
        names.append(name)
        return ""

    expand(value, note)
    return names
