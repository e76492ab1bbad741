"""Every name two components must spell alike: labels, annotations, taints, conditions, Events; and the rules
names follow (DNS labels, KubeRay's and GKE's lengths, project IDs, bucket names: the end of this file).

Each string is written here once (tests/contract/test_names.py greps the
non-test code for a second spelling), each rule too (tests/contract/test_name_rules.py). A name only one
component uses stays in that component. Metric names live in their catalog, contract/metrics.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# --- Namespaces and Kubernetes service accounts -------------------------------------------------
WARDEN_NAMESPACE = "warden"
# Warden's deep check Jobs (idle sweeps, verifications): a namespace of their own, which Kueue manages
# (Kueue ignores a Job in a namespace its managedJobsNamespaceSelector leaves out, queue name or not;
# fleet.gitops.kueue) while Warden's own pods stay outside Kueue in WARDEN_NAMESPACE. Only Warden writes it.
SWEEP_NAMESPACE = "warden-sweeps"
WARDEN_KSA = "warden"
ARGOCD_NAMESPACE = "argocd"
ARGOCD_KSAS = ("argocd-application-controller", "argocd-repo-server")
# The Kubernetes service account team pods run as, one per team namespace, bound to its team's
# Google service account only.
TRAINER_KSA = "trainer"


def team_namespace(team: str) -> str:
    return f"team-{team}"


def local_queue(team: str) -> str:
    """The team's Kueue LocalQueue, in its namespace."""
    return team


# Idle-node sweeps (issue 21): Warden's deep checks run as the lowest-priority Kueue workloads, in
# SWEEP_NAMESPACE, through their own LocalQueue and ClusterQueue, which borrow idle quota and never preempt.
SWEEP_QUEUE = "warden-sweep"  # the LocalQueue (in SWEEP_NAMESPACE) and the ClusterQueue it points at
SWEEP_PRIORITY = "warden-sweep"  # the Kueue WorkloadPriorityClass and the pod PriorityClass, below every job's


# Multi-network names pods use (annotation networking.gke.io/interfaces): eth1 on
# the gVNIC network, eth2..eth9 on rdma-0..rdma-7.
GVNIC_NETWORK_OBJECT = "gvnic-1"


def rdma_network_object(index: int) -> str:
    return f"rdma-{index}"


# --- Checkpoint buckets ---------------------------------------------------------------------------
# A team's part of every checkpoint bucket is the managed folder team_prefix(team): only the team's
# Google service account may use it (infra), and gkr mounts only it into the team's pods. Inside it,
# staged data may expire, committed checkpoints never.
TEAMS_PREFIX = "teams/"
STAGED_PREFIX = "staged/"
COMMITTED_PREFIX = "checkpoints/"


def team_prefix(team: str) -> str:
    return f"{TEAMS_PREFIX}{team}/"


# --- Labels ---------------------------------------------------------------------------------------
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"  # GKE's: the node pool a node belongs to
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"  # GKE's: the node's GPU type
MAINTENANCE_LABEL = "cloud.google.com/scheduled-maintenance-time"  # GKE's: epoch seconds of host maintenance
POOL_LABEL = "meridian.dev/pool"  # Meridian's: the fleet pool (GPU or CPU) a node serves
TEAM_LABEL = "meridian.dev/team"  # every team pod and job, set by gkr and enforced by admission
JOB_LABEL = "meridian.dev/job"  # every object of one gkr job
RUN_LABEL = "meridian.dev/run"  # every object, in every cluster, of one run that spans regions
REGION_LABEL = "meridian.dev/region"  # which region's share of a multi-region run an object is
RAY_NODE_TYPE_LABEL = "ray.io/node-type"  # KubeRay's: "head" or "worker" on a Ray pod
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # Kueue's: the LocalQueue a workload is submitted to
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # Kueue's: the WorkloadPriorityClass
WARDEN_PHASE_LABEL = "meridian.dev/warden-state"  # Warden's phase of a node, for selectors and dashboards
WARDEN_OPT_OUT_LABEL = "meridian.dev/warden-opt-out"  # an operator keeps Warden's hands off a node

