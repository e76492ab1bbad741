"""Team namespaces' NetworkPolicies: no ingress from another team, only what a run and the platform need.

Kubernetes NetworkPolicies are allow-lists that add up: once one selects a pod for Ingress, only what
some policy allows reaches it. Each team namespace gets

- `deny-by-default`: every pod, no rule; whatever the others do not allow is refused;
- `same-namespace`: any port from the namespace's own pods. A run's Ray head and workers (GCS 6379,
  dashboard and job API 8265, client 10001, raylets' and workers' ports chosen at run time), its
  Lighthouse and the torchft Managers, stores and NCCL/gloo sockets all stay in one namespace. The
  head's GCS, dashboard and client ports are thus reachable from the own namespace only (and from
  KubeRay below);
- `gmp-scrape`: Managed Service for Prometheus' collectors (DaemonSet `collector` in `gmp-system`, pods
  `app.kubernetes.io/name: collector`, not on the host network: prometheus-engine
  charts/operator/templates/collector.yaml and _helpers.tpl) to the trainer's metrics port only;
- `kuberay-dashboard`: the KubeRay operator (`ray-system`, `app.kubernetes.io/name: kuberay-operator`)
  to the Ray head's dashboard port only: it submits and follows a RayJob through the dashboard's job
  API; it creates pods through the API server and dials no GCS;
- `run-across-regions` (only in a fleet of several regions): from the other regions' pod ranges to the
  pods of a run across regions (`meridian.dev/run`) that are not Ray heads (the run's Lighthouse and its
  replica groups), TCP to the ports a run serves between regions only, each a named range of
  contract.names (CROSS_REGION_PORTS), as infra's cross-region firewall rule (meridian_infra/cross_region.py):
  LIGHTHOUSE_PORT (the Lighthouse behind the run's mTLS proxy, trainer/distributed/mtls.py), HEAL_TLS_PORTS (heal
  transfers over mTLS, trainer/ft/heal_tls.py), MANAGER_PORTS (torchft's Manager gRPC, which a group healing
  from another region dials; the Ray launcher gives each group one, trainer/launch/ray_supervisor.py and
  regions.manager_port; still plain: trainer/README.md) and RING_TLS_PORTS (the all-reduce between regions
  over mTLS, trainer/distributed/tls_ring.py). The groups' TCPStores, gloo/NCCL sockets, metrics and Ray's ports are not
  among them. A pod range is shared by every team, so the same ports are open to every team's pods in the
  other regions: the run's certificate is what keeps them out.

Kueue needs nothing: it admits workloads through the API server and never connects to a pod. Kubelet
probes come from the node itself, which NetworkPolicy implementations (GKE Dataplane V2) always admit.
Egress is left open: every destination a tenant could reach in the cluster refuses it at its own door.
"""

from __future__ import annotations

from collections.abc import Sequence
from ipaddress import IPv4Network
from typing import Any

from contract.names import CROSS_REGION_PORTS, RAY_NODE_TYPE_LABEL, RUN_LABEL, TRAINER_METRICS_PORTS
from fleet.gitops.monitoring.scrape import KUBERAY_NAMESPACE
from fleet.gitops.objects import Obj, obj

API = "networking.k8s.io/v1"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every Namespace
GMP_NAMESPACE = "gmp-system"
GMP_COLLECTOR = {"app.kubernetes.io/name": "collector"}
KUBERAY_OPERATOR = {"app.kubernetes.io/name": "kuberay-operator"}
# Ray's ports on the head (Ray's docs, "Configuring Ray": ports); only DASHBOARD has a rule of its own.
RAY_GCS_PORT, RAY_DASHBOARD_PORT, RAY_CLIENT_PORT = 6379, 8265, 10001
RAY_HEAD_PORTS = (RAY_GCS_PORT, RAY_DASHBOARD_PORT, RAY_CLIENT_PORT)
POLICIES = ("deny-by-default", "same-namespace", "gmp-scrape", "kuberay-dashboard", "run-across-regions")


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def _port_range(ports: range) -> dict[str, Any]:
    return {"protocol": "TCP", "port": ports.start, "endPort": ports.stop - 1}


def _from_pods(namespace: str, pods: dict[str, str]) -> dict[str, Any]:
    return {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace}},
        "podSelector": {"matchLabels": pods},
    }


def _policy(name: str, namespace: str, pods: dict[str, Any], ingress: list[dict[str, Any]]) -> Obj:
    spec = {"podSelector": pods, "policyTypes": ["Ingress"], "ingress": ingress}
    return obj(API, "NetworkPolicy", name, namespace, spec=spec)


def team_network_policies(namespace: str, peer_pod_ranges: Sequence[IPv4Network]) -> list[Obj]:
    """The NetworkPolicies of one team namespace; `peer_pod_ranges`: the other regions' pod ranges."""
    deny, same, gmp, kuberay, regions = POLICIES
    policies = [
        _policy(deny, namespace, {}, []),
        _policy(same, namespace, {}, [{"from": [{"podSelector": {}}]}]),
        _policy(
            gmp,
            namespace,
            {},
            [{"from": [_from_pods(GMP_NAMESPACE, GMP_COLLECTOR)], "ports": [_port_range(TRAINER_METRICS_PORTS)]}],
        ),
        _policy(
            kuberay,
            namespace,
            {"matchLabels": {RAY_NODE_TYPE_LABEL: "head"}},
            [{"from": [_from_pods(KUBERAY_NAMESPACE, KUBERAY_OPERATOR)], "ports": _tcp(RAY_DASHBOARD_PORT)}],
        ),
    ]
    if peer_pod_ranges:
        run_members = {
            "matchExpressions": [
                {"key": RUN_LABEL, "operator": "Exists"},
                {"key": RAY_NODE_TYPE_LABEL, "operator": "NotIn", "values": ["head"]},
            ]
        }
        sources = [{"ipBlock": {"cidr": str(cidr)}} for cidr in peer_pod_ranges]
        ports = [_port_range(r) if len(r) > 1 else _tcp(r.start)[0] for r in CROSS_REGION_PORTS]
        policies.append(_policy(regions, namespace, run_members, [{"from": sources, "ports": ports}]))
    return policies
