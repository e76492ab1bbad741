"""Render a resolved job into Kubernetes objects (their shapes: gkr.manifests).

The pod settings that depend on the machine (accelerator selector, GPU
toleration, RDMA networks, driver and gIB mounts, NCCL environment) come from
the fleet's pool and machine definitions, never from literals.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from contract import names
from gkr import groups, manifests, roles
from gkr.resolved import Resolved
from gkr.spec import Ray

CHECKPOINT_DIR = "/checkpoints"
DATA_DIR = "/data"
RENDEZVOUS_PORT = 29500
NODE_CHECKS = ("kernel-log", "gpu-state", "nccl", "rdma-interfaces", "shm")
LEVEL_LABELS = dict(zip(("block", "subblock", "host"), names.TOPOLOGY_LEVELS, strict=False))
# Kueue's annotation pairing two pod sets in one topology domain (apis/kueue/v1beta2/topology_types.go), and the
# name gkr gives an RL job's pair: any name but a number (tas_validation.go validatePodSetGroupNameAnnotation).
PODSET_GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"
ROLE_GROUP = "roles"
# A failed RayJob is retried on a new RayCluster (KubeRay v1.7.0 rayjob_controller.go
# checkBackoffLimitAndUpdateStatusIfNeeded: Failed becomes Retrying in the same status update, so Kueue never
# sees Failed; the Retrying branch deletes the cluster and starts again from New). Kueue keeps the admission:
# its RayJob integration finishes the Workload only on Failed or Complete and the RayJob stays unsuspended
# (Kueue v0.19.2 pkg/controller/jobs/rayjob/rayjob_controller.go Finished, IsSuspended), and the new cluster
# is built from spec.rayClusterSpec, where Kueue wrote the admitted flavor's selectors (RunWithPodSetsInfo).
# The retry resets the RayJob's RayClusterStatus, so PodsReady turns false and waitForPodsReady's
# recoveryTimeout (fleet's kueue.py) bounds how long the new cluster may take. Two retries: a Ray head lost
# (the one failure the trainer cannot ride out in place: no GCS fault tolerance, README) costs a cluster
# restart from the last checkpoint instead of a new place in the queue, twice in a run's life; a deterministic
# failure (a bad command) costs two cluster starts before it is reported.
DEFAULT_BACKOFF_LIMIT = 2

# Google's NCCL environment for gIB on A3 Ultra. Every GPU process gets it the way Google's
# references do (container-engine-accelerators gpudirect-rdma/nccl-test.yaml, gpu-recipes
# training/a3ultra/*/templates/workload-job.yaml): source the script the nccl-rdma-installer puts
# on the node, then override the socket interfaces and add the A3 Ultra tuner config. The two
# exports come after the script because it sets NCCL_SOCKET_IFNAME itself (the recipes override it).
NCCL_ENV_SCRIPT = "/usr/local/gib/scripts/set_nccl_env.sh"
NCCL_AFTER_SCRIPT = (
    ("NCCL_SOCKET_IFNAME", "eth0,eth1"),
    ("NCCL_TUNER_CONFIG_PATH", "/usr/local/gib/configs/tuner_config_a3u.txtpb"),
)

# GCS FUSE (GKE docs, cloud-storage-fuse-csi-driver-sidecar and -perf): a GPU pod owns its machine,
# so its sidecar gets no CPU, memory or ephemeral-storage limit ("0") and never throttles a
# checkpoint write (gpu-recipes a3ultra jobset and inference templates set the same).
GCSFUSE_UNLIMITED = {f"gke-gcsfuse/{r}-limit": "0" for r in ("cpu", "memory", "ephemeral-storage")}
# Checkpoints: other pods create files while this one runs, so no negative cache (a new shard is
# seen at once); names, once written, do not change (one directory per step): metadata cached for
# the mount's life; restores read each shard once, in parallel, through the file cache.
CHECKPOINT_MOUNT = (
    "implicit-dirs,metadata-cache:negative-ttl-secs:0,metadata-cache:ttl-secs:-1,"
    "metadata-cache:stat-cache-max-size-mb:-1,metadata-cache:type-cache-max-size-mb:-1,"
    "file-cache:max-size-mb:-1,file-cache:cache-file-for-range-read:true,file-cache:enable-parallel-downloads:true"
)
# Datasets are read-only and do not change under a job: every cache on, no expiry. The file cache
# lives in the sidecar's emptyDir, on the node's ephemeral storage (local SSD on A3 Ultra).
DATASET_MOUNT = (
    "implicit-dirs,metadata-cache:ttl-secs:-1,metadata-cache:stat-cache-max-size-mb:-1,"
    "metadata-cache:type-cache-max-size-mb:-1,file-cache:max-size-mb:-1,"
    "file-cache:cache-file-for-range-read:true,file-cache:enable-parallel-downloads:true"
)


DOWNWARD = (
    (names.NODE_NAME_ENV, "spec.nodeName"),
    ("POD_NAME", "metadata.name"),
    ("POD_NAMESPACE", "metadata.namespace"),
)
# Families of variables no job may set, beyond those this module renders: set_nccl_env.sh exports
# NCCL settings gkr does not list, and MERIDIAN_ names are how the platform talks to the trainer.
RESERVED_ENV_PREFIXES = ("NCCL_", "MERIDIAN_")
# ...except NCCL's debugging controls (NCCL's "Environment Variables" reference, Debugging: NCCL_DEBUG,
# NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE): they change what NCCL logs, not how it talks, and are how a
# user debugs a collective. TORCH_DISTRIBUTED_DEBUG and TORCH_NCCL_* are outside the reserved families;
# any variable this module renders itself is still refused (checks._shadowed_env).
USER_NCCL_ENV = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"})
# Where the preflight init container leaves its verdict; the kubelet copies it into the pod's
# status, which Warden reads (a tenant cannot write pod status, the kubelet of spec.nodeName does).
TERMINATION_LOG = "/dev/termination-log"
# The init container sets PATH for the host's driver tools (nvidia-smi in /usr/local/nvidia/bin), which
# replaces the image's own: the image's virtualenv, where `preflight` is installed, goes first again.
PREFLIGHT_PATH = ":".join((names.IMAGE_VENV_BIN, "/usr/local/nvidia/bin", "/usr/local/bin", "/usr/bin", "/bin"))
# The kernel-log check reads dmesg, which needs CAP_SYSLOG where kernel.dmesg_restrict=1. containerd gives
# a non-root process none of a pod's added capabilities as effective ones: its CRI clears the ambient set
# (kubernetes/kubernetes#56374, containerd/cri#808; KEP-2763, kubernetes/enhancements#2763, is still open),
# and the image runs as UID 1000. So this container alone runs as root, with every capability dropped but
# SYSLOG and no privilege escalation. Its root file system is read-only: it writes only TERMINATION_LOG, a file the
# kubelet creates in the pod's directory and bind-mounts there (pkg/kubelet/kuberuntime makeMounts).
PREFLIGHT_SECURITY = {
    "runAsUser": 0,
    "runAsNonRoot": False,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"], "add": list(names.TEAM_CAPABILITIES)},
}


def nccl_prelude(required: bool = True) -> str:
    """The one shell fragment that loads the NCCL environment before a GPU process starts.

    It ends in a command, so it chains with `&&`: KubeRay runs a Ray container's own command
    before `ray start` in the same bash (`<command> && ulimit -n 65536; ray start ...`), so
    the raylet and every Ray worker inherit what it exports; Jobs run it before the command.
    `required`: a pod whose node lacks the script stops with the reason; preflight instead
    goes on and reports it in its `nccl` check (and on the Node, for Warden).
    """
    exports = " ".join(f"{key}={value}" for key, value in NCCL_AFTER_SCRIPT)
    missing = (
        f"{{ echo 'cannot source {NCCL_ENV_SCRIPT}: is the nccl-rdma-installer DaemonSet on this node?' >&2; exit 1; }}"
        if required
        else "true"
    )
    return f"{{ source {NCCL_ENV_SCRIPT} && export {exports}; }} || {missing}"


def _interfaces(r: Resolved) -> str:
    nics = [
        {"interfaceName": "eth0", "network": "default"},
        {"interfaceName": "eth1", "network": names.GVNIC_NETWORK_OBJECT},
    ]
    nics += [
        {"interfaceName": f"eth{i + 2}", "network": names.rdma_network_object(i)} for i in range(r.machine.rdma_nics)
    ]
    return json.dumps(nics, separators=(",", ":"))


def _gcsfuse(name: str, bucket: str, options: str, read_only: bool = False) -> dict[str, Any]:
    csi: dict[str, Any] = {
        "driver": "gcsfuse.csi.storage.gke.io",
        "volumeAttributes": {"bucketName": bucket, "mountOptions": options},
    }
    if read_only:
        csi["readOnly"] = True
    return {"name": name, "csi": csi}


@dataclass
class _Pod:
    """A pod template's parts as they are filled in, in the order they appear in the rendered pod."""

    env: list[dict[str, Any]]
    annotations: dict[str, str] = field(default_factory=dict)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    tolerations: list[dict[str, str]] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    security_context: dict[str, Any] = field(default_factory=dict)  # the pod's
    library_path: str = ""