HOSTNAME_LABEL = "kubernetes.io/hostname"  # the kubelet's: the node's name
HOST_LABEL = "cloud.google.com/gce-topology-host"  # GKE's physical host: one A3 Ultra node
# Kueue's topology levels on GKE, widest first.
TOPOLOGY_LEVELS = (
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    HOST_LABEL,
    HOSTNAME_LABEL,
)

# --- Annotations ----------------------------------------------------------------------------------
_WARDEN = "meridian.dev/warden"
PREFLIGHT_FAILURE_ANNOTATION = "meridian.dev/preflight-failure"  # `preflight run --annotate` on the Node
WARDEN_RECORD_ANNOTATION = _WARDEN  # Warden's record of a node (JSON), on the Node
WARDEN_AUDIT_ANNOTATION = "meridian.dev/warden-audit"  # who held, released or reported a node, when, why (JSON)
PROBATION_NODE_ANNOTATION = "meridian.dev/node"  # the node a probation pod checks
DEEP_CHECK_ANNOTATION = "meridian.dev/deep-check"  # a Node's last deep check (JSON, contract.health), by Warden
NODE_EVENT_ANNOTATION = (
    "meridian.dev/node-event"  # on Warden's Events about a Node: what it says, typed (contract.health)
)
DEEP_CHECK_NODE_LABEL = "meridian.dev/deep-check-node"  # on a sweep Job: the node it checks (listed by it)
DEFAULT_PRIORITY_ANNOTATION = "meridian.dev/default-priority"  # on a team namespace
INTERFACES_ANNOTATION = "networking.gke.io/interfaces"  # GKE multi-network: a pod's extra NICs
DEFAULT_INTERFACE_ANNOTATION = "networking.gke.io/default-interface"
GCP_SERVICE_ACCOUNT_ANNOTATION = "iam.gke.io/gcp-service-account"  # Workload Identity binding of a KSA
# GKE's internal passthrough Network Load Balancer, reachable from other regions: gkr puts both on a
# run's Lighthouse Service, the team admission policy admits no other LoadBalancer (GKE docs,
# "LoadBalancer Service parameters": https://cloud.google.com/kubernetes-engine/docs/concepts/service-load-balancer-parameters).
INTERNAL_LB_ANNOTATION = "networking.gke.io/load-balancer-type"  # value "Internal"
GLOBAL_ACCESS_ANNOTATION = "networking.gke.io/internal-load-balancer-allow-global-access"  # value "true"

# --- What team pods may take from the host (gkr renders it, the cluster's admission policy allows only it)
NVIDIA_HOST_PATH = "/home/kubernetes/bin/nvidia"  # the NVIDIA driver GKE installs; the gIB installer adds NCCL
GIB_HOST_PATH = "/home/kubernetes/bin/gib"  # the gIB NCCL plugin and set_nccl_env.sh (kustomize/base/gpu-networking)
# preflight's kernel-log check reads dmesg. Only a root process gets an added capability as an effective one
# under containerd (kubernetes/kubernetes#56374), so gkr's preflight init container runs as root with every
# other capability dropped; the job's own container keeps the image's user and adds none.
TEAM_CAPABILITIES = ("SYSLOG",)

# --- The project's images -------------------------------------------------------------------------
# Where the trainer and Warden images put their virtualenv's programs (platform/*/Dockerfile: ENV PATH puts it
# first); a container that sets its own PATH (gkr's preflight init container) puts it first too.
IMAGE_VENV_BIN = "/opt/venv/bin"
# The user the trainer, generator and Warden images run as (platform/*/Dockerfile: useradd --uid IMAGE_UID,
# whose group has the same number): gkr gives pods that mount a bucket fsGroup IMAGE_GID so they may write it.
IMAGE_UID = 1000
IMAGE_GID = 1000
# The Ray every image runs (requirements/dev.in pins it; tests/contract/test_single_sources.py holds the two equal):
# gkr's RayJobs and RayClusters declare it as spec.rayVersion, which picks KubeRay's probes.
RAY_VERSION = "2.60.0"

