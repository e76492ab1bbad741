"""One Kubernetes Pod read the way the kubelet reads it, planned for the twin's runner (pure).

`plan(pod, images, objects, host)` takes a pod as the API holds it (metadata and spec; the caller has
filled spec.nodeName and status.podIP, as scheduling and the CNI would) and returns what the runner
turns into podman commands: init containers in order (those with `restartPolicy: Always` are sidecars,
started and kept running), the containers, the volumes to create, the pod's hostnames. It runs nothing:
the image's ENTRYPOINT, CMD, ENV, WORKDIR and USER come from `images`, which the runner backs with
`podman image inspect`. Anything the kubelet would refuse, or the twin cannot stand in for, is a
PodError of one line naming the pod, the container and the field.

What the kubelet does and where it is written (Kubernetes 1.33, containerd 2.0):

- command and args: pkg/kubelet/container/helpers.go `ExpandContainerCommandAndArgs` (`$(VAR)` against
  the kubelet's variables), then containerd internal/cri/opts/spec_opts.go `WithProcessArgs`: a command
  replaces the image's ENTRYPOINT and drops its CMD; args alone replace the CMD; neither: the image's
  (https://kubernetes.io/docs/tasks/inject-data-application/define-command-argument-container/).
- env: twin.env; user, groups, capabilities: twin.security; volumes and mounts: twin.volumes;
  probes: twin.probes.
- workingDir: containerd `container_create.go`: the container's, else the image's WORKDIR, else "/".
- hostnames: pkg/kubelet/kubelet_pods.go `GeneratePodHostNameAndDomain` (spec.hostname or the pod's
  name, cut to 63 characters; with a subdomain, `<hostname>.<subdomain>.<namespace>.svc.<cluster
  domain>`) and `managedHostsFileContent` (/etc/hosts: each pod IP with the FQDN and the hostname, then
  spec.hostAliases); https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/.
- termination message: pkg/kubelet/kuberuntime/kuberuntime_container.go `makeMounts`: a file of mode
  0666 mounted read-write at terminationMessagePath (default /dev/termination-log); the policy
  FallbackToLogsOnError is the runner's to apply when the container fails with an empty file.
- sidecars: https://kubernetes.io/docs/concepts/workloads/pods/sidecar-containers/.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from contract.quantity import QuantityError, parse
from twin.env import Node, PodFacts, container_env, expand, kubelet_env
from twin.probes import Probe, plan_probe
from twin.security import Security, plan_security
from twin.spec import Objects, PodError, Where, flag, integer, items, mapping, string_map, strings, text
from twin.volumes import HostPaths, Mount, VolumePlan, container_path, plan_mounts, plan_volumes

__all__ = ["ContainerPlan", "ImageConfig", "Node", "Objects", "PodError", "PodPlan", "plan"]

TERMINATION_LOG = "/dev/termination-log"  # SetDefaults_Container
TERMINATION_LOG_MODE = 0o666  # makeMounts chmods the file so any user of the container can write it
RESTART_POLICIES = ("Always", "OnFailure", "Never")
MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
HOSTNAME_MAX = 63  # truncatePodHostnameIfNeeded


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an image's config the kubelet and containerd read (podman image inspect's Config)."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str = ""
    user: str = ""

    @classmethod
    def from_inspect(cls, config: Mapping[str, Any]) -> ImageConfig:
        """From the `Config` of `podman image inspect` (Entrypoint, Cmd, Env as NAME=VALUE, WorkingDir, User)."""
        pairs = [str(e).partition("=") for e in config.get("Env") or []]
        return cls(
            entrypoint=tuple(str(a) for a in config.get("Entrypoint") or []),
            cmd=tuple(str(a) for a in config.get("Cmd") or []),
            env={name: value for name, _, value in pairs},
            workdir=str(config.get("WorkingDir") or ""),
            user=str(config.get("User") or ""),
        )


@dataclass(frozen=True)
class ContainerPlan:
    """One container as it will run: its final argv, env, user, capabilities, mounts and probes."""

    name: str
    image: str
    argv: tuple[str, ...]  # ENTRYPOINT-and-CMD as containerd computes them, `$(VAR)` expanded
    env: Mapping[str, str]  # the whole process environment, image's included, in containerd's order
    workdir: str
    security: Security
    mounts: tuple[Mount, ...]
    termination_message_path: str
    termination_message_policy: str  # File or FallbackToLogsOnError
    sidecar: bool = False  # an init container with restartPolicy Always: started, then kept running
    startup: Probe | None = None
    liveness: Probe | None = None
    readiness: Probe | None = None
    ports: tuple[tuple[str, int, str], ...] = ()  # (name, containerPort, protocol)
    tty: bool = False
    stdin: bool = False


@dataclass(frozen=True)
class PodPlan:
    """What the runner creates for one pod."""

    name: str
    namespace: str
    uid: str
    hostname: str  # the containers' hostname (the FQDN with setHostnameAsFQDN)
    subdomain: str
    fqdn: str
    hosts: tuple[tuple[str, tuple[str, ...]], ...]  # /etc/hosts lines past localhost: (ip, names)
    restart_policy: str
    init: tuple[ContainerPlan, ...]  # in order; each runs to success, a sidecar keeps running
    containers: tuple[ContainerPlan, ...]
    volumes: Mapping[str, VolumePlan]
    pod_ips: tuple[str, ...]
    host_network: bool = False
    host_pid: bool = False
    host_ipc: bool = False
    share_process_namespace: bool = False
    termination_grace_period_seconds: int = 30


def plan(
    pod: Mapping[str, Any],
    images: Callable[[str], ImageConfig],
    objects: Objects,
    host: HostPaths,
    *,
    node: Node | None = None,
    cluster_domain: str = "cluster.local",
) -> PodPlan:
    """The pod as the kubelet would run it on `node` (its allocatable, for resourceFieldRef and Memory emptyDirs)."""
    if not isinstance(pod, Mapping):
        raise PodError(f"pod: is a {type(pod).__name__}, not a mapping")
    facts, spec = _facts(pod, node)
    w = facts.where
    hostname, subdomain, fqdn = _hostnames(spec, facts, cluster_domain)
    volumes = plan_volumes(spec, facts, objects, host, _pod_memory_limit(spec, w))
    restart = text(spec, "restartPolicy", w) or "Always"
    if restart not in RESTART_POLICIES:
        w.at("restartPolicy").fail(f"{restart!r} is not one of {', '.join(RESTART_POLICIES)}")
    plans = {
        kind: tuple(
            _container(c, cw.inside(text(c, "name", cw, required=True)), facts, images, objects, volumes, hostname)
            for cw, c in items(spec, kind, w)
        )
        for kind in ("initContainers", "containers")
    }
    names = [c.name for group in plans.values() for c in group]
    if repeated := sorted({n for n in names if names.count(n) > 1}):
        w.fail(f"container names repeat: {', '.join(repeated)}; each must be unique in the pod")
    if not plans["containers"]:
        w.at("containers").fail("is empty; a pod needs at least one container")
    aliases = [
        (text(a, "ip", aw, required=True), strings(a, "hostnames", aw)) for aw, a in items(spec, "hostAliases", w)
    ]
    own = (fqdn, hostname) if subdomain else (hostname,)
    as_fqdn = flag(spec, "setHostnameAsFQDN", w) is True
    if as_fqdn and len(fqdn) > HOSTNAME_MAX + 1:  # kuberuntime_sandbox.go: a kernel hostname holds 64 bytes
        w.at("setHostnameAsFQDN").fail(f"the FQDN {fqdn} is longer than 64 characters; shorten the name or subdomain")
    return PodPlan(
        name=facts.name,
        namespace=facts.namespace,
        uid=facts.uid,
        hostname=fqdn if as_fqdn else hostname,
        subdomain=subdomain,
        fqdn=fqdn,
        hosts=tuple((ip, own) for ip in facts.pod_ips) + tuple(aliases),
        restart_policy=restart,
        init=plans["initContainers"],
        containers=plans["containers"],
        volumes=volumes,
        pod_ips=facts.pod_ips,
        host_network=flag(spec, "hostNetwork", w) is True,
        host_pid=flag(spec, "hostPID", w) is True,
        host_ipc=flag(spec, "hostIPC", w) is True,
        share_process_namespace=flag(spec, "shareProcessNamespace", w) is True,
        termination_grace_period_seconds=integer(spec, "terminationGracePeriodSeconds", w, 30) or 0,
    )


def _facts(pod: Mapping[str, Any], node: Node | None) -> tuple[PodFacts, Mapping[str, Any]]:
    top = Where("(unnamed)", "metadata")
    meta = mapping(pod, "metadata", top)
    name = text(meta, "name", top, required=True)
    namespace = text(meta, "namespace", top) or "default"
    w = Where(f"{namespace}/{name}")
    spec, status = mapping(pod, "spec", Where(w.pod, "")), mapping(pod, "status", Where(w.pod, ""))
    sw = Where(w.pod, "status")
    pod_ips = tuple(text(ip, "ip", iw, required=True) for iw, ip in items(status, "podIPs", sw))
    pod_ips = pod_ips or ((text(status, "podIP", sw),) if status.get("podIP") else ())
    if not pod_ips:
        sw.at("podIP").fail("is not set; give the pod its IP (the twin's network namespace address) before planning")
    host_ips = tuple(text(ip, "ip", iw, required=True) for iw, ip in items(status, "hostIPs", sw))
    host_ips = host_ips or ((text(status, "hostIP", sw),) if status.get("hostIP") else ())
    every = [c for kind in ("containers", "initContainers") for _, c in items(spec, kind, w)]
    facts = PodFacts(
        where=w,
        name=name,
        namespace=namespace,
        uid=text(meta, "uid", Where(w.pod, "metadata")),
        labels=string_map(meta, "labels", Where(w.pod, "metadata")),
        annotations=string_map(meta, "annotations", Where(w.pod, "metadata")),
        node_name=text(spec, "nodeName", w),
        service_account=text(spec, "serviceAccountName", w) or text(spec, "serviceAccount", w) or "default",
        pod_ips=pod_ips,
        host_ips=host_ips,
        containers={c["name"]: c for c in every if isinstance(c.get("name"), str)},
        node=node,
        security_context=mapping(spec, "securityContext", w),
    )
    return facts, spec


def _hostnames(spec: Mapping[str, Any], facts: PodFacts, cluster_domain: str) -> tuple[str, str, str]:
    """(hostname, subdomain, FQDN) as `GeneratePodHostNameAndDomain` makes them."""
    hostname = text(spec, "hostname", facts.where) or facts.name
    if len(hostname) > HOSTNAME_MAX:
        hostname = hostname[:HOSTNAME_MAX].rstrip("-.")
    subdomain = text(spec, "subdomain", facts.where)
    fqdn = f"{hostname}.{subdomain}.{facts.namespace}.svc.{cluster_domain}" if subdomain else hostname
    return hostname, subdomain, fqdn


def _container(
    c: Mapping[str, Any],
    w: Where,
    facts: PodFacts,
    images: Callable[[str], ImageConfig],
    objects: Objects,
    volumes: Mapping[str, VolumePlan],
    hostname: str,
) -> ContainerPlan:
    image_ref = text(c, "image", w, required=True)
    image = images(image_ref)
    env = kubelet_env(facts, c, objects, w)
    sidecar = w.path.startswith("spec.initContainers") and _sidecar(c, w)
    policy = text(c, "terminationMessagePolicy", w) or "File"
    if policy not in MESSAGE_POLICIES:
        w.at("terminationMessagePolicy").fail(f"{policy!r} is not one of {', '.join(MESSAGE_POLICIES)}")
    probes = {
        which: plan_probe(c, which, facts.pod_ips[0], w)
        for which in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    if w.path.startswith("spec.initContainers") and not sidecar and any(probes.values()):
        w.fail("an init container that is not a sidecar cannot have probes")
    return ContainerPlan(
        name=w.container,
        image=image_ref,
        argv=_argv(c, image, env, w),
        env=container_env(image.env, env, hostname),
        workdir=text(c, "workingDir", w) or image.workdir or "/",
        security=plan_security(
            facts.security_context, c, image.user, f"{facts.name}_{facts.namespace}({facts.uid})", w
        ),
        mounts=plan_mounts(c, w, volumes, env),
        termination_message_path=container_path(text(c, "terminationMessagePath", w) or TERMINATION_LOG),
        termination_message_policy=policy,
        sidecar=sidecar,
        startup=probes["startupProbe"],
        liveness=probes["livenessProbe"],
        readiness=probes["readinessProbe"],
        ports=_ports(c, w),
        tty=flag(c, "tty", w) is True,
        stdin=flag(c, "stdin", w) is True,
    )


def _sidecar(c: Mapping[str, Any], w: Where) -> bool:
    policy = text(c, "restartPolicy", w)
    if policy not in ("", "Always"):
        w.at("restartPolicy").fail(f"{policy!r}: an init container's restartPolicy can only be Always (a sidecar)")
    return policy == "Always"


def _argv(c: Mapping[str, Any], image: ImageConfig, env: Mapping[str, str], w: Where) -> tuple[str, ...]:
    """`ExpandContainerCommandAndArgs`, then containerd's `WithProcessArgs` over the image's config."""
    command = tuple(expand(part, env.get) for part in strings(c, "command", w))
    args = tuple(expand(part, env.get) for part in strings(c, "args", w))
    if not command:
        args = args or image.cmd
        command = () if image.entrypoint == ("",) else image.entrypoint
    if not command + args:
        w.fail("no command specified: neither command, args nor the image's ENTRYPOINT or CMD (CreateContainerError)")
    return command + args


def _ports(c: Mapping[str, Any], w: Where) -> tuple[tuple[str, int, str], ...]:
    ports = []
    for pw, p in items(c, "ports", w):
        number = integer(p, "containerPort", pw)
        if number is None or not 0 < number < 65536:
            pw.at("containerPort").fail(f"{number!r} is not a port from 1 to 65535")
        ports.append((text(p, "name", pw), number, text(p, "protocol", pw) or "TCP"))
    return tuple(ports)


def _pod_memory_limit(spec: Mapping[str, Any], w: Where) -> Fraction | None:
    """The pod's memory limit when every container declares one (`ResourceConfigForPod`, `PodLimits`).

    Regular containers and sidecars add up; a regular init container runs beside the sidecars started
    before it; the pod's limit is the larger of the two.
    """
    sidecars, init_peak = Fraction(0), Fraction(0)
    for cw, c in items(spec, "initContainers", w):
        limit = _memory_limit(c, cw)
        if limit is None:
            return None
        if text(c, "restartPolicy", cw) == "Always":
            sidecars += limit
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + limit)
    total = sidecars
    for cw, c in items(spec, "containers", w):
        limit = _memory_limit(c, cw)
        if limit is None:
            return None
        total += limit
    return max(total, init_peak)


def _memory_limit(c: Mapping[str, Any], w: Where) -> Fraction | None:
    limits = mapping(mapping(c, "resources", w), "limits", w.at("resources"))
    if "memory" not in limits:
        return None
    try:
        return parse(limits["memory"])
    except QuantityError as e:
        w.at("resources.limits.memory").fail(str(e))
