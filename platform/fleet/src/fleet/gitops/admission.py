"""What a tenant may run, enforced by the cluster: ValidatingAdmissionPolicies and Pod Security labels.

gkr renders safe objects, but every researcher also has kubectl (DESIGN.md, "Boundaries"), so the
rules live in the API server: CEL policies (admissionregistration.k8s.io/v1, Kubernetes
"Validating Admission Policy", https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/)
bound to every namespace labelled as a team's.

- pod security: what Pod Security "baseline" refuses, except the two read-only host paths GPU pods
  need (the NVIDIA driver and the gIB plugin) and CAP_SYSLOG for preflight's dmesg; baseline itself
  cannot be enforced because it refuses every hostPath volume
  (https://kubernetes.io/docs/concepts/security/pod-security-standards/#baseline);
- queues: every workload names its team's LocalQueue, so Kueue admits it;
- priorities: no Kueue priority class above the team's ceiling, no pod PriorityClass at all;
- services: ClusterIP (headless included) or an internal load balancer open only to the fleet's pod
  ranges, never NodePort, ExternalName, external IPs or a public load balancer (a run's Lighthouse);
- deployments (a run's Lighthouse): through the team's queue, pods included, and no GPUs;
- placement: GPU nodes (the GPU taint's toleration, a GPU pool's selector) only for pods that request
  GPUs, Ray heads off GPUs, and no node chosen by name (`spec.nodeName`, node affinity `matchFields`, a
  hostname label, pod affinity reaching other namespaces) but by Kueue (Warden's signals assume the
  scheduler chose the node);
- labels: a team label on a workload or its pod templates names the namespace's own team;
- the Warden node agent patches only its own Node.

The per-team facts (queue, allowed priority classes) are baked into the expressions from the spec:
one policy per concern, no parameter objects to keep in sync. A concern that reads pod templates is
one policy per workload layout (cel.Kinds: `<concern>-pods`, `-jobs-deployments`, `-rayclusters`,
`-rayjobs`), so each expression type-checks against every kind its policy matches.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fleet import names
from fleet.gitops.cel import (
    CONTAINERS,
    NODE_NAME_LABELS,
    PODS,
    TEMPLATED,
    WORKLOAD_KINDS,
    WORKLOADS,
    Kinds,
    baseline_rest,
    each_container,
    literal,
    names_node,
    pod_affinity_in_namespace,
    requests_gpu,
    resource_rules,
    selects_gpu,
    tolerates_gpu,
    unchanged,
    validation,
    where_set,
)
from fleet.gitops.objects import Obj, obj
from fleet.load import LoadedFleet
from fleet.model import Fleet, Region

API = "admissionregistration.k8s.io/v1"
QUEUE_LABEL = names.QUEUE_LABEL
PRIORITY_LABEL = names.PRIORITY_LABEL

# Host paths GPU pods mount (gkr's render.py; the gIB installer in kustomize/base/gpu-networking fills them).
NVIDIA_HOST_PATH = names.NVIDIA_HOST_PATH
GIB_HOST_PATH = names.GIB_HOST_PATH
HOST_PATHS = (NVIDIA_HOST_PATH, GIB_HOST_PATH)
# preflight's kernel-log check reads dmesg (gkr's _preflight: root, every other capability dropped, since a
# non-root process gets no added capability under containerd). The user is not restricted, as in baseline.
CAPABILITIES = names.TEAM_CAPABILITIES
# Baseline's original safe sysctls; later additions are left out until a job needs one.
SYSCTLS = (
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
)

# Controllers that create children of admitted workloads without copying the queue label: the Job
# controller (a Job's pods; GKE's controller manager uses per-controller service accounts) and the
# KubeRay operator (a RayCluster's pods, a RayJob's submitter Job; `kuberay-operator` application
# in argocd.py, namespace ray-system, the chart's default service account).
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
KUBERAY_OPERATOR = "system:serviceaccount:ray-system:kuberay-operator"
CONTROLLERS = (JOB_CONTROLLER, KUBERAY_OPERATOR)
# Kueue's controller manager: the chart's `<release>-controller-manager` in the `kueue` Application's namespace
# (argocd.py; the release is the Application's name). Its topology ungater writes a node's hostname into the
# pods it ungates (kueue v0.19.2 pkg/controller/tas/topology_ungater.go `Reconcile`).
KUEUE_CONTROLLER = "system:serviceaccount:kueue-system:kueue-controller-manager"

WARDEN_AGENT_KSA = "warden-agent"  # kustomize/base/warden/agent.yaml
# The node a pod-bound service account token was issued for (KEP-4193; k8s.io/apiserver
# pkg/authentication/serviceaccount NodeNameKey; "Schema for service account private claims" in
# https://kubernetes.io/docs/reference/access-authn-authz/service-accounts-admin/).
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

# Pod Security Admission on team namespaces: enforcing baseline would refuse gkr's hostPath and
# SYSLOG, so enforcement is "privileged" (explicit, so a cluster default cannot change it) and the
# policies below do the real work; audit at baseline records every exception in the audit log.
# No `warn`: every GPU job would warn, and warnings nobody acts on teach people to ignore them.
POD_SECURITY_LABELS = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/audit": "baseline",
}

TEAM_SELECTOR = {"matchExpressions": [{"key": names.TEAM_LABEL, "operator": "Exists"}]}

POD_SECURITY = "meridian-team-pod-security"
QUEUES = "meridian-team-queues"
PRIORITIES = "meridian-team-priorities"
SERVICES = "meridian-team-services"
DEPLOYMENTS = "meridian-team-deployments"
AGENT_NODE = "meridian-warden-agent-own-node"
PLACEMENT = "meridian-team-placement"
LABELS = "meridian-team-labels"


def team_namespace_labels(fleet: Fleet, team: str) -> dict[str, str]:
    """Labels of a team namespace: the team (the policies' selector), Kueue's management (the manager
    Configuration's managedJobsNamespaceSelector, fleet.gitops.kueue) and Pod Security levels."""
    return {
        names.TEAM_LABEL: team,
        names.KUEUE_MANAGED_LABEL: "true",
        **POD_SECURITY_LABELS,
        "pod-security.kubernetes.io/audit-version": f"v{fleet.versions.kubernetes}",
    }


def _host_validations() -> list[dict[str, str]]:
    """No host namespaces; host paths only the GPU ones, and those read-only."""
    host_paths = literal(list(HOST_PATHS))
    read_only = "!has(c.volumeMounts) || c.volumeMounts.all(m, m.name != v.name || (has(m.readOnly) && m.readOnly))"
    return [
        validation(
            "variables.templates.all(p, !(has(p.hostNetwork) && p.hostNetwork) && "
            "!(has(p.hostPID) && p.hostPID) && !(has(p.hostIPC) && p.hostIPC))",
            "team pods may not use the host's network, PID or IPC namespace",
        ),
        validation(
            f"variables.templates.all(p, !has(p.volumes) || p.volumes.all(v, !has(v.hostPath) || v.hostPath.path in {host_paths}))",
            f"team pods may mount only these host paths: {', '.join(HOST_PATHS)}",
        ),
        validation(
            # Ephemeral containers declare no volumes but mount the pod's (`kubectl debug`); a list of
            # their own, as they are another type than containers.
            "variables.templates.all(p, !has(p.volumes) || p.volumes.all(v, !has(v.hostPath) || "
            "([has(p.containers) ? p.containers : [], has(p.initContainers) ? p.initContainers : []].all(cs, "
            f"cs.all(c, {read_only})) && (!has(p.ephemeralContainers) || p.ephemeralContainers.all(c, {read_only})))))",
            "team pods must mount host paths read-only (readOnly: true), ephemeral containers too",
        ),
    ]


def _container_validations() -> list[dict[str, str]]:
    """Baseline's controls on containers and pod security contexts."""
    return [
        validation(
            each_container(where_set("privileged", "!c.securityContext.privileged")),
            "team pods may not run privileged containers",
        ),
        validation(
            each_container(where_set("allowPrivilegeEscalation", "!c.securityContext.allowPrivilegeEscalation")),
            "team pods may not set allowPrivilegeEscalation: true",
        ),
        validation(
            each_container(
                where_set(
                    "capabilities",
                    "!has(c.securityContext.capabilities.add) || "
                    f"c.securityContext.capabilities.add.all(a, a in {literal(list(CAPABILITIES))})",
                )
            ),
            f"team pods may add only these capabilities: {', '.join(CAPABILITIES)}",
        ),
        validation(
            each_container("!has(c.ports) || c.ports.all(port, !has(port.hostPort) || port.hostPort == 0)"),
            "team pods may not use host ports",
        ),
        validation(
            each_container(
                "!has(c.securityContext) || ((!has(c.securityContext.procMount) || "
                f"c.securityContext.procMount == 'Default') && {baseline_rest('c.securityContext')})"
            )
            + " && variables.templates.all(p, !has(p.securityContext) || ("
            + baseline_rest("p.securityContext")
            + " && (!has(p.securityContext.sysctls) || "
            + f"p.securityContext.sysctls.all(s, s.name in {literal(list(SYSCTLS))}))))",
            "team pods may not unmask /proc, run unconfined (seccomp, AppArmor), set SELinux user, role or "
            "a non-container type, run Windows host processes or set unsafe sysctls",
        ),
    ]


def pod_security_policies() -> list[Obj]:
    validations = [*_host_validations(), *_container_validations()]
    return per_kinds(
        POD_SECURITY,
        lambda kinds: ([_templates(kinds), {"name": "containers", "expression": CONTAINERS}], validations),
        # `kubectl debug` adds ephemeral containers through the Pod's subresource.
        pod_extra=(("", "v1", ("pods/ephemeralcontainers",)),),
    )


def queue_policy(fleet: Fleet) -> Obj:
    """Every workload in a team namespace names the team's own LocalQueue, so Kueue admits it.

    A child a platform controller creates from an admitted workload (a Job's pods, a RayCluster's
    pods, a RayJob's submitter Job) may carry no queue label: its parent was admitted here. An update
    may keep whatever label the object had (controllers patch pods Kueue never managed) but never
    move it to another queue or drop it.
    """
    queues = {team.name: names.local_queue(team.name) for team in fleet.teams}
    variables = [
        {"name": "team", "expression": f"namespaceObject.metadata.labels[{literal(names.TEAM_LABEL)}]"},
        {
            "name": "queue",
            "expression": f"has(object.metadata.labels) && {literal(QUEUE_LABEL)} in object.metadata.labels ? "
            f"object.metadata.labels[{literal(QUEUE_LABEL)}] : ''",
        },
        {
            "name": "oldQueue",
            "expression": f"request.operation == 'UPDATE' && has(oldObject.metadata.labels) && {literal(QUEUE_LABEL)} in "
            f"oldObject.metadata.labels ? oldObject.metadata.labels[{literal(QUEUE_LABEL)}] : ''",
        },
    ]
    validations = [
        {
            "expression": f"(variables.team in {literal(queues)} && variables.queue == {literal(queues)}[variables.team]) || "
            f"(variables.queue == '' && request.userInfo.username in {literal(list(CONTROLLERS))}) || "
            "(request.operation == 'UPDATE' && variables.queue == variables.oldQueue)",
            "message": f"workloads in a team namespace must carry the label {QUEUE_LABEL}: <the team's LocalQueue>",
            "messageExpression": f"'workloads in ' + request.namespace + ' must carry the label {QUEUE_LABEL}: ' + "
            f"{literal(queues)}[variables.team] + ', the LocalQueue of the team'",
            "reason": "Forbidden",
        }
    ]
    return validating_policy(QUEUES, resource_rules(WORKLOADS, ("CREATE", "UPDATE")), variables, validations)


def allowed_priorities(fleet: Fleet) -> dict[str, list[str]]:
    """team -> the Kueue WorkloadPriorityClasses at or below its ceiling, sorted by name."""
    values = {p.name: p.value for p in fleet.priorities}
    return {
        team.name: sorted(name for name, value in values.items() if value <= values[team.ceiling])
        for team in fleet.teams
    }


def priority_policies(fleet: Fleet) -> list[Obj]:
    """No Kueue priority class above the team's ceiling; no pod PriorityClass.

    Kueue orders and preempts workloads by their WorkloadPriorityClass (the label). A pod
    `priorityClassName` would let the scheduler preempt other teams' pods behind Kueue's back, and
    the fleet defines no PriorityClass for tenants (only system-*, which GKE keeps for kube-system
    and quota-holding namespaces), so team pods carry none.
    """
    allowed = allowed_priorities(fleet)
    team = {"name": "team", "expression": f"namespaceObject.metadata.labels[{literal(names.TEAM_LABEL)}]"}
    label = literal(PRIORITY_LABEL)
    validations = [
        {
            "expression": f"!has(object.metadata.labels) || !({label} in object.metadata.labels) || "
            f"(variables.team in {literal(allowed)} && object.metadata.labels[{label}] in {literal(allowed)}[variables.team])",
            "message": f"{PRIORITY_LABEL} names a class above the team's ceiling",
            # Pre-joined: the test evaluator has no strings.join.
            "messageExpression": f"'{PRIORITY_LABEL} in ' + request.namespace + ' must be one of: ' + "
            f"{literal({t: ', '.join(a) for t, a in allowed.items()})}[variables.team]",
            "reason": "Forbidden",
        },
        validation(
            "variables.templates.all(p, !has(p.priorityClassName) || p.priorityClassName == '')",
            f"team pods take their priority from Kueue ({PRIORITY_LABEL}), never from priorityClassName",
        ),
    ]
    return per_kinds(PRIORITIES, lambda kinds: ([team, _templates(kinds)], validations))


def pod_ranges(loaded: LoadedFleet) -> list[str]:
    """Every cluster's pod range, from the address plan: the only sources a team's load balancer may admit."""
    return sorted(str(r.pods.cidr) for r in loaded.addresses.regions)


def service_policy(ranges: list[str]) -> Obj:
    """Team Services stay inside the fleet's network.

    ClusterIP (and headless) as before; a LoadBalancer only as GKE's internal passthrough load balancer
    (the annotation; no loadBalancerClass, which would choose another implementation) with
    loadBalancerSourceRanges inside the fleet's pod ranges, which GKE turns into the load balancer's
    firewall rule (GKE docs, "LoadBalancer Service parameters"). NodePort would open a port on every
    node, ExternalName and external IPs redirect traffic meant for others (CVE-2020-8554).
    """
    internal = literal(names.INTERNAL_LB_ANNOTATION)
    validations = [
        validation(
            "!has(object.spec.type) || object.spec.type == 'ClusterIP' || (object.spec.type == 'LoadBalancer' && "
            f"has(object.metadata.annotations) && {internal} in object.metadata.annotations && "
            f"object.metadata.annotations[{internal}] == 'Internal' && !has(object.spec.loadBalancerClass))",
            f"team Services are ClusterIP, or LoadBalancer with {names.INTERNAL_LB_ANNOTATION}: Internal "
            "(no loadBalancerClass); never NodePort, ExternalName or a public load balancer",
        ),
        validation(
            "!has(object.spec.type) || object.spec.type != 'LoadBalancer' || "
            "(has(object.spec.loadBalancerSourceRanges) && size(object.spec.loadBalancerSourceRanges) > 0 && "
            f"object.spec.loadBalancerSourceRanges.all(r, r in {literal(ranges)}))",
            f"a team load balancer admits only the fleet's pod ranges: set loadBalancerSourceRanges to some of "
            f"{', '.join(ranges)}",
        ),
        validation(
            "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
            "team Services may not set externalIPs",
        ),
    ]
    return validating_policy(
        SERVICES, resource_rules([("", "v1", ("services",))], ("CREATE", "UPDATE")), [], validations
    )


def deployment_policy(fleet: Fleet) -> Obj:
    """A team Deployment (a run's Lighthouse) holds no GPU, and its pods go through the team's queue.

    A Deployment never finishes and recreates its pods forever, one Kueue workload each with no gang
    admission: GPUs held that way would sit outside every job's life cycle. Its pods are created by the
    ReplicaSet controller, which copies the template's labels, so the queue label must be there too
    (the queue policy refuses the pods otherwise, later and less clearly).
    """
    queues = {team.name: names.local_queue(team.name) for team in fleet.teams}
    gpu = literal(names.GPU_RESOURCE)
    no_gpu = (
        f"!has(c.resources) || ((!has(c.resources.requests) || !({gpu} in c.resources.requests)) && "
        f"(!has(c.resources.limits) || !({gpu} in c.resources.limits)))"
    )
    labels = "object.spec.template.metadata.labels"
    variables = [
        {"name": "team", "expression": f"namespaceObject.metadata.labels[{literal(names.TEAM_LABEL)}]"},
        _templates(TEMPLATED),  # a Deployment's one template, as for Jobs
        {"name": "containers", "expression": CONTAINERS},
    ]
    validations = [
        validation(each_container(no_gpu), f"team Deployments may not request {names.GPU_RESOURCE}; use a job"),
        {
            "expression": f"has(object.spec.template.metadata) && has({labels}) && {literal(QUEUE_LABEL)} in {labels} && "
            f"variables.team in {literal(queues)} && {labels}[{literal(QUEUE_LABEL)}] == {literal(queues)}[variables.team]",
            "message": f"a team Deployment's pod template must carry {QUEUE_LABEL}: <the team's LocalQueue>",
            "messageExpression": f"'a Deployment in ' + request.namespace + ' must carry {QUEUE_LABEL}: ' + "
            f"{literal(queues)}[variables.team] + ' in its pod template too'",
            "reason": "Forbidden",
        },
    ]
    return validating_policy(
        DEPLOYMENTS, resource_rules([("apps", "v1", ("deployments",))], ("CREATE", "UPDATE")), variables, validations
    )


def placement_policies(region: Region) -> list[Obj]:
    """GPU nodes only for pods that use GPUs, Ray heads on the CPU pool, and the scheduler places every pod.

    GKE taints GPU nodes (nvidia.com/gpu) and adds the toleration to pods that request GPUs
    (https://cloud.google.com/kubernetes-engine/docs/how-to/gpus#create, "taints"), so a pod that
    tolerates the taint or picks a GPU pool without requesting a GPU can only mean to hold a GPU node
    while the team's GPU quota shows none used. A Ray head takes no GPU (gkr puts it on the CPU pool;
    with GPUs it would hold them for the cluster's whole life). `spec.nodeName` skips the scheduler,
    the taints and Kueue's placement, and pins a pod to any node, another team's included; Warden
    relies on it not being the tenant's choice. A Pod's nodeName is checked on CREATE only: the
    scheduler's binding sets it and every later update carries it. The other ways to name a node are
    refused likewise (_node_name_validations).
    """
    pools = sorted(p.name for p in region.gpu_pools)
    # Per pod template: [requests a GPU, tolerates the GPU taint or selects a GPU pool].
    gpu = f"variables.templates.map(p, [{requests_gpu('p')}, {tolerates_gpu('p')} || {selects_gpu('p', pools)}])"
    head = validation(
        "!variables.headFirst || !(variables.gpu[0][0] || variables.gpu[0][1])",
        f"Ray heads run on the CPU pool: a head may not request {names.GPU_RESOURCE}, tolerate the "
        f"{names.GPU_TAINT_KEY} taint or select a GPU pool ({', '.join(pools)}); put GPUs in a worker group",
    )
    rest = [
        validation(
            "variables.gpu.all(g, g[0] || !g[1])",
            f"team pods that tolerate the {names.GPU_TAINT_KEY} taint or select a GPU pool ({', '.join(pools)}) "
            f"must request {names.GPU_RESOURCE}: without it they hold a GPU node outside the team's GPU quota",
        ),
        validation(
            "(request.resource.resource == 'pods' && request.operation != 'CREATE') || "
            "variables.templates.all(p, !has(p.nodeName) || p.nodeName == '')",
            "team pods may not set spec.nodeName: the scheduler places them (Kueue's flavors, node taints)",
        ),
    ]

    def build(kinds: Kinds) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
        variables = [_templates(kinds), {"name": "gpu", "expression": gpu}]
        validations = [*rest, *_node_name_validations(kinds)]
        if kinds.head_first == "false":  # Jobs and Deployments hold no Ray head
            return variables, validations
        return [*variables, {"name": "headFirst", "expression": kinds.head_first}], [head, *validations]

    return per_kinds(PLACEMENT, build)


def _node_name_validations(kinds: Kinds) -> list[dict[str, str]]:
    """No node chosen by name, for a team's own requests: node affinity `matchFields`, a hostname label in a
    nodeSelector or node affinity term (cel.names_node), pod (anti-)affinity reaching other namespaces.

    Kueue's own writes pass: with topology-aware scheduling its ungater patches a gated pod's nodeSelector
    with the hostname of the node it assigned (KUEUE_CONTROLLER), which Kubernetes allows while the pod is
    gated (https://kubernetes.io/docs/concepts/scheduling-eviction/pod-scheduling-readiness/, "Mutable Pod
    scheduling directives"), and by the same rule anyone else could. A Pod's later UPDATEs (the Job
    controller's finalizer, a relabel) carry Kueue's choice: they pass while nodeSelector and affinity are
    unchanged. Every other kind's templates never carry a node's name (Kueue writes it into pods only).
    """
    labels = " or ".join(NODE_NAME_LABELS)
    kueue = f"request.userInfo.username == {literal(KUEUE_CONTROLLER)}"
    allowed = f"{kueue} || ({unchanged('nodeSelector', 'affinity')})" if kinds is PODS else kueue
    return [
        validation(
            f"{allowed} || !variables.templates.exists(p, {names_node('p')})",
            f"team pods may not choose a node by name: no node affinity matchFields, no {labels} label in a "
            "nodeSelector or node affinity; Kueue places them (kueue.x-k8s.io/podset-*-topology annotations)",
        ),
        validation(
            f"{allowed} || variables.templates.all(p, {pod_affinity_in_namespace('p')})",
            "team pods' podAffinity and podAntiAffinity may look only at their own namespace's pods: "
            "no namespaceSelector, no other namespaces",
        ),
    ]


def label_policies() -> list[Obj]:
    """A workload's and its pods' team label, where set, is the namespace's team.

    Tenants set pod labels; metrics, dashboards and alerts must not be able to show one team's pod as
    another's. Absent is allowed: children KubeRay builds (a RayJob's submitter) carry none, and the
    metrics take the team from the namespace anyway.
    """
    team = literal(names.TEAM_LABEL)
    validations = [
        {
            "expression": f"(!has(object.metadata.labels) || !({team} in object.metadata.labels) || "
            f"object.metadata.labels[{team}] == variables.team) && "
            f"variables.labels.all(l, !({team} in l) || l[{team}] == variables.team)",
            "message": f"{names.TEAM_LABEL} must name the namespace's team, on the object and its pod templates",
            "messageExpression": f"'{names.TEAM_LABEL} in ' + request.namespace + ' must be ' + variables.team + "
            "', the team of the namespace, on the object and its pod templates'",
            "reason": "Forbidden",
        }
    ]
    return per_kinds(
        LABELS,
        lambda kinds: (
            [
                {"name": "team", "expression": f"namespaceObject.metadata.labels[{team}]"},
                {"name": "labels", "expression": kinds.template_labels},
            ],
            validations,
        ),
    )


def agent_node_policy() -> Obj:
    """Warden's node agent may change only the Node its pod runs on.

    The agent's token is bound to its pod, and the API server puts that pod's node into the
    request's user info (NODE_NAME_EXTRA, Kubernetes >= 1.32 for tokens the kubelet issues); a request
    without it, or naming another node, is refused. PATCH arrives as UPDATE.
    """
    agent = f"system:serviceaccount:{names.WARDEN_NAMESPACE}:{WARDEN_AGENT_KSA}"
    key = literal(NODE_NAME_EXTRA)
    policy = validating_policy(
        AGENT_NODE,
        resource_rules([("", "v1", ("nodes", "nodes/status"))], ("UPDATE",)),
        [],
        [
            {
                "expression": f"has(request.userInfo.extra) && {key} in request.userInfo.extra && "
                f"size(request.userInfo.extra[{key}]) == 1 && request.userInfo.extra[{key}][0] == request.name",
                "message": "the Warden node agent may change only its own Node",
                "messageExpression": "'the Warden node agent may change only its own Node, not ' + request.name",
                "reason": "Forbidden",
            }
        ],
        namespaced=False,
    )
    policy["spec"]["matchConditions"] = [
        {"name": "warden-agent", "expression": f"request.userInfo.username == {literal(agent)}"}
    ]
    return policy


Build = Callable[[Kinds], tuple[list[dict[str, str]], list[dict[str, str]]]]


def per_kinds(concern: str, build: Build, pod_extra: tuple[tuple[str, str, tuple[str, ...]], ...] = ()) -> list[Obj]:
    """One policy per workload layout, `<concern>-<kinds>`, each matching only its kinds; `build` gives
    a layout's variables and validations. `pod_extra`: more rules for the Pod layout (subresources)."""
    found = []
    for kinds in WORKLOAD_KINDS:
        variables, validations = build(kinds)
        resources = [*kinds.resources, *(pod_extra if kinds is PODS else ())]
        rules = resource_rules(resources, ("CREATE", "UPDATE"))
        found.append(validating_policy(f"{concern}-{kinds.name}", rules, variables, copy.deepcopy(validations)))
    return found


def concern(policy_name: str) -> str:
    """The concern a policy name belongs to: `meridian-team-placement-rayjobs` -> `meridian-team-placement`."""
    for kinds in WORKLOAD_KINDS:
        if policy_name.endswith(f"-{kinds.name}"):
            return policy_name.removesuffix(f"-{kinds.name}")
    return policy_name


def _templates(kinds: Kinds) -> dict[str, str]:
    return {"name": "templates", "expression": kinds.templates}


def validating_policy(
    name: str,
    rules: list[dict[str, Any]],
    variables: list[dict[str, str]],
    validations: list[dict[str, str]],
    namespaced: bool = True,
) -> Obj:
    constraints: dict[str, Any] = {"resourceRules": rules}
    if namespaced:
        constraints["namespaceSelector"] = copy.deepcopy(TEAM_SELECTOR)
    spec: dict[str, Any] = {"failurePolicy": "Fail", "matchConstraints": constraints}
    if variables:
        spec["variables"] = variables
    spec["validations"] = validations
    return obj(API, "ValidatingAdmissionPolicy", name, spec=spec)


def policy_binding(policy: str, namespaced: bool = True) -> Obj:
    spec: dict[str, Any] = {"policyName": policy, "validationActions": ["Deny"]}
    if namespaced:
        spec["matchResources"] = {"namespaceSelector": copy.deepcopy(TEAM_SELECTOR)}
    return obj(API, "ValidatingAdmissionPolicyBinding", policy, spec=spec)


def team_policies(loaded: LoadedFleet, region: Region) -> list[Obj]:
    """The tenancy policies and their bindings, for the `teams` application."""
    fleet = loaded.fleet
    policies = [
        *pod_security_policies(),
        queue_policy(fleet),
        *priority_policies(fleet),
        service_policy(pod_ranges(loaded)),
        deployment_policy(fleet),
        *placement_policies(region),
        *label_policies(),
    ]
    return [*policies, *(policy_binding(p["metadata"]["name"]) for p in policies)]


def agent_policies() -> list[Obj]:
    """The node agent's guard, for the `warden` application."""
    return [agent_node_policy(), policy_binding(AGENT_NODE, namespaced=False)]


def policies(objects: Iterable[Obj]) -> Mapping[str, tuple[Obj, list[Obj]]]:
    """policy name -> (policy, its bindings), from built objects."""
    objects = list(objects)
    found: dict[str, tuple[Obj, list[Obj]]] = {}
    for o in objects:
        if o.get("kind") == "ValidatingAdmissionPolicy":
            found[o["metadata"]["name"]] = (o, [])
    for o in objects:
        if o.get("kind") == "ValidatingAdmissionPolicyBinding" and o["spec"]["policyName"] in found:
            found[o["spec"]["policyName"]][1].append(o)
    return found