# --- Taints and resources -------------------------------------------------------------------------
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT_KEY = GPU_RESOURCE  # GKE taints GPU nodes with their resource name
QUEUED_TAINT_KEY = "cloud.google.com/gke-queued"  # flex-start (queued provisioning) nodes
# How GKE labels a node's provisioning model; written by GKE, not by tenants. cluster-toolkit v1.95.0 selects
# flex-start A3 Ultra nodes by FLEX_START_LABEL=true (examples/gke-consumption-options/
# dws-flex-start-queued-provisioning/nccl-jobset-example.yaml) and spot or on-demand ones by
# PROVISIONING_LABEL=spot or standard (pkg/orchestrator/gke/gke_job_orchestrator.go, buildNodeSelector).
SPOT_LABEL = "cloud.google.com/gke-spot"  # "true" on Spot VMs
PREEMPTIBLE_LABEL = "cloud.google.com/gke-preemptible"  # "true" on preemptible VMs
FLEX_START_LABEL = "cloud.google.com/gke-flex-start"  # "true" on flex-start VMs
PROVISIONING_LABEL = "cloud.google.com/gke-provisioning"
# GKE taints a node it is about to reclaim (spot preemption, host maintenance).
IMPENDING_TERMINATION_TAINT_KEY = "cloud.google.com/impending-node-termination"
WARDEN_TAINT_KEY = _WARDEN  # Warden's NoSchedule taint while a node is out of service

