"""The `podman run` command line for one planned container (pure).

Every option is chosen so that podman (4.3, Debian 12's, with runc) starts the process the kubelet and
containerd would start; where podman's default differs, the option says so explicitly:

- `--entrypoint '["a","b"]'`: the whole argv as a JSON list and no command after the image. Podman
  parses a JSON list as the entrypoint (pkg/specgenutil/specgen.go) and uses the image's CMD only when
  no entrypoint was given (pkg/specgen/generate/oci.go `makeCommand`), so the image's CMD is dropped,
  as containerd drops it once a command is set.
- `--unsetenv-all --http-proxy=false` and every variable with `--env`: podman would otherwise add its
  own defaults (`container=podman`, its PATH and TERM, pkg/specgen/generate/container.go) and the
  host's proxy variables; the plan's env is already the whole environment containerd builds.
- `--cap-drop ALL` and `--cap-add` for each capability the process holds: for a user other than root
  podman puts every `--cap-add` into the ambient, permitted and effective sets (pkg/specgen/generate/
  security_linux.go), which containerd never does. A non-root container's plan holds none, so it gets
  `--cap-drop ALL` alone: no capability, as under Kubernetes. (Its bounding set is then empty where
  containerd's keeps the default set; only a setuid or file-capability binary could tell, and not
  when allowPrivilegeEscalation is false.)
- `--read-only --read-only-tmpfs=false`: podman would mount tmpfs on /tmp, /run and /var/tmp of a
  read-only container; readOnlyRootFilesystem does not.
- a Memory emptyDir without a shared source is `--tmpfs PATH:rw,exec,notmpcopyup,mode=1777,size=N`:
  the kubelet's tmpfs is mounted with only size= (exec allowed), and it starts empty where podman
  would copy the image's files in. Such a tmpfs is private to the container; give the volume a
  source (a directory the runner mounted a tmpfs on) when containers of the pod share it.
- no `--init`: a container's own process is PID 1 under the kubelet; `--pull=never`: the twin's images
  are built here, no registry is reachable.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field

from twin.pods import ContainerPlan
from twin.spec import PodError
from twin.volumes import Mount


@dataclass(frozen=True)
class PodContext:
    """Where the runner put the pod: what the command needs beyond the container's plan."""

    name: str  # the podman container's name
    network: str  # "ns:/run/netns/<pod>" (the pod's network namespace) or "host"
    termination_log: str  # the host file mounted read-write at the container's termination message path
    sources: Mapping[str, str] = field(default_factory=dict)  # volume name -> the host directory holding it
    hostname: str = ""  # the pod plan's hostname ("" keeps podman's)
    hosts: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the pod plan's /etc/hosts lines: (ip, names)
    detach: bool = True
    # dnsPolicy ClusterFirst: the cluster's DNS server, its search path and options (the runner's).
    dns: str = ""
    dns_search: tuple[str, ...] = ()
    dns_options: tuple[str, ...] = ()
    ipc: str = ""  # e.g. "container:<pod's first container>" to share one IPC namespace, as a pod does
    pid: str = ""  # e.g. "container:<...>" for shareProcessNamespace


def podman_argv(c: ContainerPlan, ctx: PodContext) -> list[str]:
    """`podman run ...` for the container, ready for subprocess (no shell)."""
    argv = ["podman", "run", "--name", ctx.name, "--pull=never", "--network", ctx.network]
    argv += ["--detach"] if ctx.detach else []
    argv += ["--hostname", ctx.hostname] if ctx.hostname else []
    argv += [arg for ip, names in ctx.hosts for name in names for arg in ("--add-host", f"{name}:{ip}")]
    argv += ["--dns", ctx.dns] if ctx.dns else []
    argv += [arg for domain in ctx.dns_search for arg in ("--dns-search", domain)]
    argv += [arg for option in ctx.dns_options for arg in ("--dns-option", option)]
    argv += ["--ipc", ctx.ipc] if ctx.ipc else []
    argv += ["--pid", ctx.pid] if ctx.pid else []
    sec = c.security
    argv += ["--user", sec.user, "--workdir", c.workdir]
    argv += [arg for gid in sec.groups for arg in ("--group-add", str(gid))]
    argv += ["--unsetenv-all", "--http-proxy=false"]
    argv += [arg for name, value in c.env.items() for arg in ("--env", f"{name}={value}")]
    argv += ["--cap-drop", "ALL"] + [arg for cap in sorted(sec.capabilities) for arg in ("--cap-add", cap)]
    argv += ["--security-opt", "no-new-privileges"] if sec.no_new_privileges else []
    argv += ["--security-opt", "seccomp=unconfined"] if sec.seccomp == "Unconfined" else []
    argv += ["--read-only", "--read-only-tmpfs=false"] if sec.read_only_root else []
    # containerd mounts parents before children (internal/cri/opts/spec_opts.go `orderedMounts`).
    for mount in sorted(c.mounts, key=lambda m: m.path.count("/")):
        argv += _mount(mount, ctx, c.name)
    argv += ["--volume", _bind(ctx.termination_log, c.termination_message_path, read_only=False, where=c.name)]
    argv += ["--tty"] if c.tty else []
    argv += ["--interactive"] if c.stdin else []
    return [*argv, "--entrypoint", json.dumps(list(c.argv)), c.image]


def _mount(m: Mount, ctx: PodContext, container: str) -> list[str]:
    source = ctx.sources.get(m.volume)
    if source is None and m.tmpfs and not m.sub_path:
        options = ["ro" if m.read_only else "rw", "exec", "notmpcopyup", "mode=1777"]
        options += [f"size={m.tmpfs_size}"] if m.tmpfs_size else []
        return ["--tmpfs", f"{m.path}:{','.join(options)}"]
    if source is None:
        raise PodError(f"container {container}: volume {m.volume}: the runner gave it no host directory")
    path = posixpath.join(source, m.sub_path) if m.sub_path else source
    return ["--volume", _bind(path, m.path, read_only=m.read_only, where=container)]


def _bind(source: str, target: str, *, read_only: bool, where: str) -> str:
    if ":" in source or ":" in target or "," in target:
        raise PodError(f"container {where}: {source} -> {target}: podman's --volume cannot take ':' or ',' in a path")
    return f"{source}:{target}:ro" if read_only else f"{source}:{target}"
