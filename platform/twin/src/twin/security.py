"""A container's user, groups and capabilities as the kubelet and containerd give them (pure).

Sources (Kubernetes 1.33 with containerd 2.0, the runtime GKE 1.33 nodes run):

- user: pkg/securitycontext/util.go `DetermineEffectiveSecurityContext` (a container's field over the
  pod's); pkg/kubelet/kuberuntime/security_context.go `determineEffectiveSecurityContext` (no
  runAsUser: the image's user, as containerd's image status reads it: internal/cri/server/images/
  image_status.go `getUserFromImage`, the part before ":" as a uid when numeric, else a name; no
  USER at all reads as uid 0, kuberuntime `getImageUser`); containerd internal/cri/server/
  container_create.go `generateUserString` ("uid[:gid]" or "name[:gid]"), so the image USER's own
  group is dropped and the gid comes from the image's /etc/passwd unless runAsGroup is set.
- runAsNonRoot: pkg/kubelet/kuberuntime/security_context_others.go `verifyRunAsNonRoot`, whose
  messages are repeated here (the kubelet reports them as CreateContainerConfigError).
- groups: fsGroup, then supplementalGroups (determineEffectiveSecurityContext).
- capabilities: containerd pkg/oci/spec.go `defaultUnixCaps` (v2.0.0: 14 capabilities, the bounding,
  permitted and effective sets of every container), internal/cri/opts/spec_opts.go `WithCapabilities`
  (add ALL: every capability; drop ALL: none; then each added one; then each dropped one removed) and
  `WithoutAmbientCaps` ("Clear all ambient capabilities ... See kubernetes/kubernetes#56374"). A
  process that is not uid 0 therefore execs with no permitted or effective capability (capabilities(7):
  execve clears them for a non-root uid without ambient or file capabilities), whatever `add` says.
- allowPrivilegeEscalation: false sets no_new_privs (pkg/securitycontext/util.go `AddNoNewPrivileges`);
  unset leaves it off. seccompProfile unset is Unconfined (the kubelet's seccompDefault is false unless
  configured).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twin.spec import Where, flag, integer, mapping, strings, text

DEFAULT_CAPS = frozenset(
    {
        "CHOWN",
        "DAC_OVERRIDE",
        "FSETID",
        "FOWNER",
        "MKNOD",
        "NET_RAW",
        "SETGID",
        "SETUID",
        "SETFCAP",
        "SETPCAP",
        "NET_BIND_SERVICE",
        "SYS_CHROOT",
        "KILL",
        "AUDIT_WRITE",
    }
)
# capabilities(7), CAP_CHOWN (0) to CAP_CHECKPOINT_RESTORE (40): what `add: [ALL]` gives on a current kernel.
ALL_CAPS = DEFAULT_CAPS | frozenset(
    [
        "DAC_READ_SEARCH",
        "LINUX_IMMUTABLE",
        "NET_BROADCAST",
        "NET_ADMIN",
        "IPC_LOCK",
        "IPC_OWNER",
        "SYS_MODULE",
        "SYS_RAWIO",
        "SYS_PTRACE",
        "SYS_PACCT",
        "SYS_ADMIN",
        "SYS_BOOT",
        "SYS_NICE",
        "SYS_RESOURCE",
        "SYS_TIME",
        "SYS_TTY_CONFIG",
        "LEASE",
        "AUDIT_CONTROL",
        "MAC_OVERRIDE",
        "MAC_ADMIN",
        "SYSLOG",
        "WAKE_ALARM",
        "BLOCK_SUSPEND",
        "AUDIT_READ",
        "PERFMON",
        "BPF",
        "CHECKPOINT_RESTORE",
    ]
)
SECCOMP = ("RuntimeDefault", "Unconfined")


@dataclass(frozen=True)
class Security:
    """What the container's process is: its user, groups, capabilities and restrictions."""

    user: str  # for podman --user: "uid[:gid]" or "name[:gid]"
    root: bool  # the process runs as uid 0 (a user name other than root counts as non-root)
    groups: tuple[int, ...]  # supplementary groups: fsGroup, then supplementalGroups
    bounding: frozenset[str]  # containerd's capability set, without the CAP_ prefix
    capabilities: frozenset[str]  # what the process holds after exec: the bounding set for root, else none
    no_new_privileges: bool
    read_only_root: bool
    seccomp: str  # RuntimeDefault or Unconfined