QUEUED_TOLERATION = {"key": QUEUED_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
# GPU pods tolerate it so they keep running, and checkpointing, until the node goes (gpu-recipes a3ultra).
IMPENDING_TERMINATION_TOLERATION = {
    "key": IMPENDING_TERMINATION_TAINT_KEY,
    "operator": "Exists",
    "effect": "NoSchedule",
}

# --- Node conditions (Warden's node agent writes them, Warden's service reads them) ---------------
XID_CONDITION = "GPUXid"
SXID_CONDITION = "NVSwitchSXid"

# --- Event reasons --------------------------------------------------------------------------------
NCCL_FAILURE_REASON = "NCCLFailure"  # trainer pods report NCCL errors on their node; Warden counts them
WARDEN_COMPONENT = _WARDEN  # reportingComponent of Warden's Events
WARDEN_ACTION_REASON = "WardenAction"


def warden_phase_reason(phase: str) -> str:
    """The Event reason of a node entering `phase` (WardenQuarantined, WardenHealthy...)."""
    return f"Warden{phase.capitalize()}"


WARDEN_HEALTHY_REASON = warden_phase_reason("healthy")


# --- Documents one component writes and another reads ---------------------------------------------
# preflight's report, and the failure it writes to a Node annotation or a termination message (Warden reads it).
PREFLIGHT_REPORT_SCHEMA = "meridian.preflight/v1"

# --- ConfigMaps the generator writes and the components read --------------------------------------
WARDEN_CONFIGMAP = "warden-policy"  # Warden's config (contract.warden), in WARDEN_NAMESPACE

# --- Environment gkr sets in a training pod and the trainer reads ---------------------------------
# The pod's node (spec.nodeName through the downward API, gkr renders it): read by preflight, the trainer's
# NCCL Events and sub-block placement, and Warden's agent.
NODE_NAME_ENV = "NODE_NAME"
# The Ray cluster a process joins. KubeRay sets RAY_ADDRESS in every Ray container, and Ray's job supervisor sets
# it for a RayJob's driver. Without it, ray.init(address=None) joins the cluster ray_current_cluster names in Ray's
# temp dir (`ray start` and ray.cluster_utils write it; ray._private.services.get_ray_address_from_environment):
# on a shared machine another user's cluster or a dead one. "local" always starts a Ray of the process's own.
RAY_ADDRESS_ENV = "RAY_ADDRESS"


def ray_address(environ: Mapping[str, str]) -> str:
    """ray.init's address: the pod's cluster, or a new local Ray (never the last one started on the machine)."""
    return environ.get(RAY_ADDRESS_ENV) or "local"


PEAK_TFLOPS_ENV = "MERIDIAN_PEAK_BF16_TFLOPS"  # dense bf16 peak per GPU of the pod's machine: MFU's denominator
REPLICA_GROUPS_ENV = "MERIDIAN_REPLICA_GROUPS"  # how many replica groups the job's GPUs form
GROUP_SIZE_ENV = "MERIDIAN_GROUP_SIZE"  # ranks (one per GPU) in each replica group
# An RL job (gkr `roles`, issue 30): one RayJob, a worker group per role, each with a Ray custom resource
# of this name (one unit per GPU, or per CPU on CPU pods) so that the driver pins each actor to its role.
ROLE_ENV = "MERIDIAN_ROLE"  # the role of the pod's worker group: a key of ROLE_RESOURCES
TENSOR_PARALLEL_ENV = "MERIDIAN_TP"  # GPUs per inference engine: on generator pods and the head (the driver)
# The job's inference engines (generator pods x gpus_per_pod / tensor_parallel; one per CPU pod): rl.generators.
GENERATORS_ENV = "MERIDIAN_GENERATORS"
# The generators' engines (the trainer's rl.engine). A torch engine is the trainer's model on one device, so
# tensor parallel above 1 needs vLLM: the trainer refuses it at start, gkr at submit unless the command says
# ENGINE_OVERRIDE=VLLM_ENGINE (the trainer's configuration cannot be read from outside its image).
TORCH_ENGINE = "torch"
VLLM_ENGINE = "vllm"
RL_ENGINES = (TORCH_ENGINE, VLLM_ENGINE)
ENGINE_OVERRIDE = "rl.engine"  # the key, as a command-line override of the trainer's configuration names it
ROLE_RESOURCES = {"trainer": "meridian_trainer", "generators": "meridian_generator"}
# A run across regions (issue 19): one Lighthouse for the run, one RayJob per region.
RUN_ID_ENV = "MERIDIAN_RUN_ID"  # the run's id, the same in every region
REGION_ENV = "MERIDIAN_REGION"  # this RayJob's region: replica ids are "<region>/<group>", unique in the run
# The address a group's servers (torchft's Manager, its heal transfers) give their peers: the pod's IP. A pod's
# hostname resolves in no other pod (cluster DNS names Services, not pods), and torchft advertises its own.
ADVERTISE_HOST_ENV = "MERIDIAN_ADVERTISE_HOST"
LIGHTHOUSE_ENV = "TORCHFT_LIGHTHOUSE"  # torchft's own variable: the run's Lighthouse address (http://host:port)
RESUME_FROM_ENV = "MERIDIAN_RESUME_FROM"  # other regions' checkpoint dirs (comma-separated): resume takes the newest
# Where the run may resume from at all (comma-separated gs:// folders): the team's folder of each fleet checkpoint
# bucket, the only prefixes its identity can write. Set: the trainer refuses any other location. Unset: local only.
CHECKPOINT_ROOTS_ENV = "MERIDIAN_CHECKPOINT_ROOTS"
CHECKPOINT_DIR_ENV = "MERIDIAN_CHECKPOINT_DIR"  # the mount of this region's team folder, where checkpoint.dir lies
LIGHTHOUSE_PORT = 29510  # torchft's default Lighthouse port; the Lighthouse Service and the network rule use it
# Who may join a run (issue 27, trainer/distributed/mtls.py): the run's TLS identity (ca.crt, tls.crt, tls.key), mounted from
# a Secret gkr mints per run; the Lighthouse's certificate carries this DNS name, which members verify.
RUN_TLS_ENV = "MERIDIAN_RUN_TLS"  # the folder the identity is mounted at
RUN_TLS_DIR = "/etc/meridian/run-tls"
LIGHTHOUSE_TLS_NAME = "lighthouse.run.meridian.internal"
# The members' certificate carries this name too (and serverAuth): each group serves its heal transfers (trainer/ft/heal_tls.py)
# and its ring between regions (trainer/distributed/tls_ring.py) with it, and its peers verify it; a member's certificate cannot pass
# for the Lighthouse's.
MEMBER_TLS_NAME = "member.run.meridian.internal"
# Heal transfers over the run's TLS (trainer/ft/heal_tls.py) listen on the first free of these ports of the pod's IP: one
# per rank in the pod (at most one per GPU of an 8-GPU node), so a rule can name them; clear of torch's MASTER_PORT
# 29500, the Lighthouse's 29510/29511 and Linux's ephemeral range (32768-60999).
HEAL_TLS_PORT = 29520
HEAL_TLS_SLOTS = 8
HEAL_TLS_PORTS = range(HEAL_TLS_PORT, HEAL_TLS_PORT + HEAL_TLS_SLOTS)
# The torchft Manager's gRPC (rank 0 of each group; torchft 0.2.0 manager.py Manager.__init__ binds "[::]:<port=>"):
# a group healing from one in another region dials the source's Manager (CheckpointMetadata), so its port must be
# nameable too. One per group on a node (at most one per GPU of an 8-GPU node): the Ray launcher gives a run across
# regions MANAGER_PORT + the group's slot on its node (trainer.launch.ray_supervisor.node_slot). Between HEAL_TLS_PORTS and
# the groups' stores (RING_TLS_PORTS - 64 = 29536-29599). Still plain gRPC: trainer/README.md says what that leaves.
MANAGER_PORT = 29528
MANAGER_SLOTS = 8
MANAGER_PORTS = range(MANAGER_PORT, MANAGER_PORT + MANAGER_SLOTS)
POD_IP_ENV = "POD_IP"  # the downward API's status.podIP, where a run's servers across regions listen (gkr renders it)
# The ring between regions (trainer/distributed/tls_ring.py): each replica-group process of a run with a TLS identity listens
# on one of these ports of its pod's IP, TLS only (up to 8 GPUs x 8 ranks per pod); its group's plain TCPStore, when
# it hosts one, on the port len(RING_TLS_PORTS) below, which no other region needs. The cross-region network rule
# admits these, LIGHTHOUSE_PORT, HEAL_TLS_PORTS and MANAGER_PORTS (CROSS_REGION_PORTS), nothing else.
RING_TLS_PORTS = range(29600, 29664)
# What a run's pods serve to other regions (fleet's NetworkPolicy run-across-regions, infra's cross-region firewall).
CROSS_REGION_PORTS = (range(LIGHTHOUSE_PORT, LIGHTHOUSE_PORT + 1), HEAL_TLS_PORTS, MANAGER_PORTS, RING_TLS_PORTS)
LIGHTHOUSE_INNER_PORT = 29511  # the Lighthouse itself, on its pod's loopback behind the mTLS proxy on LIGHTHOUSE_PORT
# The port the trainer serves its metrics on (contract.metrics.TRAINER), in every GPU pod of a job; the generated
# ClusterPodMonitoring scrapes it by number, which needs no declared containerPort. Clear of Ray's own ports
# (8080 metrics export, 8265 dashboard, 6379 GCS, 10001 client, 52365 agent), DCGM's 9400 and Warden's 9090.
TRAINER_METRICS_PORT = 9464
# Under Ray each replica group's rank 0 serves on TRAINER_METRICS_PORT + its slot on the node (trainer.launch.ray_supervisor):
# up to one group per GPU of an 8-GPU node, so the scrape and the NetworkPolicy cover this many ports.
TRAINER_METRICS_SLOTS = 8
TRAINER_METRICS_PORTS = range(TRAINER_METRICS_PORT, TRAINER_METRICS_PORT + TRAINER_METRICS_SLOTS)


# --- Name rules (issue 40: gkr, fleet, the twin and the registry each wrote their own, and they differed) -----
# Kubernetes' (k8s.io/apimachinery/pkg/util/validation): a DNS-1035 label names a Service, a RayCluster or a RayJob,
# and, as Compute Engine's RFC 1035 rule, GCE resources, GKE clusters and node pools; a DNS-1123 label names a
# namespace; a DNS-1123 subdomain a node; a label value is its own shape. Whole strings only (fullmatch: `$` would
# let a trailing newline through).
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
_DNS1035_LABEL = re.compile(r"[a-z](?:[-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
GKE_NAME_MAX = 40  # a GKE cluster or node pool name (the API's limit)
# KubeRay (ray-operator/controllers/ray/utils/constant.go): the names of the objects it creates build on these.
RAYCLUSTER_NAME_MAX = 53  # MaxRayClusterNameLength: 63 less len("-serve-svc")
RAYJOB_NAME_MAX = RAYCLUSTER_NAME_MAX - 6  # MaxRayJobNameLength: its RayCluster's name is the RayJob's and a suffix
_PROJECT_ID = re.compile(r"[a-z][-a-z0-9]{4,28}[a-z0-9]")  # Resource Manager: 6-30, a letter first, not '-' last
# Cloud Storage (https://cloud.google.com/storage/docs/buckets#naming): 3-63 characters (dotted names up to 222
# need a verified domain: never here), a letter or digit at both ends.
_BUCKET = re.compile(r"[a-z0-9][-_.a-z0-9]{1,61}[a-z0-9]")
_CHECK_NAME = re.compile(r"[a-z0-9][-_.a-z0-9]{0,62}")  # preflight's checks ("dcgm-diag", "gpu-state"), in reports


def is_dns1035_label(name: str, limit: int = DNS_LABEL_MAX) -> bool:
    """A lowercase letter, then lowercase letters, digits or '-', not ending with '-'; at most `limit` long."""
    return len(name) <= limit and _DNS1035_LABEL.fullmatch(name) is not None


def is_dns1123_label(name: str, limit: int = DNS_LABEL_MAX) -> bool:
    """As a DNS-1035 label, but it may start with a digit."""
    return len(name) <= limit and _DNS1123_LABEL.fullmatch(name) is not None


def is_dns1123_subdomain(name: str) -> bool:
    """DNS-1123 labels joined by '.', at most 253 characters (a node's name)."""
    return 0 < len(name) <= DNS_SUBDOMAIN_MAX and all(is_dns1123_label(part) for part in name.split("."))


def is_label_value(value: str) -> bool:
    """Empty, or at most 63 letters, digits, '-', '_' or '.', a letter or digit at both ends."""
    return len(value) <= DNS_LABEL_MAX and _LABEL_VALUE.fullmatch(value) is not None


def is_project_id(name: str) -> bool:
    return _PROJECT_ID.fullmatch(name) is not None


def is_check_name(name: str) -> bool:
    return _CHECK_NAME.fullmatch(name) is not None


def bucket_problem(name: str, dots: bool = True) -> str | None:
    """Why Cloud Storage would refuse `name` as a bucket name (after "is not a valid bucket name: "), or None.

    `dots=False`: a bucket the fleet creates, where a dot would need a verified domain.
    """
    chars = "lowercase letters, digits, '-', '_' or '.' (no '..')" if dots else "lowercase letters, digits, '-' or '_'"
    if not _BUCKET.fullmatch(name) or ".." in name or (not dots and "." in name):
        return f"3-63 {chars}, starting and ending with a letter or digit"
    if name.startswith("goog") or "google" in name:
        return "Cloud Storage refuses bucket names that start with 'goog' or contain 'google'"
    if "." in name:
        import ipaddress  # only a dotted name can be an address: imported where it is needed

        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            return None
        return "Cloud Storage refuses an IPv4 address in dotted-decimal form"
    return None


def is_bucket_name(name: str, dots: bool = True) -> bool:
    return bucket_problem(name, dots) is None