def pod(r: Resolved, gpu: bool, head: bool = False) -> dict[str, Any]:
    """Everything a pod template needs; `gpu` for the pods that hold the job's GPUs, `head` for the Ray head."""
    spec = r.spec
    # Where the pod runs, for the trainer's NCCL failure Events (Warden counts them per node).
    env = [{"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}} for name, path in DOWNWARD]
    parts = _Pod(env + [{"name": k, "value": v} for k, v in sorted(spec.env.items())])
    if gpu:
        _gpu_node(r, parts)
    elif r.cpu_pool is not None:  # resolve refuses CPU pods in a region without a CPU pool
        # A CPU pool only, with no GPU toleration: Kueue admits it on the pool's flavor, never on H200 nodes. The
        # Ray head goes to the region's CPU pool; a CPU job's pods to the one it resolved to (`pool:`).
        parts.node_selector[names.NODE_POOL_LABEL] = r.cpu_pool.name if head else r.pool.name
    cpus, memory = (spec.ray.head_cpus, spec.ray.head_memory_gib) if head else (r.cpus, r.memory_gib)
    _storage(r, parts, gpu, memory)
    resources: dict[str, Any] = {
        "requests": {"cpu": str(cpus), "memory": f"{memory}Gi"},
        "limits": {"memory": f"{memory}Gi"},
    }
    if gpu:
        resources["requests"][names.GPU_RESOURCE] = str(spec.gpus_per_pod)
        resources["limits"][names.GPU_RESOURCE] = str(spec.gpus_per_pod)
    init = [_preflight(r, parts.mounts, parts.library_path)] if gpu and spec.preflight else []
    return {
        "labels": {names.TEAM_LABEL: r.team.name, names.JOB_LABEL: spec.name},
        "annotations": parts.annotations,
        "service_account": names.TRAINER_KSA,
        "node_selector": parts.node_selector,
        "tolerations": parts.tolerations,
        "init_containers": init,
        "image": r.image,
        "command": [nccl_prelude()] if gpu and r.machine.rdma_nics > 0 else [],
        "env": parts.env,
        "resources": resources,
        "mounts": parts.mounts,
        "volumes": parts.volumes,
        "ports": [],
        "spec_extra": {},
        "security_context": parts.security_context,
    }


def _gpu_node(r: Resolved, parts: _Pod) -> None:
    """A GPU pod: its machine's selector and taints, the driver (and gIB with RDMA) from the host, its placement."""
    machine = r.machine
    # The pool as well as the accelerator: Kueue matches a pod's nodeSelector, reduced to each flavor's own label
    # keys, against that flavor's nodeLabels (GKE's node-pool label, fleet's kueue.py), and with whenCanBorrow
    # MayStopSearch (v1beta2's default) the first flavor that fits wins (Kueue v0.19.2
    # pkg/scheduler/flavorassigner/flavorassigner.go checkFlavorForPodSets, flavorSelector, findFlavorForPodSets;
    # test "multiple flavors, fits a node selector"). The accelerator alone matches every H200 flavor: a job that
    # asked for a flex-start pool would take the reservation's, and its ProvisioningRequest (the AdmissionCheck is
    # on the flex-start flavor only) would never be made.
    parts.node_selector[names.NODE_POOL_LABEL] = r.pool.name
    parts.node_selector[names.ACCELERATOR_LABEL] = str(machine.gpu_type)
    parts.tolerations += [
        {"key": names.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
        names.IMPENDING_TERMINATION_TOLERATION,
    ]
    if r.pool.flex_start:
        parts.tolerations.append(names.QUEUED_TOLERATION)
    parts.volumes.append({"name": "nvidia", "hostPath": {"path": names.NVIDIA_HOST_PATH}})
    # Host paths read-only: a pod that could write them would replace the next tenant's driver libraries.
    parts.mounts.append({"name": "nvidia", "mountPath": "/usr/local/nvidia", "readOnly": True})
    parts.library_path = "/usr/local/nvidia/lib64"
    if machine.rdma_nics > 0:
        parts.annotations[names.DEFAULT_INTERFACE_ANNOTATION] = "eth0"
        parts.annotations[names.INTERFACES_ANNOTATION] = _interfaces(r)
        parts.volumes.append({"name": "gib", "hostPath": {"path": names.GIB_HOST_PATH}})
        parts.mounts.append({"name": "gib", "mountPath": "/usr/local/gib", "readOnly": True})
        parts.library_path += ":/usr/local/gib/lib64"
        parts.env.append({"name": "NCCL_NET", "value": "gIB"})
    parts.env.insert(0, {"name": "LD_LIBRARY_PATH", "value": parts.library_path})
    if r.spec.topology is not None:
        topology = r.spec.topology
        parts.annotations[f"kueue.x-k8s.io/podset-{topology.mode}-topology"] = LEVEL_LABELS[topology.level]
        parts.annotations.update(group_slices(r))


def _storage(r: Resolved, parts: _Pod, gpu: bool, memory: int) -> None:
    """Shared memory, the team's checkpoint folder and the datasets, and what the trainer reads about the job."""
    spec = r.spec
    # Memory-backed /dev/shm for data loaders and NCCL's shared-memory transport (counts against the pod's memory).
    parts.volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{max(1, memory // 2)}Gi"}})
    parts.mounts.append({"name": "shm", "mountPath": "/dev/shm"})
    if spec.checkpoint:
        # Only the team's managed folder is mounted, and only its account may use it: run names
        # resolve inside it, so two teams' runs of the same name never meet.
        only_dir = names.team_prefix(r.team.name).rstrip("/")
        bucket = r.region.checkpoint_bucket
        parts.volumes.append(_gcsfuse("checkpoints", bucket, f"{CHECKPOINT_MOUNT},only-dir={only_dir}"))
        parts.mounts.append({"name": "checkpoints", "mountPath": CHECKPOINT_DIR})
        parts.env.append({"name": names.CHECKPOINT_DIR_ENV, "value": CHECKPOINT_DIR})
        # The team's folder in every region's bucket: the trainer resumes from nothing else (issue 27).
        roots = [f"gs://{region.checkpoint_bucket}/{only_dir}/" for region in r.registry.regions]
        parts.env.append({"name": names.CHECKPOINT_ROOTS_ENV, "value": ",".join(roots)})
    parts.env += trainer_env(r)
    for index, dataset in enumerate(spec.datasets):
        parts.volumes.append(_gcsfuse(f"dataset-{index}", dataset, DATASET_MOUNT, read_only=True))
        parts.mounts.append({"name": f"dataset-{index}", "mountPath": f"{DATA_DIR}/{dataset}", "readOnly": True})
    if spec.checkpoint or spec.datasets:
        parts.annotations["gke-gcsfuse/volumes"] = "true"
        # The images run as IMAGE_UID; the GCS FUSE driver takes the pod's fsGroup (it declares VOLUME_MOUNT_GROUP)
        # and mounts with gid=<fsGroup>, file-mode=664, dir-mode=775. Without it gcsfuse's 0644/0755 leave the
        # bucket writable by root alone and the trainer cannot write a checkpoint (gcs-fuse-csi-driver v1.24.0,
        # pkg/csi_driver/utils.go parseRequestArguments; found by make twin).
        parts.security_context["fsGroup"] = names.IMAGE_GID
        if gpu:  # a CPU pod shares its node: the sidecar keeps GKE's default limits there
            parts.annotations.update(GCSFUSE_UNLIMITED)


def group_slices(r: Resolved) -> dict[str, str]:
    """Kueue TAS slices: each replica group of several pods inside one sub-block, wherever the job lands.

    KEP-2724 (Kueue Topology Aware Scheduling, "PodSet Slice"): `podset-slice-size` pods at a time
    are placed in one domain of `podset-slice-required-topology`; the worker pod set (groups and
    spares alike) is a whole number of groups, as Kueue requires. A group's all-gathers then stay
    under one sub-block switch, and so do a spare's when it stands in for a group. A group inside one
    pod is on one node already; a job held to one host has nothing to slice.
    """
    shape = groups.shape(r.spec)
    topology = r.spec.topology
    if shape is None or topology is None or topology.level == "host" or shape[1] <= r.spec.gpus_per_pod:
        return {}
    return {
        "kueue.x-k8s.io/podset-slice-required-topology": LEVEL_LABELS["subblock"],
        "kueue.x-k8s.io/podset-slice-size": str(shape[1] // r.spec.gpus_per_pod),
    }


def role_group(r: Resolved) -> str | None:
    """The Kueue pod-set group that holds an RL job's two GPU roles in one topology domain, or None.

    Each worker group is a PodSet and Kueue finds each its own domain; `kueue.x-k8s.io/podset-group-name`
    on both makes it place the pair in one (Kueue v0.19.2 pkg/cache/scheduler/tas_flavor_snapshot.go
    FindTopologyAssignmentsForFlavor, findLeaderAndWorkers), so the weight sync stays under one block's
    switches. Only where Kueue's webhook takes the pair (`role_group_refusal`).
    """
    asked = r.generators is not None and r.spec.topology is not None and r.spec.gpus_per_pod > 0
    return ROLE_GROUP if asked and role_group_refusal(r) is None else None


def role_group_refusal(r: Resolved) -> str | None:
    """Why Kueue would refuse an RL job's two GPU roles as one pod-set group, or None (also when there is no pair).

    Kueue v0.19.2 pkg/controller/jobframework/tas_validation.go, called by the RayJob webhook
    (pkg/controller/jobs/raycluster/common.go ValidateTopologyRequest): ValidatePodSetGroupingTopology wants
    exactly two pod sets, one of them of a single pod, with the same required or preferred topology (both
    roles get the job's, `_gpu_node`); ValidateTASPodSetRequest forbids the group name beside slice
    annotations (a trainer whose groups span pods, `group_slices`). A pair held to one host must fit one.
    """
    generators, topology = r.generators, r.spec.topology
    if generators is None or topology is None or not r.spec.gpus_per_pod:
        return None
    trainer = replace(r, spec=replace(r.spec, roles=None))
    if group_slices(trainer):
        return (
            "Kueue pairs no pod set that is sliced into sub-blocks, as the trainer's replica groups of several "
            "pods are; use groups of one pod to pair the roles"
        )
    if 1 not in (trainer.worker_pods, generators.spec.pods):
        return "Kueue pairs two pod sets in one domain only when one of them is a single pod; give one role 1 pod"
    if topology.level == "host" and trainer.gpus + generators.gpus > r.machine.gpus:
        return f"both roles' {trainer.gpus + generators.gpus} GPUs do not fit one host; use a wider level"
    return None


def trainer_env(r: Resolved) -> list[dict[str, Any]]:
    """What the trainer reads about the job as a whole, on every pod of it: the Ray head runs the
    driver, which forms the groups and reports MFU; the workers hold the GPUs.

    The peak of the job's GPU machine (MFU's denominator), and the replica-group shape when the
    job sets one (else the trainer's own ft.replica_groups decides, as before).
    """
    if r.spec.gpus_per_pod == 0:
        return []
    env: list[dict[str, Any]] = [{"name": names.PEAK_TFLOPS_ENV, "value": f"{r.machine.peak_bf16_tflops:g}"}]
    shape = groups.shape(r.spec)
    if shape is not None:
        env += [
            {"name": names.REPLICA_GROUPS_ENV, "value": str(shape[0])},
            {"name": names.GROUP_SIZE_ENV, "value": str(shape[1])},
        ]
    return env


def _preflight(r: Resolved, mounts: list[dict[str, Any]], library_path: str) -> dict[str, Any]:
    """Node-local checks before the job's container starts, in the environment the job will have."""
    checks = [arg for check in NODE_CHECKS for arg in ("--check", check)]
    args = [a for a in r.machine.preflight.args(r.nodes) if not a.startswith(("--min-tflops", "--min-busbw"))]
    # No --annotate: the team's account may not patch Nodes. A failure leaves a structured
    # termination message instead, which Warden reads from the pod's status.
    command = shlex.join(["preflight", "run", *checks, *args, "--termination-log", TERMINATION_LOG])
    env = [
        {"name": names.NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "PATH", "value": PREFLIGHT_PATH},
        {"name": "LD_LIBRARY_PATH", "value": library_path},
    ]
    if r.machine.rdma_nics:
        env.append({"name": "NCCL_NET", "value": "gIB"})
        command = f"{nccl_prelude(required=False)}; exec {command}"
    else:
        command = f"exec {command}"
    return {
        "name": "preflight",
        "image": r.image,
        "command": ["bash", "-c", command],
        "env": env,
        "securityContext": copy.deepcopy(PREFLIGHT_SECURITY),
        "volumeMounts": [m for m in mounts if m["name"] in ("nvidia", "gib", "shm")],
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _busbw_threshold(r: Resolved) -> str:
    """The catalog's all-reduce threshold for this job: within one node, or across nodes."""
    return next(a for a in r.machine.preflight.args(r.nodes) if a.startswith("--min-busbw"))


def _job_command(r: Resolved) -> list[str]:
    """The indexed Job's command: the NCCL environment, the collective check across pods, then the user's command."""
    steps = []
    if r.spec.gpus_per_pod and r.machine.rdma_nics:
        steps.append(nccl_prelude())
    if r.spec.preflight and r.spec.gpus_per_pod and r.spec.pods > 1:
        steps.append(f"RANK=$JOB_COMPLETION_INDEX preflight run --check allreduce {_busbw_threshold(r)}")
    steps.append(f"exec {shlex.join(r.command)}")
    return ["bash", "-c", " && ".join(steps)]


def _ray_entrypoint(r: Resolved) -> str:
    """The RayJob's entrypoint: the all-reduce across every GPU worker pod (placed by Ray), then the user's command.

    Every GPU pod: the spares' (a replacement lands there) and, in an RL job, the generators' as well as the
    trainer's (the weight sync crosses roles, and a bad node anywhere stalls the run). `preflight.ray_collective`
    places one bundle of `--gpus-per-pod` GPUs per pod with Ray's SPREAD strategy (bundles on distinct nodes as
    far as they go: Ray docs, "Placement Groups", strategies); roles of different sizes take the smaller.
    """
    # The entrypoint is already a shell line: a string command goes in as written.
    command = r.spec.command if isinstance(r.spec.command, str) else shlex.join(r.command)
    spares = groups.spares(r.spec) if r.spare_pods else 0
    if spares:  # the trainer's supervisor holds them as its replacement groups (groups.py)
        command = f"{command} {groups.SPARE_OVERRIDE}{spares}"
    pods, gpus = r.worker_pods, r.spec.gpus_per_pod
    generators = r.generators
    if generators is not None and generators.spec.gpus_per_pod:
        pods, gpus = pods + generators.spec.pods, min(gpus, generators.spec.gpus_per_pod)
    if not (r.spec.preflight and gpus and pods > 1):
        return command
    return f"python -m preflight.ray_collective --pods {pods} --gpus-per-pod {gpus} {_busbw_threshold(r)} && {command}"


def _rl_env(r: Resolved, head: bool) -> list[dict[str, Any]]:
    """An RL job's engine count, the trainer's rl.generators, where the group shape goes (the head, whose
    driver starts the generator actors, and the trainer's workers); on the head also each engine's GPUs,
    which the driver asks of each actor in meridian_generator units."""
    if r.spec.roles is None:
        return []
    env = [{"name": names.GENERATORS_ENV, "value": str(roles.engines(r.spec))}]
    if head:
        env.append({"name": names.TENSOR_PARALLEL_ENV, "value": str(r.spec.roles.generators.tensor_parallel)})
    return env


def _role_groups(r: Resolved, trainer: dict[str, Any]) -> list[dict[str, Any]]:
    """The RayJob's worker groups: `workers`, or with roles one per role (gkr/roles.py).

    Each role's group gets a Ray custom resource (one unit per GPU, per CPU on CPU pods) that the
    driver's actors ask for to land on their role, and MERIDIAN_ROLE; of the workers, the trainer's
    alone have the replica-group variables and the engine count (`_rl_env`): its pod is the plain
    job's. Every pod of both roles selects the job's node pool (`pod`): Kueue gives each PodSet a flavor
    of its own, and a flavor is a pool (its nodeLabels), so the selector is what keeps the weight
    sync on one zone's RDMA network; with a topology, `role_group` pairs them in one domain as well.
    """
    generators = r.generators
    if generators is None:
        return [manifests.worker_group("workers", r.worker_pods, {}, trainer)]
    out, group = [], role_group(r)
    for role, part, worker in (
        (roles.TRAINER, r, trainer),
        (roles.GENERATORS, generators, pod(generators, gpu=generators.spec.gpus_per_pod > 0)),
    ):
        units = part.spec.gpus_per_pod or part.cpus
        env = [{"name": names.ROLE_ENV, "value": role}]
        if role == roles.GENERATORS:
            assert r.spec.roles is not None
            env.append({"name": names.TENSOR_PARALLEL_ENV, "value": str(r.spec.roles.generators.tensor_parallel)})
        else:
            env += _rl_env(r, head=False)
        worker["env"] = worker["env"] + env
        if group is not None:
            worker["annotations"] = {**worker["annotations"], PODSET_GROUP_ANNOTATION: group}
        # KubeRay hands rayStartParams to `ray start` through a shell: the JSON goes quoted, its quotes escaped.
        resources = json.dumps({names.ROLE_RESOURCES[role]: units}).replace('"', '\\"')
        pods = part.worker_pods if role == roles.TRAINER else part.spec.pods
        out.append(manifests.worker_group(role, pods, {"resources": f'"{resources}"'}, worker))
    return out


def backoff_limit(ray: Ray) -> int:
    """The RayJob's retries: as given, else DEFAULT_BACKOFF_LIMIT, none in interactive mode (KubeRay v1.7.0
    ray-operator/controllers/ray/utils/validation.go ValidateRayJobSpec refuses retries there, kuberay#3525)."""
    if ray.backoff_limit is not None:
        return ray.backoff_limit
    return 0 if ray.interactive else DEFAULT_BACKOFF_LIMIT


def render(r: Resolved) -> list[dict[str, Any]]:
    spec = r.spec
    labels = {names.QUEUE_LABEL: r.queue, names.PRIORITY_LABEL: r.priority, names.TEAM_LABEL: r.team.name}
    meta = manifests.metadata(spec.name, r.namespace, labels)
    whole, r = r, replace(r, spec=replace(spec, roles=None))  # with roles, `r` below is the trainer's group
    worker = pod(r, gpu=spec.gpus_per_pod > 0)
    pods = r.worker_pods  # with the spare groups' workers (groups.py): one gang for Kueue
    if spec.kind == "job":
        rendezvous = [
            {"name": "MASTER_ADDR", "value": f"{spec.name}-0.{spec.name}"},
            {"name": "MASTER_PORT", "value": str(RENDEZVOUS_PORT)},
            {"name": "WORLD_SIZE", "value": str(spec.pods)},
        ]
        worker["env"] = worker["env"] + rendezvous
        worker["ports"] = [{"name": "rendezvous", "containerPort": RENDEZVOUS_PORT}]
        worker["spec_extra"] = {"subdomain": spec.name, "restartPolicy": "Never"}
        return manifests.indexed_job(meta, pods, worker, _job_command(r))
    head = pod(r, gpu=False, head=True)
    head["env"] = head["env"] + _rl_env(whole, head=True)
    # rayVersion picks KubeRay's probes: without it (or below 2.53) they run wget, which the trainer image lacks,
    # so no Ray pod turns Ready and KubeRay never submits the job (KubeRay v1.7.0 pod.go; found by make twin).
    if spec.kind == "rayjob":  # the RL roles' worker groups (`_role_groups`) add to `worker`
        cluster = manifests.ray_cluster_spec(names.RAY_VERSION, head, _role_groups(whole, worker))
        return [manifests.rayjob(meta, _rayjob_settings(whole), cluster)]
    workers = manifests.worker_group("workers", pods, {}, worker)
    return [manifests.raycluster(meta, manifests.ray_cluster_spec(names.RAY_VERSION, head, [workers]))]


def _rayjob_settings(r: Resolved) -> dict[str, Any]:
    """The RayJob's own spec before its cluster: entrypoint, shutdown, retries, deadline, submission mode."""
    ray = r.spec.ray
    return {
        "entrypoint": _ray_entrypoint(r),
        "shutdownAfterJobFinishes": ray.shutdown_after_finish,
        "backoffLimit": backoff_limit(ray),
        "activeDeadlineSeconds": ray.deadline_seconds,
        "submissionMode": "InteractiveMode" if ray.interactive else "K8sJobMode",
    }


def _env_names(value: Any, containers: bool = False) -> Iterator[str]:
    """Names of the env entries of every main container below `value` (init containers get no user env)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "env" and containers and isinstance(item, list):
                yield from (str(e["name"]) for e in item if isinstance(e, dict) and "name" in e)
            elif key != "initContainers":
                yield from _env_names(item, containers or key == "containers")
    elif isinstance(value, list):
        for item in value:
            yield from _env_names(item, containers)


def platform_env(r: Resolved) -> frozenset[str]:
    """The variables this job's pods get from the platform: its own render without the user's env."""
    bare = replace(r, spec=replace(r.spec, env={}))
    return frozenset(name for obj in render(bare) for name in _env_names(obj))