def plan_security(
    pod_sc: Mapping[str, Any], container: Mapping[str, Any], image_user: str, label: str, w: Where
) -> Security:
    """The effective security of one container; `label` is the kubelet's `format.Pod`: name_namespace(uid)."""
    sc, at = mapping(container, "securityContext", w), w.at("securityContext")
    pw = Where(w.pod, "spec.securityContext", w.container)

    def pick(key: str) -> int | None:
        own = integer(sc, key, at)
        return own if own is not None else integer(pod_sc, key, pw)

    if flag(sc, "privileged", at):
        at.at("privileged").fail("the twin runs no privileged container; run this one on a real node")
    uid, gid = pick("runAsUser"), pick("runAsGroup")
    image_uid, image_name = _image_user(image_user)
    non_root = flag(sc, "runAsNonRoot", at)
    if non_root is None:
        non_root = flag(pod_sc, "runAsNonRoot", pw)
    if non_root:
        _verify_non_root(uid, image_uid, image_name, label, at)
    if uid is not None:
        user, root = str(uid), uid == 0
    elif image_name:
        user, root = image_name, image_name == "root"
    else:
        user, root = str(image_uid or 0), not image_uid
    if gid is not None:
        user += f":{gid}"
    bounding = capabilities(mapping(sc, "capabilities", at), at.at("capabilities"))
    return Security(
        user=user,
        root=root,
        groups=_groups(pod_sc, pw),
        bounding=bounding,
        capabilities=bounding if root else frozenset(),
        no_new_privileges=flag(sc, "allowPrivilegeEscalation", at) is False,
        read_only_root=flag(sc, "readOnlyRootFilesystem", at) is True,
        seccomp=_seccomp(sc, pod_sc, at, pw),
    )


def _image_user(user: str) -> tuple[int | None, str]:
    """`getUserFromImage`: the image USER's part before ':' as a uid when numeric, else a name."""
    name = user.split(":", 1)[0]
    if not name:
        return None, ""
    return (int(name), "") if name.isdecimal() else (None, name)


def _verify_non_root(uid: int | None, image_uid: int | None, image_name: str, label: str, w: Where) -> None:
    where = f'(pod: "{label}", container: {w.container})'
    if uid is not None:
        if uid == 0:
            w.at("runAsNonRoot").fail(
                f"CreateContainerConfigError: container's runAsUser breaks non-root policy {where}"
            )
        return
    if image_name:
        w.at("runAsNonRoot").fail(
            "CreateContainerConfigError: container has runAsNonRoot and image has non-numeric user "
            f"({image_name}), cannot verify user is non-root {where}"
        )
    if not image_uid:  # no USER, or USER 0
        w.at("runAsNonRoot").fail(
            f"CreateContainerConfigError: container has runAsNonRoot and image will run as root {where}"
        )


def capabilities(caps: Mapping[str, Any], w: Where) -> frozenset[str]:
    """containerd's `WithCapabilities` over its default set (names without CAP_, as the API writes them)."""
    add = {c.upper() for c in strings(caps, "add", w)}
    drop = {c.upper() for c in strings(caps, "drop", w)}
    for name in (add | drop) - ALL_CAPS - {"ALL"}:
        fix = f"write {name.removeprefix('CAP_')}" if name.removeprefix("CAP_") in ALL_CAPS else "see capabilities(7)"
        w.fail(f"{name} is not a capability name as Kubernetes writes them; {fix}")
    held = set(ALL_CAPS if "ALL" in add else DEFAULT_CAPS)
    if "ALL" in drop:
        held.clear()
    return frozenset((held | add) - drop - {"ALL"})


def _groups(pod_sc: Mapping[str, Any], w: Where) -> tuple[int, ...]:
    groups: list[int] = []
    fs_group = integer(pod_sc, "fsGroup", w)
    if fs_group is not None:
        groups.append(fs_group)
    listed = pod_sc.get("supplementalGroups") or []
    if not isinstance(listed, list) or any(isinstance(g, bool) or not isinstance(g, int) for g in listed):
        w.at("supplementalGroups").fail("must be a list of group ids")
    return tuple(dict.fromkeys(groups + listed))


def _seccomp(sc: Mapping[str, Any], pod_sc: Mapping[str, Any], w: Where, pw: Where) -> str:
    own = mapping(sc, "seccompProfile", w)
    profile, at = (own, w) if own else (mapping(pod_sc, "seccompProfile", pw), pw)
    kind = text(profile, "type", at.at("seccompProfile")) or "Unconfined"
    if kind not in SECCOMP:
        at.at("seccompProfile").fail(f"type {kind!r} is not modeled by the twin; use RuntimeDefault or Unconfined")
    return kind
